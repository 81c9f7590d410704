// The amqp10 broker's web console: plain JavaScript, no libraries, nothing from the network.
// Views: #/ (overview), #/connections, #/node/<vhost>/<type>/<name>, and the pages over
// RabbitMQ's HTTP API (#/queues, #/exchanges, #/vhosts, #/users, #/policies, #/definitions).
// Data from /console/api/* (the last ones through /console/api/rmq/*, as the session's user).
"use strict";

const API = "/console/api/";
const POLL_MS = 1000;
const CHART_POINTS = 120; // two minutes at one point a second
const SERIES = [
  { key: "in", label: "published", color: "#2563eb" },
  { key: "out", label: "delivered", color: "#16a34a" },
  { key: "ack", label: "acknowledged", color: "#9333ea" },
];

const state = { user: null, csrf: null, timer: null, last: null, points: [] };
const $ = (id) => document.getElementById(id);

// -- talking to the broker ---------------------------------------------------------------
class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

async function api(path, body) {
  const init = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.headers["x-csrf-token"] = state.csrf || "";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(API + path, init);
  let data = {};
  try { data = await r.json(); } catch (e) { data = { error: `${r.status} ${r.statusText}` }; }
  if (!r.ok) {
    if (r.status === 401 && path !== "login" && path !== "session") showLogin("Your session has ended: log in again.");
    throw new ApiError(r.status, data.error || `${r.status} ${r.statusText}`);
  }
  return data;
}

// RabbitMQ's HTTP API as this session's user: ``/console/api/rmq/PATH`` is ``/api/PATH``.
async function rmq(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (method !== "GET") {
    init.headers["content-type"] = "application/json";
    init.headers["x-csrf-token"] = state.csrf || "";
    init.body = typeof body === "string" ? body : JSON.stringify(body ?? {});
  }
  const r = await fetch(API + "rmq/" + path, init);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: `${r.status} ${r.statusText}` }; }
  if (!r.ok) {
    if (r.status === 401 && data && data.error === "not logged in (or the session expired)") showLogin("Your session has ended: log in again.");
    throw new ApiError(r.status, (data && (data.reason || data.error)) || `${r.status} ${r.statusText}`);
  }
  return data;
}
const enc = encodeURIComponent;

function query(params) {
  return Object.entries(params).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");
}

// -- small helpers ------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return e;
}

function fmtNum(n) { return Number(n || 0).toLocaleString("en-US"); }
function fmtRate(n) { return Number(n || 0).toLocaleString("en-US", { maximumFractionDigits: 1 }); }
function fmtBytes(n) {
  n = Number(n || 0);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toLocaleString("en-US", { maximumFractionDigits: i ? 1 : 0 })} ${units[i]}`;
}
function fmtAge(epochSeconds) {
  const s = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

let toastTimer = null;
function toast(text, bad = false) {
  const t = $("status");
  t.textContent = text;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 4000);
}

function confirmAction(text) {
  const d = $("confirm");
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.returnValue = "cancel";
    d.showModal();
  });
}

// -- views --------------------------------------------------------------------------------
const PAGES = ["queues", "exchanges", "vhosts", "users", "policies", "definitions"];
const VIEWS = ["login-view", "overview-view", "connections-view", "node-view", ...PAGES.map((p) => `${p}-view`)];
function show(view) {
  for (const v of VIEWS) $(v).hidden = v !== view;
  $("connections-view").hidden = view !== "connections-view" && view !== "overview-view"; // both list them
  $("bar").hidden = view === "login-view";
  for (const name of ["overview", "connections", ...PAGES]) $(`nav-${name}`).classList.toggle("active", view === `${name}-view`);
}

function showLogin(message) {
  stopPolling();
  state.user = state.csrf = null;
  show("login-view");
  const e = $("login-error");
  e.textContent = message || "";
  e.hidden = !message;
  $("login-user").focus();
}

function route() {
  if (!state.user) return;
  const hash = location.hash.replace(/^#\/?/, "");
  const parts = hash.split("/").map(decodeURIComponent);
  stopPolling();
  state.last = null;
  if (parts[0] === "connections") { show("connections-view"); poll(refreshOverview); }
  else if (PAGES.includes(parts[0])) { show(`${parts[0]}-view`); refreshPage(parts[0]); }
  else if (parts[0] === "node" && parts.length >= 4) {
    const node = { vhost: parts[1], type: parts[2], name: parts.slice(3).join("/") };
    state.node = node;
    show("node-view");
    $("node-title").textContent = `${node.type} ${node.name}`;
    $("messages").querySelector("tbody").replaceChildren();
    $("messages-empty").hidden = true;
    poll(refreshNode);
  } else { show("overview-view"); poll(refreshOverview); }
}

function poll(fn) {
  const tick = async () => {
    try { await fn(); } catch (e) { if (!(e instanceof ApiError && e.status === 401)) toast(e.message, true); }
    if (state.user) state.timer = setTimeout(tick, POLL_MS);
  };
  tick();
}
function stopPolling() { clearTimeout(state.timer); state.timer = null; }

// -- overview and connections ---------------------------------------------------------------
async function refreshOverview() {
  const data = await api("overview");
  const o = data.overview;
  $("t-connections").textContent = fmtNum(o.connections);
  $("t-sessions").textContent = fmtNum(o.sessions);
  $("t-links").textContent = fmtNum(o.links);
  $("t-nodes").textContent = fmtNum(o.nodes);
  $("t-memory").textContent = fmtBytes(o.memory_bytes);
  renderNodes(data.nodes);
  renderConnections(data.connections);
  addPoint(data);
  drawChart();
}

function nodeHref(n) {
  return `#/node/${encodeURIComponent(n.vhost)}/${encodeURIComponent(n.type)}/${encodeURIComponent(n.name)}`;
}

