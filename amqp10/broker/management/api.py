"""The management operations on a running broker, for every front end (see the package's docstring)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..core import (
    DEFAULT_EXCHANGE,
    Broker,
    DefinitionsPort,
    ModelError,
    PublishResult,
    Queue,
    QueuedMessage,
    VirtualHost,
    nothing,
)
from ..core.broker import Action
from ..core.message import AMQP1_FORMAT
from .access import Access, Caller
from .draft import DEFAULT_PEEK, Request, Response, execute
from .entities import ENTITY_TYPES, EntityType, model_error_status, plain_value, type_named
from .errors import (
    BadRequest,
    Conflict,
    Forbidden,
    ManagementError,
    NotFoundError,
    NotImplementedOperation,
)

if TYPE_CHECKING:  # the configuration is the layer above: management only reads it
    from ..config import ManagementConfig

__all__ = [
    "Got", "ManagedConnection", "Management", "NodeOp", "Rates", "WholeView", "delete_node", "describe_message",
    "peek_node", "purge_node",
]  # fmt: skip

log = logging.getLogger("amqp10.broker.management")

T = TypeVar("T")

BODY_PREVIEW = 4096
"""Longest body text a PEEK shows (characters); the size says how long the body is."""


@runtime_checkable
class ManagedConnection(Protocol):
    """A client connection as management sees it (the service registers one per connection)."""

    name: str
    """Unique among the broker's connections while it is open."""

    def info(self) -> dict[str, Any]:
        """``protocol``, ``user``, ``vhost``, ``peer``, ``container_id``, ``connected_at``
        (seconds since the epoch), ``sessions``, ``links`` (0-9-1: channels, consumers)."""
        ...

    def consumers(self) -> list[dict[str, Any]]:
        """Its consumers (``FrontEndHandler.consumer_details``: tag, channel, queue, ...)."""
        ...

    def close(self, reason: str) -> None:
        """Close the connection with a 'forced' error carrying ``reason``."""
        ...


class Rates:
    """Messages per second from a node's running counters, over the last ``window`` seconds.

    Each read samples the counters (at most once a second per node); a rate is the
    difference between now and the oldest sample still in the window, so a console
    that polls gets rates without the broker sampling anything on its own.
    """

    def __init__(self, now: Callable[[], float], window: float = 10.0) -> None:
        self.now = now
        self.window = window
        self._samples: dict[Any, deque[tuple[float, tuple[int, ...]]]] = {}
        self._swept = now()

    def sample(self, key: Any, counters: tuple[int, ...]) -> tuple[float, ...]:
        t = self.now()
        ring = self._samples.get(key)
        if ring is None:
            ring = self._samples[key] = deque()
        while len(ring) > 1 and t - ring[1][0] >= self.window:
            ring.popleft()
        if not ring or t - ring[-1][0] >= 1.0:
            ring.append((t, counters))
        t0, old = ring[0]
        dt = t - t0
        if t - self._swept > 60.0:
            self._sweep(t)
        if dt < 1.0:  # too short to say anything (the first read, or reads in a burst)
            return tuple(0.0 for _ in counters)
        return tuple(round(max(c - o, 0) / dt, 3) for c, o in zip(counters, old, strict=False))

    def _sweep(self, t: float) -> None:
        """Forget nodes not read for a minute (deleted, or nobody is looking)."""
        self._swept = t
        for key in [k for k, ring in self._samples.items() if t - ring[-1][0] > 60.0]:
            del self._samples[key]


@dataclass(frozen=True)
class Got:
    """A message :meth:`Management.get` took: the message, how many were left after it, and
    whether it had been delivered before."""

    message: QueuedMessage
    left: int
    redelivered: bool


Taken = list[Got]
"""What :meth:`Management.get` took."""

Entities = list[dict[str, Any]]
"""Entities as maps of attributes (what listings return)."""


NodeOp = Callable[["Management", Caller, str, str, "str | None", Mapping[str, Any]], Any]
"""A change of one node (its entity type, name and vhost; arguments): done on the node's
owner at ``workers`` > 1 (:meth:`Management.on_owner`; ``workers.whole.NODE_OPS`` names
each), its answer JSON's."""


def read_node(m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """:meth:`Management.read`, as a :data:`NodeOp` (its counts are its owner's)."""
    return m.read(caller, entity_type, name, vhost=vhost)


def purge_node(m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]) -> int:
    """:meth:`Management.purge`, as a :data:`NodeOp`."""
    return m.purge(caller, entity_type, name, vhost=vhost)


