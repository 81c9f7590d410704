// The amqp10 broker's web console: plain JavaScript, no libraries, nothing from the network.
// Views: #/ (overview), #/connections, #/node/<vhost>/<type>/<name>. Data from /console/api/*.
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
const VIEWS = ["login-view", "overview-view", "connections-view", "node-view"];
function show(view) {
  for (const v of VIEWS) $(v).hidden = v !== view;
  $("connections-view").hidden = view !== "connections-view" && view !== "overview-view"; // both list them
  $("bar").hidden = view === "login-view";
  $("nav-overview").classList.toggle("active", view === "overview-view");
  $("nav-connections").classList.toggle("active", view === "connections-view");
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

// -- start ---------------------------------------------------------------------------------------
function loggedIn(data) {
  state.user = data.user;
  state.csrf = data.csrf;
  $("who").textContent = data.guest ? `${data.user} (this machine, no users file)` : data.user;
  $("who").title = data.guest ? "The broker has no users file: a browser on its own machine gets in without a login" : "";
  $("logout").hidden = Boolean(data.guest); // the guest would be let straight back in
  route();
}

async function login(ev) {
  ev.preventDefault();
  const button = $("login-submit");
  button.disabled = true;
  $("login-error").hidden = true;
  try {
    loggedIn(await api("login", { username: $("login-user").value, password: $("login-password").value }));
    $("login-password").value = "";
  } catch (e) {
    $("login-error").textContent = e.message;
    $("login-error").hidden = false;
  } finally { button.disabled = false; }
}

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
  $("logout").addEventListener("click", logout);
  $("peek").addEventListener("click", peek);
  $("purge").addEventListener("click", purge);
  $("delete").addEventListener("click", deleteNode);
  window.addEventListener("hashchange", route);
  window.addEventListener("resize", () => { if (!$("overview-view").hidden) drawChart(); });
  try { loggedIn(await api("session")); } catch (e) { showLogin(""); }
});