function renderNodes(nodes) {
  const rows = nodes.map((n) => el("tr", { dataset: { node: n.name, vhost: n.vhost } },
    el("td", {}, el("a", { href: nodeHref(n) }, n.name)),
    el("td", {}, n.type),
    el("td", {}, n.vhost),
    el("td", { class: "num depth" }, fmtNum(n.depth)),
    el("td", { class: "num unacked" }, fmtNum(n.unacked)),
    el("td", { class: "num" }, fmtNum(n.consumers)),
    el("td", { class: "num" }, fmtBytes(n.bytes)),
    el("td", { class: "num" }, fmtRate(n.publish_rate)),
    el("td", { class: "num" }, fmtRate(n.deliver_rate)),
  ));
  $("nodes").querySelector("tbody").replaceChildren(...rows);
  $("nodes-empty").hidden = nodes.length > 0;
}

function renderConnections(conns) {
  const rows = conns.map((c) => el("tr", { dataset: { connection: c.name } },
    el("td", {}, c.name),
    el("td", {}, c.protocol),
    el("td", {}, c.user ?? "anonymous"),
    el("td", {}, c.vhost),
    el("td", {}, c.container_id || ""),
    el("td", { class: "num" }, fmtNum(c.sessions)),
    el("td", { class: "num" }, fmtNum(c.links)),
    el("td", {}, fmtAge(c.connected_at)),
    el("td", {}, el("button", { class: "small danger close", onclick: () => closeConnection(c.name) }, "Close")),
  ));
  $("connections").querySelector("tbody").replaceChildren(...rows);
  $("connections-empty").hidden = conns.length > 0;
}

async function closeConnection(name) {
  if (!(await confirmAction(`Close the connection ${name}? The client is told it was closed by the broker.`))) return;
  try {
    await api("close-connection", { name });
    toast(`Closed ${name}`);
    await refreshOverview();
  } catch (e) { toast(e.message, true); }
}

// -- the live chart: totals of the node counters, differenced between polls ----------------
function addPoint(data) {
  const totals = { in: 0, out: 0, ack: 0 };
  for (const n of data.nodes) { totals.in += n.enqueued || 0; totals.out += n.delivered || 0; totals.ack += n.acked || 0; }
  const now = data.time;
  if (state.last && now > state.last.time) {
    const dt = now - state.last.time;
    const p = { time: now };
    for (const s of SERIES) p[s.key] = Math.max(0, (totals[s.key] - state.last.totals[s.key]) / dt);
    state.points.push(p);
    if (state.points.length > CHART_POINTS) state.points.shift();
  }
  state.last = { time: now, totals };
}