def peek_node(m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]) -> Entities:
    """:meth:`Management.peek` (``count``, ``offset`` in ``args``), as a :data:`NodeOp`."""
    return m.peek(caller, entity_type, name, int(args["count"]), offset=int(args.get("offset", 0)), vhost=vhost)


def delete_node(m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]) -> None:
    """:meth:`Management.delete`, as a :data:`NodeOp`."""
    m.delete(caller, entity_type, name, vhost=vhost)


class WholeView(Protocol):
    """The whole broker's management when it runs as several workers
    (:class:`~amqp10.broker.workers.whole.WholeBroker`): what differs between workers,
    asked of every worker and merged."""

    async def list(self, caller: Caller, entity_type: str, *, vhost: str | None = None) -> Entities: ...
    async def consumers(self, caller: Caller, *, vhost: str | None = None) -> Entities: ...
    async def overview(self, caller: Caller) -> dict[str, Any]: ...
    async def close_connection(self, caller: Caller, name: str, reason: str) -> None: ...
    async def execute(self, caller: Caller, request: Request) -> Response: ...
    async def on_owner(
        self, caller: Caller, op: NodeOp, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
    ) -> Any: ...
    async def stream_info(self, vhost: str, address: str) -> dict[str, int] | None: ...


class Management:
    """The management operations of one broker (one instance per broker: :meth:`of`)."""

    def __init__(self, broker: Broker, config: ManagementConfig | None = None) -> None:
        self.broker = broker
        self.config = config if config is not None else broker.config.management
        self.access = Access(broker, self.config)
        self.rates = Rates(broker.now)
        self._connections: dict[str, ManagedConnection] = {}
        self.whole: WholeView | None = None
        """``workers`` > 1: the whole broker's view (set by the worker's service); the
        ``*_whole`` calls go through it. None: this broker is the whole broker."""
        self._listed: Mapping[str, Entities] = {}
        """Listings made already, by type, for the request being answered (:meth:`listing`)."""

    @classmethod
    def of(cls, broker: Broker) -> Management:
        """The broker's management (made on first use, shared by every front end)."""
        return broker.shared("management", lambda: cls(broker))

    # -- connections (the service registers them) ------------------------------------------
    def register_connection(self, conn: ManagedConnection) -> None:
        self._connections[conn.name] = conn

    def unregister_connection(self, conn: ManagedConnection) -> None:
        if self._connections.get(conn.name) is conn:
            del self._connections[conn.name]

    def connection_list(self) -> list[ManagedConnection]:
        return list(self._connections.values())

    # -- the direct API ------------------------------------------------------------------------
    def types(self) -> list[str]:
        return list(ENTITY_TYPES)

    def list(
        self,
        caller: Caller,
        entity_type: str,
        *,
        vhost: str | None = None,
        offset: int = 0,
        count: int | None = None,
    ) -> Entities:
        """Entities of ``entity_type`` the caller may see, by name, ``offset``/``count`` paged."""
        t = type_named(entity_type)
        self.access.can_read(caller, f"listing {t.name}s")
        if count is not None and count > self.config.max_query_count:
            raise BadRequest(f"count {count} is above the limit of {self.config.max_query_count}")
        if offset < 0 or (count is not None and count < 0):
            raise BadRequest("offset and count must not be negative")
        out = self._listed.get(t.name) if vhost is None else None
        if out is None:
            out = [t.describe(self, v, item) for v, item in self._visible(caller, t, vhost)]
        end = None if count is None else offset + count
        return out[offset:end]

    def read(self, caller: Caller, entity_type: str, name: str, *, vhost: str | None = None) -> dict[str, Any]:
        t = type_named(entity_type)
        self.access.can_read(caller, f"reading {t.a}")
        v, item = self._find(caller, t, name, vhost)
        return t.describe(self, v, item)

    def create(
        self,
        caller: Caller,
        entity_type: str,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        vhost: str | None = None,
    ) -> dict[str, Any]:
        """Create an entity; its attributes as made. 409 if it exists."""
        t = type_named(entity_type)
        attrs = dict(attributes or {})
        self._may_change(caller, t, "creating")
        v = self.access.vhost(caller, vhost) if t.vhost_scoped else None
        if not isinstance(name, str) or (not name and t.name != "binding"):
            raise BadRequest(f"{t.a} needs a name (a non-empty string)")
        for key in t.required:
            if key != "name" and key not in attrs:
                raise BadRequest(f"creating {t.a} needs the attribute {key!r}")
        if v is not None and t.resource is not None:
            target = str(attrs.get("destination", name)) if t.name == "binding" else name
            self.access.permission(caller, v, target, t.resource, "configure")
        item = _model(lambda: t.create(self, v, name, attrs))
        return t.describe(self, v, item)

    def update(
        self, caller: Caller, entity_type: str, name: str, attributes: Mapping[str, Any], *, vhost: str | None = None
    ) -> dict[str, Any]:
        t = type_named(entity_type)
        self._may_change(caller, t, "updating")
        v, item = self._find(caller, t, name, vhost)
        if v is not None and t.resource is not None:
            self.access.permission(caller, v, t.name_of(item), t.resource, "configure")
        item = _model(lambda: t.update(self, v, item, dict(attributes or {})))
        return t.describe(self, v, item)

    def delete(self, caller: Caller, entity_type: str, name: str, *, vhost: str | None = None) -> None:
        t = type_named(entity_type)
        if t.name == "connection":
            self.close_connection(caller, name)
            return
        self._may_change(caller, t, "deleting")
        v, item = self._find(caller, t, name, vhost)
        if v is not None and t.resource is not None:
            target = item.destination.name if t.name == "binding" else t.name_of(item)
            self.access.permission(caller, v, target, t.resource, "configure")
        _model(lambda: t.delete(self, v, item))

    def purge(self, caller: Caller, entity_type: str, name: str, *, vhost: str | None = None) -> int:
        """Drop every message of a queue or subscription; how many were dropped."""
        t = type_named(entity_type)
        self._may_change(caller, t, "purging")
        q = self._messages(caller, t, name, vhost, "read")
        if not hasattr(q, "purge") or "PURGE" not in t.operations:
            raise NotImplementedOperation(f"{t.a} cannot be purged")
        n: int = q.purge()
        return n

    def peek(
        self,
        caller: Caller,
        entity_type: str,
        name: str,
        count: int = DEFAULT_PEEK,
        *,
        offset: int = 0,
        vhost: str | None = None,
    ) -> Entities:
        """``count`` messages of a queue, stream or subscription from position ``offset``
        (0: the first to be delivered), left in place."""
        t = type_named(entity_type)
        self.access.can_read(caller, f"peeking into {t.a}")
        for label, value in (("count", count), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadRequest(f"{label} must be a non-negative integer, not {value!r}")
        if count > self.config.max_peek:
            raise BadRequest(f"count {count} is above the peek limit of {self.config.max_peek}")
        q = self._messages(caller, t, name, vhost, "read")
        return [describe_message(offset + i, msg) for i, msg in enumerate(q.peek(count, offset))]

    def publish(
        self, caller: Caller, exchange: str, routing_key: str, msg: QueuedMessage, *, vhost: str | None = None
    ) -> PublishResult:
        """Route ``msg`` from ``exchange`` ("" or ``amq.default``: the default exchange) with
        ``routing_key``, as a client's publish would (``write_tags`` and the user's write
        permission on the exchange); what became of it."""
        self.access.can_write(caller, "publishing a message")
        v = self.access.vhost(caller, vhost)
        name = DEFAULT_EXCHANGE if exchange == "amq.default" else exchange
        x = v.exchange(name)
        if x is None:
            raise NotFoundError(f"no exchange {exchange!r} in vhost {v.name!r}")
        if x.internal:
            raise Forbidden(f"cannot publish to internal exchange {exchange!r} in vhost {v.name!r}")
        self.access.permission(caller, v, x.name, "exchange", "write")
        return v.route(x, msg, routing_key, nothing)

    def get(
        self, caller: Caller, queue: str, count: int, *, settle: str = "ack", vhost: str | None = None
    ) -> Taken:
        """Take up to ``count`` messages from ``queue`` as 0-9-1's ``basic.get`` does, each with
        the number of messages left after it; then settle them all: ``ack`` (gone),
        ``requeue`` (back at the head, counted as delivered once more) or ``reject``
        (dead-lettered where the queue says so). Needs ``write_tags`` and the read permission."""
        self.access.can_write(caller, "getting messages")
        if settle not in ("ack", "requeue", "reject"):
            raise BadRequest(f"settle must be ack, requeue or reject, not {settle!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise BadRequest(f"count must be a positive integer, not {count!r}")
        if count > self.config.max_peek:
            raise BadRequest(f"count {count} is above the limit of {self.config.max_peek}")
        q = self._messages(caller, type_named("queue"), queue, vhost, "read")
        if not isinstance(q, Queue):
            raise NotImplementedOperation(f"messages cannot be taken from {queue!r} without a consumer")
        got: Taken = []
        while len(got) < count:
            msg = q.get()
            if msg is None:
                break
            got.append(Got(msg, q.count, msg.delivery_count > 0))
        for msg in (g.message for g in got):
            if settle == "ack":
                q.ack(msg)
            elif settle == "requeue":
                q.release(msg, delivery_failed=True)
            else:
                q.reject(msg)
        return got

    def connections(self, caller: Caller) -> Entities:
        return self.list(caller, "connection")

    def consumers(self, caller: Caller, *, vhost: str | None = None) -> Entities:
        """The consumers of every connection the caller may see (of ``vhost``'s only, if
        named): each connection's ``consumer_details`` with its ``connection`` (name),
        ``user``, ``vhost`` and ``peer``."""
        self.access.can_read(caller, "listing consumers")
        if vhost is not None:
            self.access.vhost(caller, vhost)  # 404 if there is none
        out: list[dict[str, Any]] = []
        for _, conn in self._visible(caller, type_named("connection"), None):
            info = conn.info()
            if vhost is not None and info.get("vhost") != vhost:
                continue
            where = {"connection": conn.name, **{k: info.get(k) for k in ("user", "vhost", "peer")}}
            out.extend({**c, **where} for c in conn.consumers())
        return out

    def close_connection(self, caller: Caller, name: str, reason: str = "closed by the broker's management") -> None:
        """Close a connection: any, for ``admin_tags``; one's own, for ``write_tags``."""
        conn = self._connections.get(name) if isinstance(name, str) else None
        if conn is None:
            raise NotFoundError(f"no connection {name!r}")
        own = caller.user is not None and conn.info().get("user") == caller.user
        if own:
            self.access.can_write(caller, "closing a connection")
        else:
            self.access.require(caller, self.config.admin_tags, "closing another user's connection")
        log.info("management: %s closes connection %s", caller.user or "anonymous", name)
        conn.close(str(reason))

    def export_definitions(self, caller: Caller) -> str:
        """The whole broker's definitions as RabbitMQ's JSON (``admin_tags`` only)."""
        self.access.require(caller, self.config.admin_tags, "exporting definitions")
        return self._definitions().export_json()

    def import_definitions(self, caller: Caller, document: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Import a definitions document (JSON text or a map; ``admin_tags`` only): counts per
        kind (``imported``), ``warnings`` and ``skipped`` entries with their reasons."""
        self.access.require(caller, self.config.admin_tags, "importing definitions")
        if not isinstance(document, (str, bytes, Mapping)):
            raise BadRequest("the definitions must be a JSON document (text) or a map")
        try:
            return self._definitions().import_document(document)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    # -- users and permissions (the users file's, through the definitions port) --------------
    def put_user(
        self,
        caller: Caller,
        name: str,
        *,
        password: str | None = None,
        password_hash: str | None = None,
        hashing_algorithm: str | None = None,
        tags: Any = (),
    ) -> bool:
        """Add user ``name`` or change it (``admin_tags`` only); True if new. ``password``
        becomes SCRAM credentials; ``password_hash`` (RabbitMQ's, as definitions carry it)
        is imported as a definitions user is; neither: a user who cannot log in with a
        password. A new user has no permissions (RabbitMQ's ``add_user``)."""
        self.access.require(caller, self.config.admin_tags, "changing users")
        if not isinstance(name, str) or not name:
            raise BadRequest("a user needs a name (a non-empty string)")
        checked = list(tags) if isinstance(tags, tuple) else tags  # a list, or RabbitMQ's comma string
        port = self._definitions()
        if password_hash is not None:
            exported = json.loads(port.export_json()).get("users", [])
            new = not any(u.get("name") == name for u in exported)
            user = {"name": name, "password_hash": password_hash, "tags": checked}
            if hashing_algorithm is not None:
                user["hashing_algorithm"] = hashing_algorithm
            outcome = self.import_definitions(caller, {"users": [user]})
            if outcome.get("skipped"):
                raise BadRequest("; ".join(outcome["skipped"]))
            return new
        return self._users(lambda: port.put_user(name, password, checked))

    def delete_user(self, caller: Caller, name: str) -> None:
        self.access.require(caller, self.config.admin_tags, "deleting users")
        port = self._definitions()
        self._users(lambda: port.delete_user(name))

    def put_permission(
        self, caller: Caller, user: str, vhost: str, configure: str, write: str, read: str
    ) -> bool:
        """Set ``user``'s three patterns in ``vhost`` (``admin_tags`` only); True if new."""
        self.access.require(caller, self.config.admin_tags, "setting permissions")
        if self.broker.vhost(vhost) is None or vhost not in self.broker.vhosts:
            raise NotFoundError(f"no virtual host {vhost!r}")
        port = self._definitions()
        return self._users(lambda: port.put_permission(user, vhost, str(configure), str(write), str(read)))

    def delete_permission(self, caller: Caller, user: str, vhost: str) -> None:
        self.access.require(caller, self.config.admin_tags, "clearing permissions")
        port = self._definitions()
        self._users(lambda: port.delete_permission(user, vhost))

    @staticmethod
    def _users(change: Callable[[], T]) -> T:
        """A change of users through the definitions port, its errors as management's."""
        try:
            return change()
        except LookupError as exc:
            raise NotFoundError(str(exc.args[0] if exc.args else exc)) from None
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _definitions(self) -> DefinitionsPort:
        port = self.broker.definitions
        if port is None:
            raise NotImplementedOperation("this broker offers no definitions")
        return port

    def overview(self, caller: Caller) -> dict[str, Any]:
        """The broker's totals: counts of connections, sessions, links, nodes; bytes held."""
        self.access.can_read(caller, "the overview")
        return {**self.broker.counts(), "vhosts": [v.name for v in self.access.visible_vhosts(caller)]}

    # -- the whole broker (every worker's, when it runs as several) ----------------------------
    async def list_whole(self, caller: Caller, entity_type: str, *, vhost: str | None = None) -> Entities:
        """:meth:`list` (all of it) of the whole broker."""
        if self.whole is None:
            return self.list(caller, entity_type, vhost=vhost)
        return await self.whole.list(caller, entity_type, vhost=vhost)

    async def consumers_whole(self, caller: Caller, *, vhost: str | None = None) -> Entities:
        """:meth:`consumers` of the whole broker."""
        if self.whole is None:
            return self.consumers(caller, vhost=vhost)
        return await self.whole.consumers(caller, vhost=vhost)

    async def overview_whole(self, caller: Caller) -> dict[str, Any]:
        """:meth:`overview` of the whole broker."""
        if self.whole is None:
            return self.overview(caller)
        return await self.whole.overview(caller)

    async def close_connection_whole(self, caller: Caller, name: str, reason: str) -> None:
        """:meth:`close_connection`, on whichever worker the connection lives."""
        if self.whole is None:
            self.close_connection(caller, name, reason)
        else:
            await self.whole.close_connection(caller, name, reason)

    async def on_owner(
        self,
        caller: Caller,
        op: NodeOp,
        entity_type: str,
        name: str,
        *,
        vhost: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> Any:
        """``op`` of node ``name`` where the node is: on its owning worker, answered with the
        owner's answer (or refusal); here, with one worker. Once it is stored there."""
        if self.whole is None:
            result = op(self, caller, entity_type, name, vhost, args or {})
            await self.broker.committed()
            return result
        return await self.whole.on_owner(caller, op, entity_type, name, vhost, args or {})

    async def execute_whole(self, caller: Caller, request: Request) -> Response:
        """:meth:`execute` of the whole broker (a QUERY lists every worker's)."""
        if self.whole is None:
            return self.execute(caller, request)
        return await self.whole.execute(caller, request)

    @contextlib.contextmanager
    def listing(self, lists: Mapping[str, Entities]) -> Iterator[None]:
        """While in it, a listing of a type in ``lists`` (of the caller's host) is that list
        (the whole broker's, made already): the draft's QUERY pages through it."""
        self._listed = lists
        try:
            yield
        finally:
            self._listed = {}

    # -- requests in the draft's terms --------------------------------------------------------
    def execute(self, caller: Caller, request: Request) -> Response:
        """Answer one request: never raises (a bad request is a 400 with a reason)."""
        try:
            return self._execute(caller, request)
        except ManagementError as exc:
            return Response(status=exc.status, description=exc.description, body={})
        except ModelError as exc:
            return Response(status=model_error_status(exc), description=str(exc), body={})
        except Exception as exc:  # a bug must not take the broker (or the link) down
            log.exception("management request %r failed", request.operation)
            return Response(status=500, description=f"internal error: {type(exc).__name__}: {exc}"[:500], body={})

    def _execute(self, caller: Caller, request: Request) -> Response:
        return execute(self, caller, request)

    # -- helpers -------------------------------------------------------------------------------
    def _visible(self, caller: Caller, t: EntityType, vhost: str | None) -> Iterable[tuple[VirtualHost | None, Any]]:
        if t.name == "connection":
            monitors = self.access.monitors(caller)
            for c in t.items(self, None):
                if monitors or (caller.user is not None and c.info().get("user") == caller.user):
                    yield None, c
            return
        if t.name == "vhost":
            visible = {id(v) for v in self.access.visible_vhosts(caller)}
            for v in t.items(self, None):
                if id(v) in visible:
                    yield None, v
            return
        v = self.access.vhost(caller, vhost)
        for item in t.items(self, v):
            yield v, item

    def _find(self, caller: Caller, t: EntityType, name: Any, vhost: str | None) -> tuple[VirtualHost | None, Any]:
        if not isinstance(name, str):
            raise BadRequest(f"{t.a}'s name must be a string, not {type(name).__name__}")
        if t.vhost_scoped:
            v = self.access.vhost(caller, vhost)
            item = t.find(self, v, name)
        else:
            v = None
            item = None
            for _, candidate in self._visible(caller, t, vhost):
                if t.name_of(candidate) == name:
                    item = candidate
        if item is None:
            where = f" in vhost {v.name!r}" if v is not None else ""
            raise NotFoundError(f"no {t.name} {name!r}{where}")
        return v, item

    def _may_change(self, caller: Caller, t: EntityType, doing: str) -> None:
        what = f"{doing} {t.a}"
        if t.name == "policy":
            self.access.require(caller, self.config.policy_tags, what)
        elif t.name == "vhost":
            self.access.require(caller, self.config.admin_tags, what)
        else:
            self.access.can_write(caller, what)

    def _messages(self, caller: Caller, t: EntityType, name: str, vhost: str | None, action: Action) -> Any:
        v, item = self._find(caller, t, name, vhost)
        q = t.messages(item)
        if v is not None:
            self.access.permission(caller, v, q.name, "queue", action)
        return q


def _model(fn: Callable[[], Any]) -> Any:
    """Run a core operation; its refusals become management errors with the right status."""
    try:
        return fn()
    except ModelError as exc:
        status = model_error_status(exc)
        err: type[ManagementError] = {404: NotFoundError, 403: Forbidden}.get(status, Conflict)
        raise err(str(exc)) from None


def describe_message(position: int, msg: QueuedMessage) -> dict[str, Any]:
    """A held message as plain values (its 1.0 form decoded; the body's text cut at 4096)."""
    from ...message import Message

    out: dict[str, Any] = {
        "position": position,
        "format": msg.format,
        "size": msg.size,
        "priority": msg.priority,
        "durable": msg.durable,
        "delivery_count": msg.delivery_count,
        "arrival": msg.arrival,
        "message_id": plain_value(msg.message_id),
    }
    try:
        m = Message.decode(msg.form(AMQP1_FORMAT))
    except Exception as exc:  # another protocol's form that cannot be read: say so, show the rest
        out["error"] = f"the message cannot be decoded: {exc}"[:300]
        return out
    body = m.body
    if m.body_type == "data" and isinstance(body, list):
        body = b"".join(bytes(part) for part in body)
    body = plain_value(body)
    if isinstance(body, str) and len(body) > BODY_PREVIEW:
        body = body[:BODY_PREVIEW]
        out["truncated"] = True
    out.update(
        {
            "message_id": plain_value(m.id) if m.id is not None else out["message_id"],
            "correlation_id": plain_value(m.correlation_id),
            "subject": m.subject,
            "to": m.to,
            "reply_to": m.reply_to,
            "content_type": m.content_type,
            "application_properties": plain_value(m.application_properties or {}),
            "message_annotations": plain_value(m.message_annotations or {}),
            "body": body,
        }
    )
    return out
