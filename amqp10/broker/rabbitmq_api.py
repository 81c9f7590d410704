"""RabbitMQ's HTTP API (``/api/...``), the part tools use, over the broker's management.

``rabbitmqadmin``, monitoring agents and the client suites' helpers speak RabbitMQ's
management HTTP API; this module answers it on the broker's HTTP listener (and on
``[http] rabbitmq_api_port``, RabbitMQ's 15672, when set). Every operation is a call of
:class:`~amqp10.broker.management.Management` (the one ``$management`` and the web
console make) or of the broker's definitions; this module only translates RabbitMQ's
paths and JSON to those calls and their answers back to RabbitMQ's JSON.

Served (``{vhost}`` percent-encoded: ``/`` is ``%2F``):

- ``GET /api/overview``, ``/api/whoami``, ``/api/nodes``, ``/api/extensions``;
- ``GET /api/connections`` (``/{name}``: one; ``DELETE``: close it), ``/api/channels``,
  ``/api/consumers`` (``/{vhost}``: one host's); with ``[http]
  rabbitmq_api_statistics_interval``, a connection is listed (and found by name) only
  that long after its open, as RabbitMQ's statistics collector lists it;
- ``GET /api/vhosts`` (``/{vhost}``; ``PUT``: create or update; ``DELETE``: delete it,
  its connections closed, with everything in it; the default host is refused, 400);
- ``GET /api/queues`` (``/{vhost}``, ``/{vhost}/{name}``; ``PUT`` declares, ``DELETE``
  deletes), ``DELETE /api/queues/{vhost}/{name}/contents`` purges, ``POST
  .../get`` takes messages (``count``, ``ackmode``: ``ack_requeue_true|false``,
  ``reject_requeue_true|false``; ``encoding`` ``auto`` or ``base64``);
- ``GET /api/exchanges`` (``/{vhost}``, ``/{vhost}/{name}``; ``PUT``, ``DELETE``),
  ``POST /api/exchanges/{vhost}/{name}/publish`` (``routing_key``, ``payload``,
  ``payload_encoding``, ``properties``; answers ``{"routed": bool}``);
- ``GET /api/bindings`` (``/{vhost}``, ``/{vhost}/e/{x}/q/{q}`` and ``/e/{x}/e/{y}``;
  ``POST`` there binds, answering 201 with a ``Location``;
  ``/{vhost}/e/{x}/q/{q}/{props}``: ``GET`` and ``DELETE`` one binding by its
  ``properties_key``), ``/api/exchanges/{vhost}/{x}/bindings/source``,
  ``/api/queues/{vhost}/{q}/bindings``;
- ``GET /api/policies`` (``/{vhost}``, ``/{vhost}/{name}``; ``PUT``, ``DELETE``);
- ``GET /api/users`` (``/{name}``; ``PUT``, ``DELETE``), ``/api/permissions``
  (``/{vhost}/{user}``; ``PUT``, ``DELETE``), ``/api/users/{name}/permissions``,
  ``/api/vhosts/{vhost}/permissions``: read from the definitions export, changed in the
  users file (:meth:`Management.put_user` and the rest; without a users file, a 400);
- ``GET /api/parameters``, ``/api/global-parameters``, ``/api/operator-policies``,
  ``/api/vhost-limits``: empty lists (the broker has none of them);
- ``GET /api/definitions`` (export; ``/{vhost}``: one host's), ``POST`` (import);
- ``GET /api/aliveness-test/{vhost}``, ``/api/health/checks/alarms``,
  ``/local-alarms``, ``/virtual-hosts``, ``/node-is-quorum-critical``,
  ``/node-is-mirror-sync-critical``, ``/port-listener/{port}``,
  ``/protocol-listener/{protocol}``, ``/certificate-expiration/...``.

:meth:`RabbitApi.answer` serves the same paths for a caller someone else established:
the web console's pages call it through ``/console/api/rmq/...`` with the session's user.

Who asks (:mod:`.http_login`): HTTP basic authentication against the users file, or
with ``[oauth2]`` an OAuth 2 token (``Authorization: Bearer <JWT>``, checked at each
request: an expired one is a 401; its ``tag:`` scopes are its tags); the user's
RabbitMQ tags then decide as ``[management]`` says (a user with none of
``read_tags`` is refused at the door, as RabbitMQ refuses a user without the
``management`` tag). Without a users file, on a broker that allows anonymous
connections (the quick start), a loopback client is let in whatever password it
sends (``guest``/``guest`` as RabbitMQ's localhost-only guest; a token is still judged
by the token) and everyone else is refused. Errors are RabbitMQ's: ``401`` with ``WWW-Authenticate``, ``404
{"error": "Object Not Found", "reason": "Not Found"}``, ``400 {"error":
"bad_request", "reason": ...}``; refused permissions are 401 as RabbitMQ answers them.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from .. import __version__
from ..amqp091 import BasicProperties
from ..io.http import HttpRequest, HttpResponse, Route
from .amqp091.message import FORMAT as AMQP091_FORMAT
from .amqp091.message import from_publish, unpack
from .core import EXCHANGE_TYPES, Broker
from .http_login import GUEST, HttpLogin
from .management import BadRequest, Caller, Management, ManagementError, NotFoundError, purge_node
from .management.rabbitmq import (
    RABBITMQ_VERSION,
    binding_of,
    declare_exchange,
    declare_queue,
    exchange_name,
    find_queue,
    node_name,
)

__all__ = ["API_PREFIX", "RABBITMQ_VERSION", "RabbitApi", "rabbitmq_api_routes", "remove_queue", "take_messages"]

log = logging.getLogger("amqp10.broker.rabbitmq_api")

API_PREFIX = "/api/"
REALM = 'Basic realm="RabbitMQ Management"'
API_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}
ACKMODES = {
    "ack_requeue_true": "requeue",
    "ack_requeue_false": "ack",
    "reject_requeue_true": "requeue",
    "reject_requeue_false": "reject",
}
"""RabbitMQ's ``get`` ackmodes -> how :meth:`Management.get` settles."""