function niceMax(v) {
  if (v <= 5) return 5;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart() {
  const c = $("chart");
  const ratio = window.devicePixelRatio || 1;
  const w = c.clientWidth, h = c.clientHeight;
  if (c.width !== w * ratio || c.height !== h * ratio) { c.width = w * ratio; c.height = h * ratio; }
  const g = c.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  const left = 56, right = 12, top = 10, bottom = 24;
  const pw = w - left - right, ph = h - top - bottom;
  const pts = state.points;
  const max = niceMax(Math.max(1, ...pts.flatMap((p) => SERIES.map((s) => p[s.key]))));
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#6b7585";
  g.strokeStyle = "#e2e6ec";
  g.lineWidth = 1;
  g.textAlign = "right";
  g.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const y = top + ph - (ph * i) / 4;
    g.beginPath(); g.moveTo(left, Math.round(y) + 0.5); g.lineTo(left + pw, Math.round(y) + 0.5); g.stroke();
    g.fillText(`${fmtRate((max * i) / 4)}/s`, left - 8, y);
  }
  g.textAlign = "center";
  g.textBaseline = "top";
  for (const s of [120, 90, 60, 30, 0]) {
    const x = left + pw - (pw * s) / CHART_POINTS;
    g.fillText(s ? `-${s}s` : "now", x, top + ph + 6);
  }
  const step = pw / (CHART_POINTS - 1);
  for (const s of SERIES) {
    if (pts.length < 2) break;
    g.strokeStyle = s.color;
    g.lineWidth = 2;
    g.lineJoin = "round";
    g.beginPath();
    pts.forEach((p, i) => {
      const x = left + pw - (pts.length - 1 - i) * step;
      const y = top + ph - (ph * p[s.key]) / max;
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  }
  if (pts.length < 2) {
    g.fillStyle = "#6b7585";
    g.textBaseline = "middle";
    g.fillText("collecting…", left + pw / 2, top + ph / 2);
  }
}

// -- a node ------------------------------------------------------------------------------------
const FACTS = [
  ["depth", "Ready", fmtNum], ["unacked", "Unacked", fmtNum], ["consumers", "Consumers", fmtNum],
  ["bytes", "Bytes", fmtBytes], ["enqueued", "Published", fmtNum], ["delivered", "Delivered", fmtNum],
  ["acked", "Acknowledged", fmtNum], ["rejected", "Rejected", fmtNum], ["dead_lettered", "Dead-lettered", fmtNum],
  ["expired", "Expired", fmtNum], ["publish_rate", "In /s", fmtRate], ["deliver_rate", "Out /s", fmtRate],
];

function nodeQuery(extra = {}) {
  const n = state.node;
  return query({ vhost: n.vhost, type: n.type, name: n.name, ...extra });
}

async function refreshNode() {
  const n = await api(`node?${nodeQuery()}`);
  const facts = FACTS.filter(([k]) => k in n).map(([k, label, f]) =>
    el("div", { dataset: { fact: k } }, el("dt", {}, label), el("dd", {}, f(n[k]))));
  $("node-facts").replaceChildren(...facts);
  $("purge").hidden = n.type === "stream";
}

async function peek() {
  const count = Math.max(1, Math.min(100, Number($("peek-count").value) || 10));
  try {
    const data = await api(`peek?${nodeQuery({ count })}`);
    const rows = data.messages.map((m) => el("tr", {},
      el("td", { class: "num" }, m.position + 1),
      el("td", {}, m.message_id ?? ""),
      el("td", {}, m.subject ?? ""),
      el("td", { class: "num" }, fmtNum(m.size)),
      el("td", { class: "body" }, m.error ? m.error : bodyText(m.body) + (m.truncated ? " …" : "")),
    ));
    $("messages").querySelector("tbody").replaceChildren(...rows);
    $("messages-empty").hidden = rows.length > 0;
  } catch (e) { toast(e.message, true); }
}

function bodyText(body) {
  if (typeof body === "string") return body;
  return JSON.stringify(body);
}

async function purge() {
  const n = state.node;
  if (!(await confirmAction(`Purge ${n.name}? Every ready message is dropped.`))) return;
  try {
    const r = await api("purge", n);
    toast(`Purged ${fmtNum(r.purged)} message(s) from ${n.name}`);
    $("messages").querySelector("tbody").replaceChildren();
    await refreshNode();
  } catch (e) { toast(e.message, true); }
}

async function deleteNode() {
  const n = state.node;
  if (!(await confirmAction(`Delete the ${n.type} ${n.name} and its messages? This cannot be undone.`))) return;
  try {
    await api("delete", n);
    toast(`Deleted ${n.name}`);
    location.hash = "#/";
  } catch (e) { toast(e.message, true); }
}

// -- the pages over RabbitMQ's HTTP API: lists, and forms that change them -----------------------
function fill(tableId, rows, cells, emptyId) {
  const trs = rows.map((r) => el("tr", { dataset: { name: r.name ?? r.user ?? r.source ?? "" } }, ...cells(r).map((c) => el("td", {}, c))));
  $(tableId).querySelector("tbody").replaceChildren(...trs);
  if (emptyId) $(emptyId).hidden = rows.length > 0;
}

function button(label, cls, action) {
  return el("button", { class: `small ${cls}`, type: "button", onclick: action }, label);
}

async function act(what, fn, page) {
  try { await fn(); toast(what); } catch (e) { toast(e.message, true); return; }
  if (page) await refreshPage(page);
}

async function confirmed(text, what, fn, page) {
  if (await confirmAction(text)) await act(what, fn, page);
}

const REFRESH = {
  async queues() {
    const qs = await rmq("GET", "queues");
    fill("queues", qs, (q) => [q.name, q.vhost, q.type, q.durable ? "yes" : "no", fmtNum(q.messages_ready),
      fmtNum(q.messages_unacknowledged), fmtNum(q.consumers),
      button("Delete", "danger", () => confirmed(`Delete the queue ${q.name} and its messages?`, `Deleted ${q.name}`,
        () => rmq("DELETE", `queues/${enc(q.vhost)}/${enc(q.name)}`), "queues"))], "queues-empty");
  },
  async exchanges() {
    const [xs, bs] = await Promise.all([rmq("GET", "exchanges"), rmq("GET", "bindings")]);
    fill("exchanges", xs, (x) => [x.name || "(default)", x.vhost, x.type, x.durable ? "yes" : "no", x.internal ? "yes" : "no",
      x.name && !x.name.startsWith("amq.") ? button("Delete", "danger", () => confirmed(`Delete the exchange ${x.name}?`,
        `Deleted ${x.name}`, () => rmq("DELETE", `exchanges/${enc(x.vhost)}/${enc(x.name)}`), "exchanges")) : ""]);
    fill("bindings", bs, (b) => [b.source, b.destination, b.destination_type, b.routing_key, b.vhost,
      button("Unbind", "warn", () => act(`Unbound ${b.source} from ${b.destination}`, () => rmq("DELETE",
        `bindings/${enc(b.vhost)}/e/${enc(b.source)}/${b.destination_type[0]}/${enc(b.destination)}/${enc(b.properties_key)}`), "exchanges"))],
    "bindings-empty");
  },
  async vhosts() {
    fill("vhosts", await rmq("GET", "vhosts"), (v) => [v.name, v.description, (v.tags || []).join(", "), fmtNum(v.messages)]);
  },
  async users() {
    const [us, ps] = await Promise.all([rmq("GET", "users"), rmq("GET", "permissions")]);
    fill("users", us, (u) => [u.name, (u.tags || []).join(", "),
      button("Delete", "danger", () => confirmed(`Delete the user ${u.name}?`, `Deleted ${u.name}`,
        () => rmq("DELETE", `users/${enc(u.name)}`), "users"))]);
    fill("permissions", ps, (p) => [p.user, p.vhost, p.configure, p.write, p.read,
      button("Clear", "warn", () => act(`Cleared ${p.user}'s permissions in ${p.vhost}`,
        () => rmq("DELETE", `permissions/${enc(p.vhost)}/${enc(p.user)}`), "users"))]);
  },
  async policies() {
    fill("policies", await rmq("GET", "policies"), (p) => [p.name, p.vhost, p.pattern, p["apply-to"], JSON.stringify(p.definition),
      fmtNum(p.priority), button("Delete", "danger", () => confirmed(`Delete the policy ${p.name}?`, `Deleted ${p.name}`,
        () => rmq("DELETE", `policies/${enc(p.vhost)}/${enc(p.name)}`), "policies"))], "policies-empty");
  },
  async definitions() {},
};

async function refreshPage(page) {
  try { await REFRESH[page](); } catch (e) { toast(e.message, true); }
}

function formValues(form) {
  const v = {};
  for (const e of form.elements) if (e.name) v[e.name] = e.type === "checkbox" ? e.checked : e.value;
  return v;
}

function onSubmit(id, fn) {
  $(id).addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await fn(formValues(ev.target), ev.target);
  });
}

function wireForms() {
  onSubmit("queue-form", (f) => act(`Declared ${f.name}`, () => rmq("PUT", `queues/${enc(f.vhost)}/${enc(f.name)}`,
    { durable: f.durable, auto_delete: false, arguments: f.type === "classic" ? {} : { "x-queue-type": f.type } }), "queues"));
  $("publish-message").addEventListener("click", () => {
    const f = formValues($("message-form"));
    const x = f.exchange || "amq.default";
    return act("Published", async () => {
      const r = await rmq("POST", `exchanges/${enc(f.vhost)}/${enc(x)}/publish`,
        { routing_key: f.key, payload: f.payload, payload_encoding: "string", properties: {} });
      if (!r.routed) throw new ApiError(200, "Published, but no queue took the message (not routed)");
    }, "queues");
  });
  onSubmit("get-form", (f) => act("Got messages", async () => {
    const vhost = formValues($("message-form")).vhost;
    const got = await rmq("POST", `queues/${enc(vhost)}/${enc(f.queue)}/get`,
      { count: Number(f.count) || 1, ackmode: f.ackmode, encoding: "auto" });
    fill("got", got, (m) => [fmtNum(m.message_count), m.exchange || "(default)", m.routing_key, m.redelivered ? "yes" : "no",
      JSON.stringify(m.properties), m.payload]);
    if (!got.length) toast("The queue has no messages ready");
  }, "queues"));
  onSubmit("exchange-form", (f) => act(`Declared ${f.name}`, () => rmq("PUT", `exchanges/${enc(f.vhost)}/${enc(f.name)}`,
    { type: f.type, durable: f.durable }), "exchanges"));
  onSubmit("binding-form", (f) => act(`Bound ${f.source} to ${f.destination}`, () => rmq("POST",
    `bindings/${enc(f.vhost)}/e/${enc(f.source)}/${f.kind}/${enc(f.destination)}`, { routing_key: f.key, arguments: {} }), "exchanges"));
  onSubmit("vhost-form", (f) => act(`Added ${f.name}`, () => rmq("PUT", `vhosts/${enc(f.name)}`, { description: f.description }), "vhosts"));
  onSubmit("user-form", (f, form) => act(`Saved ${f.name}`, async () => {
    await rmq("PUT", `users/${enc(f.name)}`, { password: f.password, tags: f.tags });
    form.elements.password.value = "";
  }, "users"));
  onSubmit("permission-form", (f) => act(`Set ${f.user}'s permissions in ${f.vhost}`, () => rmq("PUT",
    `permissions/${enc(f.vhost)}/${enc(f.user)}`, { configure: f.configure, write: f.write, read: f.read }), "users"));
  onSubmit("policy-form", (f) => act(`Set the policy ${f.name}`, () => {
    let definition;
    try { definition = JSON.parse(f.definition); } catch (e) { throw new ApiError(400, `the definition is not JSON: ${e.message}`); }
    return rmq("PUT", `policies/${enc(f.vhost)}/${enc(f.name)}`,
      { pattern: f.pattern, "apply-to": f.apply, definition, priority: Number(f.priority) || 0 });
  }, "policies"));
  onSubmit("upload-form", (f, form) => act("Imported the definitions", async () => {
    const file = form.elements.file.files[0];
    if (!file) throw new ApiError(400, "choose a file");
    await rmq("POST", "definitions", await file.text());
  }));
}