class ApiError(Exception):
    """An answer other than success: ``status`` and RabbitMQ's ``error`` and ``reason``."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


def _bad(reason: str) -> ApiError:
    return ApiError(400, "bad_request", reason)


@dataclass(frozen=True)
class Call:
    """One API request: who asks, the path's segments after ``/api/`` (decoded), the request."""

    caller: Caller
    parts: tuple[str, ...]
    request: HttpRequest

    def body(self) -> dict[str, Any]:
        """The JSON body (a map; an empty body is ``{}``); 400 otherwise."""
        raw = self.request.body.strip()
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise _bad(f"the body is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise _bad("the body must be a JSON object")
        return value

    def query(self) -> dict[str, str]:
        return self.request.query()


Handler = Callable[[Call], Awaitable[Any]]


def _number(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool):
        raise _bad(f"{name} must be a number, not {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _bad(f"{name} must be a number, not {value!r}") from None


def properties_key(routing_key: str, arguments: Mapping[str, Any]) -> str:
    """RabbitMQ's name for a binding between a source and a destination: the routing key
    (``%`` and ``~`` escaped; ``~`` when empty) without arguments, else the key, ``~`` and
    a hash of the arguments. Paths carry it percent-encoded once more."""
    key = routing_key.replace("%", "%25").replace("~", "%7E")
    if not arguments:
        return key or "~"
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).digest()
    return f"{key}~{base64.urlsafe_b64encode(digest[:12]).decode()}"


class RabbitApi:
    """RabbitMQ's HTTP API for one broker: its handlers, by path (see the module)."""

    def __init__(self, broker: Broker, login: HttpLogin) -> None:
        self.broker = broker
        self.management = Management.of(broker)
        self.login = login
        self.node = node_name()
        self.routes: list[tuple[tuple[str, ...], Mapping[str, Handler]]] = [
            (("overview",), {"GET": self.overview}),
            (("whoami",), {"GET": self.whoami}),
            (("nodes",), {"GET": self.nodes}),
            (("nodes", "*"), {"GET": self.node_one}),
            (("extensions",), {"GET": self.extensions}),
            (("connections",), {"GET": self.connections}),
            (("connections", "*"), {"GET": self.connection, "DELETE": self.close_connection}),
            (("connections", "*", "channels"), {"GET": self.channels}),
            (("channels",), {"GET": self.channels}),
            (("consumers",), {"GET": self.consumers}),
            (("consumers", "*"), {"GET": self.consumers}),
            (("vhosts",), {"GET": self.vhosts}),
            (
                ("vhosts", "*"),
                {"GET": self.vhost, "PUT": self.put_vhost, "DELETE": self.delete_vhost},
            ),
            (("vhosts", "*", "permissions"), {"GET": self.permissions}),
            (("queues",), {"GET": self.queues}),
            (("queues", "*"), {"GET": self.queues}),
            (
                ("queues", "*", "*"),
                {"GET": self.queue, "PUT": self.put_queue, "DELETE": self.delete_queue},
            ),
            (("queues", "*", "*", "contents"), {"DELETE": self.purge_queue}),
            (("queues", "*", "*", "get"), {"POST": self.get_messages}),
            (("queues", "*", "*", "bindings"), {"GET": self.bindings}),
            (("exchanges",), {"GET": self.exchanges}),
            (("exchanges", "*"), {"GET": self.exchanges}),
            (
                ("exchanges", "*", "*"),
                {"GET": self.exchange, "PUT": self.put_exchange, "DELETE": self.delete_exchange},
            ),
            (("exchanges", "*", "*", "publish"), {"POST": self.publish}),
            (("exchanges", "*", "*", "bindings", "source"), {"GET": self.bindings}),
            (("exchanges", "*", "*", "bindings", "destination"), {"GET": self.bindings}),
            (("bindings",), {"GET": self.bindings}),
            (("bindings", "*"), {"GET": self.bindings}),
            (("bindings", "*", "e", "*", "*", "*"), {"GET": self.bindings, "POST": self.bind}),
            (
                ("bindings", "*", "e", "*", "*", "*", "*"),
                {"GET": self.binding, "DELETE": self.unbind},
            ),
            (("policies",), {"GET": self.policies}),
            (("policies", "*"), {"GET": self.policies}),
            (
                ("policies", "*", "*"),
                {"GET": self.policy, "PUT": self.put_policy, "DELETE": self.delete_policy},
            ),
            (("users",), {"GET": self.users}),
            (("users", "*"), {"GET": self.user, "PUT": self.put_user, "DELETE": self.delete_user}),
            (("users", "*", "permissions"), {"GET": self.permissions}),
            (("permissions",), {"GET": self.permissions}),
            (
                ("permissions", "*", "*"),
                {
                    "GET": self.permission,
                    "PUT": self.put_permission,
                    "DELETE": self.delete_permission,
                },
            ),
            *(((kind, *["*"] * n), {"GET": self.none_here}) for kind, n in _NONE_HERE),
            (("definitions",), {"GET": self.export, "POST": self.import_}),
            (("definitions", "*"), {"GET": self.export, "POST": self.import_}),
            (("aliveness-test", "*"), {"GET": self.aliveness}),
            (("health", "checks", "*"), {"GET": self.health}),
            (("health", "checks", "*", "*"), {"GET": self.health}),
        ]

    # -- the door ---------------------------------------------------------------------------
    async def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request under ``/api/`` (basic authentication, see the module)."""
        return await self.answer(request, request.path[len(API_PREFIX) :], self._caller)

    async def answer(
        self,
        request: HttpRequest,
        path: str,
        caller_of: Callable[[HttpRequest], Awaitable[Caller]],
        *,
        challenge: bool = True,
    ) -> HttpResponse:
        """Answer ``request`` for ``path`` (what follows ``/api/``), asking ``caller_of`` who
        it comes from once the path is known (the web console passes its session's user).
        ``challenge``: a 401 carries ``WWW-Authenticate`` (not for the console's page, where
        it would open the browser's own login dialog)."""
        try:
            parts = tuple(unquote(p) for p in path.rstrip("/").split("/"))
            handlers = self._handlers(parts)
            method = "GET" if request.method == "HEAD" else request.method
            handler = handlers.get(method)
            if handler is None:
                allowed = ", ".join(sorted({*handlers, *(["HEAD"] if "GET" in handlers else [])}))
                raise ApiError(
                    405, "Method Not Allowed", f"{request.method} is not one of {allowed}"
                )
            caller = await caller_of(request)
            answer = await handler(Call(caller, parts, request))
        except ApiError as exc:
            headers = (("www-authenticate", REALM),) if exc.status == 401 and challenge else ()
            body = NOT_FOUND if exc.status == 404 else {"error": exc.error, "reason": exc.reason}
            return HttpResponse.json(exc.status, body, headers=headers)
        except ManagementError as exc:
            return self._management_error(exc, challenge)
        if isinstance(answer, HttpResponse):
            return answer
        return HttpResponse.json(200, answer)

    def _handlers(self, parts: tuple[str, ...]) -> Mapping[str, Handler]:
        for pattern, handlers in self.routes:
            if len(pattern) == len(parts) and all(
                p in ("*", q) for p, q in zip(pattern, parts, strict=True)
            ):
                return handlers
        raise ApiError(404, "Object Not Found", "Not Found")

    def _management_error(self, exc: ManagementError, challenge: bool) -> HttpResponse:
        if exc.status == 404:
            return HttpResponse.json(404, NOT_FOUND)
        if exc.status in (401, 403):  # RabbitMQ answers a refused permission with a 401 too
            return HttpResponse.json(
                401,
                {"error": "not_authorised", "reason": exc.description},
                headers=(("www-authenticate", REALM),) if challenge else (),
            )
        if exc.status == 501:
            return HttpResponse.json(501, {"error": "not_implemented", "reason": exc.description})
        return HttpResponse.json(400, {"error": "bad_request", "reason": exc.description})

    async def _caller(self, request: HttpRequest) -> Caller:
        """Who asks: an OAuth 2 token (``Bearer``), basic auth against the users file, or
        the loopback guest (see the module)."""
        scheme, _, token = (request.header("authorization") or "").partition(" ")
        if scheme.lower() == "bearer":  # judged by its token, wherever it comes from
            grant = self.login.check_token(token.strip(), request.peer)
            if grant is None:
                raise ApiError(401, "not_authorised", "Not_Authorized")
            return self._management_user(Caller(user=grant.user, grant=grant))
        if self.login.loopback_guest(request.peer):
            return Caller(user=None)
        if not self.login.has_users:
            raise ApiError(
                401,
                "not_authorised",
                "this broker has no users file: its HTTP API serves loopback clients only",
            )
        username, password = _basic(request.header("authorization"))
        user = await self.login.check_password(username, password, request.peer)
        if user is None:
            raise ApiError(401, "not_authorised", "Login failed")
        return self._management_user(Caller(user=user))

    def _management_user(self, caller: Caller) -> Caller:
        """``caller``, if one of its tags lets it read (401 otherwise, as RabbitMQ)."""
        if not self.management.access.has_any(caller, self.management.config.read_tags):
            raise ApiError(401, "not_authorised", "Not management user")
        return caller

    # -- overview, nodes ------------------------------------------------------------------------
    async def overview(self, call: Call) -> Any:
        m = self.management
        o = m.overview(call.caller)
        queues = [q for v in o["vhosts"] for q in await m.list_whole(call.caller, "queue", vhost=v)]
        exchanges = sum(len(m.list(call.caller, "exchange", vhost=v)) for v in o["vhosts"])
        conns = await m.list_whole(call.caller, "connection")
        ready = sum(q["depth"] for q in queues)
        unacked = sum(q["unacked"] for q in queues)
        return {
            "management_version": RABBITMQ_VERSION,
            "rabbitmq_version": RABBITMQ_VERSION,
            "product_name": "amqp10",
            "product_version": __version__,
            "cluster_name": self.broker.config.container_id,
            "node": self.node,
            "erlang_version": "",
            "erlang_full_version": "",
            "disable_stats": False,
            "enable_queue_totals": True,
            "rates_mode": "basic",
            "exchange_types": [
                {"name": t, "description": "", "enabled": True}
                for t in EXCHANGE_TYPES
            ],
            "message_stats": {
                "publish": sum(q["enqueued"] for q in queues),
                "deliver_get": sum(q["delivered"] for q in queues),
                "ack": sum(q["acked"] for q in queues),
            },
            "queue_totals": {
                "messages": ready + unacked,
                "messages_ready": ready,
                "messages_unacknowledged": unacked,
            },
            "object_totals": {
                "connections": len(conns),
                "channels": sum(int(c.get("sessions", 0)) for c in conns),
                "exchanges": exchanges,
                "queues": len(queues),
                "consumers": sum(q["consumers"] for q in queues),
            },
            "statistics_db_event_queue": 0,
            "listeners": [],
            "contexts": [],
        }

    async def whoami(self, call: Call) -> Any:
        user = call.caller.user
        tags = (
            ["administrator"]
            if user is None
            else [t for t in _ALL_TAGS if self.broker.has_tag(user, t, grant=call.caller.grant)]
        )
        return {"name": user or GUEST, "tags": tags}

    def _node(self) -> dict[str, Any]:
        return {"name": self.node, "type": "disc", "running": True, "mem_used": self.broker.stats.resident_bytes,
                "mem_alarm": self.broker.alarm is not None, "disk_free_alarm": False, "partitions": []}  # fmt: skip

    async def nodes(self, call: Call) -> Any:
        self.management.overview(call.caller)  # the read check
        return [self._node()]

    async def node_one(self, call: Call) -> Any:
        self.management.overview(call.caller)
        if call.parts[1] != self.node:
            raise NotFoundError(f"no node {call.parts[1]!r}")
        return self._node()

    async def extensions(self, call: Call) -> Any:
        return []

    async def none_here(self, call: Call) -> Any:
        """Lists of what this broker has none of (parameters, operator policies, limits)."""
        self.management.overview(call.caller)  # the read check
        if (
            len(call.parts) > 1
            and call.parts[1] not in self.broker.vhosts
            and call.parts[0] != "parameters"
        ):
            raise NotFoundError(call.parts[1])
        return []

    # -- connections, channels --------------------------------------------------------------
    def _connection(self, c: Mapping[str, Any]) -> dict[str, Any]:
        host, _, port = str(c.get("peer", "")).rpartition(":")
        return {
            "name": c["name"],
            "node": self.node,
            "user": c.get("user") or GUEST,
            "vhost": c.get("vhost", "/"),
            "protocol": c.get("protocol", ""),
            "peer_host": host.strip("[]"),
            "peer_port": int(port) if port.isdigit() else None,
            "state": "running",
            "channels": c.get("sessions", 0),
            "connected_at": int(float(c.get("connected_at", 0)) * 1000),
            "client_properties": {"connection_name": c.get("container_id")},
            "type": "network",
        }

    def _seen(self, conns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The connections RabbitMQ's statistics would have seen by now
        (``[http] rabbitmq_api_statistics_interval``)."""
        interval = self.broker.config.http.rabbitmq_api_statistics_interval
        if not interval:
            return conns
        seen = time.time() - interval
        return [c for c in conns if float(c.get("connected_at", 0)) <= seen]

    async def connections(self, call: Call) -> Any:
        return [self._connection(c) for c in self._seen(await self.management.list_whole(call.caller, "connection"))]

    async def connection(self, call: Call) -> Any:
        return self._connection(await self._seen_one(call))

    async def _seen_one(self, call: Call) -> dict[str, Any]:
        """The connection the path names (on any worker), if it is listed yet (404 otherwise)."""
        m, name = self.management, call.parts[1]
        if m.whole is None:
            found = [m.read(call.caller, "connection", name)]
        else:
            found = [c for c in await m.list_whole(call.caller, "connection") if c["name"] == name]
        seen = self._seen(found)
        if not seen:
            raise NotFoundError(f"no connection {name!r}")
        return seen[0]

    async def close_connection(self, call: Call) -> Any:
        reason = call.request.header("x-reason") or "closed through the HTTP API"
        await self._seen_one(call)
        await self.management.close_connection_whole(call.caller, call.parts[1], reason)
        return HttpResponse(204)

    async def channels(self, call: Call) -> Any:
        """One entry per session (0-9-1: channel) of each connection (numbered from 1: the
        broker does not keep per-channel figures for management)."""
        conns = await self.management.list_whole(call.caller, "connection")
        if len(call.parts) == 3:
            conns = [c for c in conns if c["name"] == call.parts[1]]
        out: list[dict[str, Any]] = []
        for c in conns:
            base = self._connection(c)
            for n in range(1, int(c.get("sessions", 0)) + 1):
                out.append({
                    "name": f"{c['name']} ({n})", "number": n, "node": self.node, "user": base["user"],
                    "vhost": base["vhost"], "state": "running",
                    "connection_details": {k: base[k] for k in ("name", "peer_host", "peer_port")},
                })  # fmt: skip
        return out

    async def consumers(self, call: Call) -> Any:
        """Every consumer (0-9-1 ``basic.consume``s, 1.0 receiving links), as RabbitMQ lists
        them, with the channel it consumes on."""
        vhost = call.parts[1] if len(call.parts) == 2 else None
        return [self._consumer(c) for c in await self.management.consumers_whole(call.caller, vhost=vhost)]

    def _consumer(self, c: Mapping[str, Any]) -> dict[str, Any]:
        """One consumer as RabbitMQ shapes it (``/api/consumers``, a queue's ``consumer_details``)."""
        conn = self._connection({**c, "name": c["connection"]})
        return {
            "consumer_tag": c["consumer_tag"], "queue": {"name": c["queue"], "vhost": conn["vhost"]},
            "ack_required": c["ack_required"], "exclusive": c["exclusive"],
            "prefetch_count": c["prefetch_count"], "active": c["active"],
            "activity_status": "up" if c["active"] else "waiting", "arguments": c["arguments"],
            "channel_details": {
                "name": f"{conn['name']} ({c['channel']})", "number": c["channel"],
                "connection_name": conn["name"], "node": self.node, "user": conn["user"],
                "peer_host": conn["peer_host"], "peer_port": conn["peer_port"],
            },
        }  # fmt: skip

    # -- virtual hosts ----------------------------------------------------------------------
    def _vhost(self, v: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "name": v["name"],
            "description": v.get("description", ""),
            "tags": v.get("tags", []),
            "metadata": {
                "description": v.get("description", ""),
                "tags": v.get("tags", []),
                **({"default_queue_type": v["default_queue_type"]} if v.get("default_queue_type") else {}),
            },
            "default_queue_type": v.get("default_queue_type") or "classic",
            "tracing": False,
            "messages": v.get("depth", 0),
            "messages_ready": v.get("depth", 0),
            "messages_unacknowledged": 0,
            "cluster_state": {self.node: "running"},
        }

    async def vhosts(self, call: Call) -> Any:
        return [self._vhost(v) for v in self.management.list(call.caller, "vhost")]

    async def vhost(self, call: Call) -> Any:
        return self._vhost(self.management.read(call.caller, "vhost", call.parts[1]))

    async def put_vhost(self, call: Call) -> Any:
        body = call.body()
        attrs: dict[str, Any] = {}
        if "description" in body:
            attrs["description"] = str(body["description"])
        if "tags" in body:
            tags = body["tags"]
            attrs["tags"] = [t for t in tags.split(",") if t] if isinstance(tags, str) else tags
        name = call.parts[1]
        # RabbitMQ 3.10 reads "defaultqueuetype" (later ones "default_queue_type"), on creation only
        queue_type = body.get("defaultqueuetype", body.get("default_queue_type"))
        if queue_type is not None and name not in self.broker.vhosts:
            attrs["default_queue_type"] = queue_type
        if name in self.broker.vhosts:
            self.management.update(call.caller, "vhost", name, attrs)
            return HttpResponse(204)
        self.management.create(call.caller, "vhost", name, attrs)
        self._grant_creator(call.caller, name)
        await self.broker.committed()
        return HttpResponse(201)

    def _grant_creator(self, caller: Caller, vhost: str) -> None:
        """Give the user who made ``vhost`` full permissions on it, as RabbitMQ's
        ``rabbit_vhost:put_vhost`` does for a user of its internal database (here: of the
        users file; anonymous, a token's user or no users file: nothing)."""
        if caller.user is None:
            return
        with contextlib.suppress(ManagementError):  # (not a user of the users file)
            self.management.put_permission(caller, caller.user, vhost, ".*", ".*", ".*")

    async def delete_vhost(self, call: Call) -> Any:
        self.management.delete(call.caller, "vhost", call.parts[1])  # 404 if there is none
        await self.broker.committed()
        return HttpResponse(204)

    # -- queues -----------------------------------------------------------------------------
    def _queue(self, q: Mapping[str, Any], kind: str) -> dict[str, Any]:
        args = q.get("arguments") or {}
        qtype = "stream" if kind == "stream" else str(args.get("x-queue-type", "classic"))
        ready, unacked = q.get("depth", 0), q.get("unacked", 0)
        replicated = {}  # a quorum queue or stream names its leader and members (this one node)
        if qtype in ("quorum", "stream"):
            replicated = {"leader": self.node, "members": [self.node], "online": [self.node]}
        return {
            **replicated,
            "name": q["name"],
            "vhost": q["vhost"],
            "durable": q.get("durable", True),
            "auto_delete": q.get("auto_delete", False),
            "exclusive": q.get("exclusive", False),
            "arguments": args,
            "type": qtype,
            "node": self.node,
            "state": "running",
            "policy": None,
            "exclusive_consumer_tag": None,
            "consumers": q.get("consumers", 0),
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
            "message_bytes": q.get("bytes", 0),
            "message_stats": {
                "publish": q.get("enqueued", 0),
                "publish_details": {"rate": q.get("publish_rate", 0.0)},
                "deliver_get": q.get("delivered", 0),
                "deliver_get_details": {"rate": q.get("deliver_rate", 0.0)},
                "ack": q.get("acked", 0),
                "ack_details": {"rate": q.get("ack_rate", 0.0)},
            },
        }

    def _vhosts_of(self, call: Call) -> list[str]:
        """The host the path names (``/api/x/{vhost}``), or every host the caller sees."""
        if len(call.parts) > 1:
            return [call.parts[1]]
        return list(self.management.overview(call.caller)["vhosts"])

    def _listed(
        self, call: Call, kind: str, shape: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Every ``kind`` entity of the hosts :meth:`_vhosts_of` names, shaped as RabbitMQ's."""
        m = self.management
        return [shape(e) for v in self._vhosts_of(call) for e in m.list(call.caller, kind, vhost=v)]

    async def _listed_whole(self, call: Call, kind: str) -> list[dict[str, Any]]:
        """Every ``kind`` node of the hosts :meth:`_vhosts_of` names on every worker, shaped."""
        m = self.management
        return [
            self._queue(e, kind)
            for v in self._vhosts_of(call)
            for e in await m.list_whole(call.caller, kind, vhost=v)
        ]

    async def queues(self, call: Call) -> Any:
        out = await self._listed_whole(call, "queue") + await self._listed_whole(call, "stream")
        return sorted(out, key=lambda q: (q["vhost"], q["name"]))

    def _find_queue(self, call: Call) -> tuple[dict[str, Any], str] | None:
        return find_queue(self.management, call.caller, call.parts[1], call.parts[2])

    async def queue(self, call: Call) -> Any:
        """One queue, with its consumers (``consumer_details``) as RabbitMQ's queue page has
        them; with several workers, from the whole broker (its owner may be another worker)."""
        vhost, name = call.parts[1], call.parts[2]
        shown: dict[str, Any] | None = None
        if self.management.whole is not None:
            for q in await self._listed_whole(call, "queue") + await self._listed_whole(call, "stream"):
                if q["name"] == name:
                    shown = q
        if shown is None:
            found = self._find_queue(call)
            if found is None:
                raise NotFoundError(name)
            shown = self._queue(*found)
        details = [
            self._consumer(c)
            for c in await self.management.consumers_whole(call.caller, vhost=vhost)
            if c["queue"] == name
        ]
        return {**shown, "consumer_details": details}

    async def put_queue(self, call: Call) -> Any:
        _, created = declare_queue(
            self.management, call.caller, call.parts[1], call.parts[2], call.body()
        )
        if not created:  # declared again, the same
            return HttpResponse(204)
        await self.broker.committed()
        return HttpResponse(201)

    async def delete_queue(self, call: Call) -> Any:
        query = call.query()
        args = {"if_empty": query.get("if-empty") == "true", "if_unused": query.get("if-unused") == "true"}
        await self.management.on_owner(call.caller, remove_queue, "queue", call.parts[2], vhost=call.parts[1], args=args)
        return HttpResponse(204)

    async def purge_queue(self, call: Call) -> Any:
        await self.management.on_owner(call.caller, purge_node, "queue", call.parts[2], vhost=call.parts[1])
        return HttpResponse(204)

    async def get_messages(self, call: Call) -> Any:
        body = call.body()
        count = _number(body.get("count"), "count", 1)
        ackmode = str(body.get("ackmode", "ack_requeue_true"))
        if ackmode not in ACKMODES:
            raise _bad(f"ackmode must be one of {', '.join(ACKMODES)}, not {ackmode!r}")
        encoding = str(body.get("encoding", "auto"))
        if encoding not in ("auto", "base64"):
            raise _bad(f"encoding must be auto or base64, not {encoding!r}")
        truncate = body.get("truncate")
        limit = None if truncate in (None, "") else _number(truncate, "truncate", 0)
        args = {"count": count, "settle": ACKMODES[ackmode], "encoding": encoding, "limit": limit}
        return await self.management.on_owner(call.caller, take_messages, "queue", call.parts[2], vhost=call.parts[1], args=args)

    # -- exchanges --------------------------------------------------------------------------
    def _exchange(self, x: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "name": x["name"],
            "vhost": x["vhost"],
            "type": x.get("exchange_type", "direct"),
            "durable": x.get("durable", True),
            "auto_delete": x.get("auto_delete", False),
            "internal": x.get("internal", False),
            "arguments": _exchange_arguments(x),
            "user_who_performed_action": "",
            "policy": None,
        }  # fmt: skip

    async def exchanges(self, call: Call) -> Any:
        return self._listed(call, "exchange", self._exchange)

    async def exchange(self, call: Call) -> Any:
        name = exchange_name(call.parts[2])
        return self._exchange(
            self.management.read(call.caller, "exchange", name, vhost=call.parts[1])
        )

    async def put_exchange(self, call: Call) -> Any:
        vhost, name = call.parts[1], call.parts[2]
        if not declare_exchange(self.management, call.caller, vhost, name, call.body()):
            return HttpResponse(204)
        await self.broker.committed()
        return HttpResponse(201)

    async def delete_exchange(self, call: Call) -> Any:
        vhost, name = call.parts[1], call.parts[2]
        if call.query().get("if-unused") == "true":
            x = self.management.read(call.caller, "exchange", name, vhost=vhost)
            if x.get("bindings"):
                raise _bad(f"exchange '{name}' in vhost '{vhost}' in use")
        self.management.delete(call.caller, "exchange", name, vhost=vhost)
        await self.broker.committed()
        return HttpResponse(204)

    async def publish(self, call: Call) -> Any:
        body = call.body()
        key = body.get("routing_key")
        if not isinstance(key, str):
            raise _bad("routing_key must be a string")
        payload = body.get("payload", "")
        encoding = body.get("payload_encoding", "string")
        if not isinstance(payload, str):
            raise _bad("payload must be a string")
        if encoding == "string":
            data = payload.encode()
        elif encoding == "base64":
            try:
                data = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                raise _bad("payload is not base64") from None
        else:
            raise _bad(f"payload_encoding must be string or base64, not {encoding!r}")
        props = _basic_properties(body.get("properties"))
        raw = bytearray()
        props.encode(raw)
        exchange = exchange_name(call.parts[2])
        msg = from_publish(exchange, key, props, bytes(raw), data, self.broker.now())
        result = self.management.publish(call.caller, exchange, key, msg, vhost=call.parts[1])
        await self.broker.committed()
        return {"routed": bool(result)}

    # -- bindings ---------------------------------------------------------------------------
    def _binding(self, b: Mapping[str, Any]) -> dict[str, Any]:
        args = b.get("arguments") or {}
        return {
            "source": b["source"],
            "vhost": b["vhost"],
            "destination": b["destination"],
            "destination_type": b["destination_type"],
            "routing_key": b["routing_key"],
            "arguments": args,
            "properties_key": properties_key(b["routing_key"], args),
        }

    def _binding_list(self, call: Call) -> list[dict[str, Any]]:
        return self._listed(call, "binding", self._binding)

    async def bindings(self, call: Call) -> Any:
        out = self._binding_list(call)
        p = call.parts
        if p[0] == "queues":  # /queues/{vhost}/{q}/bindings
            self.management.read(call.caller, "queue", p[2], vhost=p[1])
            return [b for b in out if b["destination_type"] == "queue" and b["destination"] == p[2]]
        if p[0] == "exchanges":  # /exchanges/{vhost}/{x}/bindings/source|destination
            field = "source" if p[4] == "source" else "destination"
            return [
                b
                for b in out
                if b[field] == p[2] and (field == "source" or b["destination_type"] == "exchange")
            ]
        if len(p) >= 6:  # /bindings/{vhost}/e/{x}/q|e/{y}
            kind = _destination_kind(p[4])
            return [
                b
                for b in out
                if b["source"] == p[3]
                and b["destination_type"] == kind
                and b["destination"] == p[5]
            ]
        return out

    async def bind(self, call: Call) -> Any:
        body = call.body()
        p = call.parts
        attrs = binding_of(
            p[3], _destination_kind(p[4]), p[5], body.get("routing_key", ""), body.get("arguments")
        )
        self.management.create(call.caller, "binding", "", attrs, vhost=p[1])
        await self.broker.committed()
        key, args = attrs["routing_key"], attrs["arguments"]
        location = "/api/" + "/".join(quote(x, safe="") for x in (*p, properties_key(key, args)))
        return HttpResponse(201, b"", headers=(("location", location),))

    def _one_binding(self, call: Call) -> dict[str, Any]:
        p = call.parts
        kind = _destination_kind(p[4])
        for b in self._binding_list(call):
            if (b["source"], b["destination_type"], b["destination"], b["properties_key"]) == (
                p[3],
                kind,
                p[5],
                p[6],
            ):
                return b
        raise NotFoundError("no such binding")

    async def binding(self, call: Call) -> Any:
        return self._one_binding(call)

    async def unbind(self, call: Call) -> Any:
        b = self._one_binding(call)
        name = json.dumps([b["source"], b["destination_type"], b["destination"], b["routing_key"], b["arguments"]],
                          separators=(",", ":"), sort_keys=True)  # fmt: skip
        self.management.delete(call.caller, "binding", name, vhost=call.parts[1])
        await self.broker.committed()
        return HttpResponse(204)

    # -- policies ---------------------------------------------------------------------------
    @staticmethod
    def _policy(p: Mapping[str, Any]) -> dict[str, Any]:
        return {"vhost": p["vhost"], "name": p["name"], "pattern": p["pattern"], "apply-to": p["apply_to"],
                "definition": p["definition"], "priority": p["priority"]}  # fmt: skip

    async def policies(self, call: Call) -> Any:
        return self._listed(call, "policy", self._policy)

    async def policy(self, call: Call) -> Any:
        return self._policy(
            self.management.read(call.caller, "policy", call.parts[2], vhost=call.parts[1])
        )

    async def put_policy(self, call: Call) -> Any:
        body = call.body()
        definition = body.get("definition")
        if not isinstance(definition, dict):
            raise _bad("definition must be a JSON object")
        if not isinstance(body.get("pattern"), str):
            raise _bad("pattern must be a string")
        attrs = {"pattern": body["pattern"], "definition": definition,
                 "priority": _number(body.get("priority"), "priority", 0),
                 "apply_to": str(body.get("apply-to", "all"))}  # fmt: skip
        vhost, name = call.parts[1], call.parts[2]
        try:
            self.management.read(call.caller, "policy", name, vhost=vhost)
        except NotFoundError:
            if vhost not in self.broker.vhosts:
                raise
            self.management.create(call.caller, "policy", name, attrs, vhost=vhost)
            await self.broker.committed()
            return HttpResponse(201)
        self.management.update(call.caller, "policy", name, attrs, vhost=vhost)
        await self.broker.committed()
        return HttpResponse(204)

    async def delete_policy(self, call: Call) -> Any:
        self.management.delete(call.caller, "policy", call.parts[2], vhost=call.parts[1])
        await self.broker.committed()
        return HttpResponse(204)

    # -- users and permissions (read from the definitions export) ---------------------------
    def _export(self, call: Call) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.management.export_definitions(call.caller))
        return document

    async def users(self, call: Call) -> Any:
        return [_user(u) for u in self._export(call).get("users", [])]

    async def user(self, call: Call) -> Any:
        for u in self._export(call).get("users", []):
            if u.get("name") == call.parts[1]:
                return _user(u)
        raise NotFoundError(call.parts[1])

    async def permissions(self, call: Call) -> Any:
        perms = self._export(call).get("permissions", [])
        p = call.parts
        if p[0] == "users":
            return [x for x in perms if x.get("user") == p[1]]
        if p[0] == "vhosts":
            return [x for x in perms if x.get("vhost") == p[1]]
        return perms

    async def permission(self, call: Call) -> Any:
        for x in self._export(call).get("permissions", []):
            if (x.get("vhost"), x.get("user")) == (call.parts[1], call.parts[2]):
                return x
        raise NotFoundError("no such permission")

    async def put_user(self, call: Call) -> Any:
        body = call.body()
        fields = {}
        for key in ("password", "password_hash", "hashing_algorithm"):
            value = body.get(key)
            if value is not None and not isinstance(value, str):
                raise _bad(f"{key} must be a string")
            fields[key] = value
        if fields["password"] is not None and fields["password_hash"] is not None:
            raise _bad("give password or password_hash, not both")
        tags = body.get("tags", [])
        new = self.management.put_user(
            call.caller,
            call.parts[1],
            password=fields["password"],
            password_hash=fields["password_hash"] or None,
            hashing_algorithm=fields["hashing_algorithm"],
            tags=tags,
        )
        await self.broker.committed()  # (with workers: read again by every one before the answer)
        return HttpResponse(201 if new else 204)

    async def delete_user(self, call: Call) -> Any:
        self.management.delete_user(call.caller, call.parts[1])
        await self.broker.committed()
        return HttpResponse(204)

    async def put_permission(self, call: Call) -> Any:
        body = call.body()
        configure, write, read = (body.get(a) for a in ("configure", "write", "read"))
        if not (isinstance(configure, str) and isinstance(write, str) and isinstance(read, str)):
            raise _bad("configure, write and read must be strings (regular expressions)")
        vhost, user = call.parts[1], call.parts[2]
        new = self.management.put_permission(call.caller, user, vhost, configure, write, read)
        await self.broker.committed()
        return HttpResponse(201 if new else 204)

    async def delete_permission(self, call: Call) -> Any:
        self.management.delete_permission(call.caller, call.parts[2], call.parts[1])
        await self.broker.committed()
        return HttpResponse(204)

    # -- definitions ------------------------------------------------------------------------
    async def export(self, call: Call) -> Any:
        document = self._export(call)
        if len(call.parts) == 2:  # one virtual host's: its topology, without the host's name
            vhost = call.parts[1]
            if vhost not in self.broker.vhosts:
                raise NotFoundError(vhost)
            document = {
                "rabbit_version": document.get("rabbit_version", RABBITMQ_VERSION),
                **{
                    k: [
                        {f: v for f, v in e.items() if f != "vhost"}
                        for e in document.get(k, [])
                        if e.get("vhost") == vhost
                    ]
                    for k in ("parameters", "policies", "queues", "exchanges", "bindings")
                },
            }
        headers: tuple[tuple[str, str], ...] = ()
        if call.query().get("download"):
            headers = (
                ("content-disposition", f'attachment; filename="{call.query()["download"]}"'),
            )
        return HttpResponse.json(200, document, headers=headers)

    async def import_(self, call: Call) -> Any:
        raw = call.request.body
        if (call.request.header("content-type") or "").startswith(
            "application/x-www-form-urlencoded"
        ):
            form = parse_qs(raw.decode("utf-8", "replace"))
            raw = form.get("file", [""])[0].encode()
        try:
            document = json.loads(raw or b"{}")
        except ValueError as exc:
            raise _bad(f"the definitions are not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise _bad("the definitions must be a JSON object")
        if len(call.parts) == 2:  # into one virtual host: every entry is put there
            vhost = call.parts[1]
            for key in ("parameters", "policies", "queues", "exchanges", "bindings"):
                entries = document.get(key)
                if isinstance(entries, list):
                    document[key] = [
                        {**e, "vhost": vhost} if isinstance(e, dict) else e for e in entries
                    ]
        outcome = self.management.import_definitions(call.caller, document)
        await self.broker.committed()
        if outcome.get("skipped"):
            log.info("definitions imported over HTTP, skipped: %s", "; ".join(outcome["skipped"]))
        return HttpResponse(204)

    # -- health -----------------------------------------------------------------------------
    async def aliveness(self, call: Call) -> Any:
        """RabbitMQ's: declare ``aliveness-test`` in the host, publish to it, get it back."""
        vhost, name = call.parts[1], "aliveness-test"
        m, caller = self.management, call.caller
        try:
            m.read(caller, "queue", name, vhost=vhost)
        except NotFoundError:
            m.create(caller, "queue", name, {"durable": False}, vhost=vhost)
        props = BasicProperties()
        raw = bytearray()
        props.encode(raw)
        msg = from_publish("", name, props, bytes(raw), b"test_message", self.broker.now())
        if not m.publish(caller, "", name, msg, vhost=vhost):
            return HttpResponse.json(
                503, {"status": "failed", "reason": "the test message was not taken"}
            )
        got = m.get(caller, name, 1, settle="ack", vhost=vhost)
        if not got:
            return HttpResponse.json(
                503, {"status": "failed", "reason": "the test message did not come back"}
            )
        return {"status": "ok"}

    async def health(self, call: Call) -> Any:
        self.management.overview(call.caller)  # the read check
        check = call.parts[2]
        if check in ("alarms", "local-alarms"):
            alarm = self.broker.alarm
            if alarm is not None:
                return HttpResponse.json(503, {"status": "failed", "reason": "resource alarm(s) in effect in the cluster",
                                               "alarms": [{"node": self.node, "resource": alarm}]})  # fmt: skip
            return {"status": "ok"}
        if check in ("virtual-hosts", "node-is-quorum-critical", "node-is-mirror-sync-critical",
                     "certificate-expiration", "is-in-service", "ready-to-serve-clients"):  # fmt: skip
            return {"status": "ok"}
        if check in ("port-listener", "protocol-listener") and len(call.parts) == 4:
            return {"status": "ok", check.replace("-listener", ""): call.parts[3]}
        raise NotFoundError(check)


_NONE_HERE = (
    ("parameters", 0), ("parameters", 1), ("parameters", 2), ("global-parameters", 0),
    ("operator-policies", 0), ("operator-policies", 1), ("vhost-limits", 0), ("vhost-limits", 1),
)  # fmt: skip
"""``(path, number of * segments)`` of the lists this broker has nothing in."""

_ALL_TAGS = ("administrator", "monitoring", "policymaker", "management", "impersonator")


def _exchange_arguments(x: Mapping[str, Any]) -> dict[str, Any]:
    """An exchange's arguments as RabbitMQ shows them: its alternate exchange among them."""
    args = dict(x.get("arguments") or {})
    if x.get("alternate_exchange"):
        args.setdefault("alternate-exchange", x["alternate_exchange"])
    return args


def _destination_kind(char: str) -> str:
    if char == "q":
        return "queue"
    if char == "e":
        return "exchange"
    raise ApiError(404, "Object Not Found", "Not Found")


def _user(u: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": u.get("name"),
        "password_hash": u.get("password_hash", ""),
        "hashing_algorithm": u.get("hashing_algorithm", "rabbit_password_hashing_sha256"),
        "tags": u.get("tags", []),
        "limits": u.get("limits", {}),
    }


def _basic(header: str | None) -> tuple[str, str]:
    """The user name and password of a basic ``Authorization`` header (401 without one)."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "basic":
        raise ApiError(401, "not_authorised", "Not_Authorized")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise ApiError(
            401, "not_authorised", "the Authorization header is not base64 of user:password"
        ) from None
    username, sep, password = decoded.partition(":")
    if not sep:
        raise ApiError(401, "not_authorised", "the Authorization header has no password")
    return username, password


_PROPERTY_TYPES: dict[str, type | tuple[type, ...]] = {
    "content_type": str, "content_encoding": str, "headers": dict, "delivery_mode": int, "priority": int,
    "correlation_id": str, "reply_to": str, "expiration": str, "message_id": str, "timestamp": int,
    "type": str, "user_id": str, "app_id": str,
}  # fmt: skip


def _basic_properties(value: Any) -> BasicProperties:
    """RabbitMQ's ``properties`` map of a publish, as 0-9-1 basic properties."""
    if value is None or value == "":
        return BasicProperties()
    if not isinstance(value, dict):
        raise _bad("properties must be a JSON object")
    kw: dict[str, Any] = {}
    for key, v in value.items():
        kind = _PROPERTY_TYPES.get(key)
        if kind is None:
            raise _bad(f"unknown property {key!r}")
        if kind is int and isinstance(v, str) and v.isdigit():
            v = int(v)
        if not isinstance(v, kind) or isinstance(v, bool):
            raise _bad(
                f"property {key} must be {'a number' if kind is int else 'a ' + getattr(kind, '__name__', '')}"
            )
        kw[key] = v
    return BasicProperties(**kw)


def remove_queue(
    m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
) -> None:
    """``DELETE /api/queues/{vhost}/{name}``'s deletion (``if_empty``, ``if_unused`` in
    ``args``), a :data:`~amqp10.broker.management.NodeOp`: on the queue's owner."""
    found = find_queue(m, caller, vhost or "/", name)
    if found is None:
        raise NotFoundError(name)
    q, kind = found
    if args.get("if_empty") and q.get("depth", 0):
        raise BadRequest(f"queue '{name}' in vhost '{vhost}' is not empty")
    if args.get("if_unused") and q.get("consumers", 0):
        raise BadRequest(f"queue '{name}' in vhost '{vhost}' in use")
    m.delete(caller, kind, name, vhost=vhost)


def take_messages(
    m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``POST /api/queues/{vhost}/{name}/get``'s messages (``count``, ``settle``, ``encoding``,
    ``limit`` in ``args``), taken from the queue (a :data:`~amqp10.broker.management.NodeOp`:
    on the queue's owner)."""
    got = m.get(caller, name, int(args["count"]), settle=str(args["settle"]), vhost=vhost)
    limit = args.get("limit")
    return [_got(g.message, g.left, g.redelivered, str(args["encoding"]), None if limit is None else int(limit)) for g in got]


def _got(
    msg: Any, left: int, redelivered: bool, encoding: str, limit: int | None
) -> dict[str, Any]:
    """A message taken by ``get``, as RabbitMQ shows it (its 0-9-1 form)."""
    content = unpack(msg.form(AMQP091_FORMAT))
    props, _ = BasicProperties.decode(content.properties, 0)
    properties = {
        k: _json_value(getattr(props, k))
        for k in _PROPERTY_TYPES
        if getattr(props, k, None) is not None
    }
    body = content.body
    size = len(body)
    if limit is not None:
        body = body[:limit]
    payload_encoding = "string"
    try:
        if encoding == "base64":
            raise UnicodeDecodeError("utf-8", b"", 0, 1, "base64 asked for")
        payload = body.decode("utf-8")
    except UnicodeDecodeError:
        payload, payload_encoding = base64.b64encode(body).decode(), "base64"
    return {
        "payload_bytes": size,
        "redelivered": redelivered,
        "exchange": content.exchange,
        "routing_key": content.routing_key,
        "message_count": left,
        "properties": properties,
        "payload": payload,
        "payload_encoding": payload_encoding,
    }


def _json_value(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def rabbitmq_api_routes(api: RabbitApi) -> dict[str, Route]:
    """The route serving every path under ``/api/`` (to add to the HTTP listener's routes)."""
    return {API_PREFIX + "*": Route(get=api.handle, methods=API_METHODS)}