// -- start ---------------------------------------------------------------------------------------
function loggedIn(data) {
  state.user = data.user;
  state.csrf = data.csrf;
  $("who").textContent = data.guest ? `${data.user} (this machine, no users file)` : data.user;
  $("who").title = data.guest ? "The broker has no users file: a browser on its own machine gets in without a login" : "";
  $("logout").hidden = Boolean(data.guest); // the guest would be let straight back in
  route();
}

// A login form's submit: ``body()`` sent to ``login``; its button off meanwhile, its error shown.
async function submitLogin(ev, form, body) {
  ev.preventDefault();
  const button = $(`${form}-submit`);
  button.disabled = true;
  $(`${form}-error`).hidden = true;
  try {
    loggedIn(await api("login", body()));
    $(form === "login" ? "login-password" : "login-token").value = "";
  } catch (e) {
    $(`${form}-error`).textContent = e.message;
    $(`${form}-error`).hidden = false;
  } finally { button.disabled = false; }
}

const login = (ev) => submitLogin(ev, "login", () => ({ username: $("login-user").value, password: $("login-password").value }));
const tokenLogin = (ev) => submitLogin(ev, "token", () => ({ token: $("login-token").value.trim() }));

async function logout() {
  try { await api("logout", {}); } catch (e) { /* the session is gone either way */ }
  showLogin("");
}

window.addEventListener("DOMContentLoaded", async () => {
  const legend = SERIES.map((s) => {
    const swatch = el("i");
    swatch.style.background = s.color; // CSSOM, not a style attribute: the CSP allows it
    return el("span", {}, swatch, s.label);
  });
  $("legend").replaceChildren(...legend);
  $("login-form").addEventListener("submit", login);
  $("token-form").addEventListener("submit", tokenLogin);
  $("logout").addEventListener("click", logout);
  $("peek").addEventListener("click", peek);
  $("purge").addEventListener("click", purge);
  $("delete").addEventListener("click", deleteNode);
  wireForms();
  window.addEventListener("hashchange", route);
  window.addEventListener("resize", () => { if (!$("overview-view").hidden) drawChart(); });
  try { loggedIn(await api("session")); } catch (e) { showLogin(""); }
});
