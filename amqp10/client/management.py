"""Managing the broker's queues, exchanges and bindings: ``conn.management()``.

Two protocols, one API (:class:`Management`):

- RabbitMQ 4's management node (:class:`RabbitManagement`): HTTP over AMQP 1.0 on
  ``/management``, a link pair named alike with ``{paired: true}``, requests
  pre-settled;
- the OASIS AMQP Management draft's ``$management`` (:class:`OasisManagement`), as our
  broker serves it: ``CREATE``/``READ``/``DELETE``/``QUERY`` of entity types
  ``queue``, ``stream``, ``exchange``, ``binding`` (and our ``PURGE``), replies on a
  receiver from ``$management``.

``conn.management()`` picks RabbitMQ 4's when the peer's open says product
``RabbitMQ`` at version 4 or later (our broker does), the OASIS one otherwise;
``protocol=`` chooses (:data:`RABBITMQ`, :data:`OASIS`). The links attach on the first
request and detach with :meth:`Management.close` (or the connection). A refusal is an
:class:`~amqp10.errors.ManagementError` with the peer's status and reason (400
:class:`~amqp10.errors.BadRequestError`, 403 :class:`~amqp10.errors.ForbiddenError`,
404 :class:`~amqp10.errors.NotFoundError`, 409 :class:`~amqp10.errors.ConflictError`).

Where the protocols differ, each keeps its server's answer: RabbitMQ deletes what is
not there without complaint (queues, exchanges, bindings), the OASIS node says 404;
RabbitMQ's protocol lists nothing (:meth:`Management.list_queues` is a 501 there).
Neither has ``if-unused``/``if-empty`` on delete: :meth:`Management.delete_queue`
reads the queue first and refuses (409) when it is in use or not empty — a check,
not a lock, against other clients. The messages are :mod:`amqp10.management`'s,
shared with the broker that answers them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from .. import errors
from ..management import ExchangeInfo, QueueInfo, http, oasis
from ..message import Message
from ._common import SettleMode, deadline
from .request import RequestLinks

if TYPE_CHECKING:
    from .request import Requests

__all__ = ["OASIS", "PROTOCOLS", "RABBITMQ", "Management", "OasisManagement", "RabbitManagement", "protocol_of"]

RABBITMQ = "rabbitmq"
OASIS = "oasis"
PROTOCOLS = (RABBITMQ, OASIS)


def protocol_of(remote_properties: Mapping[Any, Any] | None) -> str:
    """The protocol a peer's open properties call for: RabbitMQ 4 or later, else OASIS."""
    props = remote_properties or {}
    if str(props.get("product", "")) != "RabbitMQ":
        return OASIS
    major = str(props.get("version", "")).partition(".")[0]
    return RABBITMQ if major.isdigit() and int(major) >= 4 else OASIS


class Management:
    """Queues, exchanges and bindings on the peer (see the module's docstring).

    Every call takes ``timeout`` (the connection's when None), the bound on the whole
    call: attaching the links on the first one, and each request it makes.
    """

    protocol = ""

    def __init__(self, conn: Requests, *, timeout: float | None = None) -> None:
        self._conn = conn
        self._timeout = timeout
        self._links: RequestLinks | None = None
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self._conn.peer}>"

    # -- queues -------------------------------------------------------------------------------
    async def declare_queue(
        self,
        name: str,
        *,
        type: str | None = None,
        durable: bool = True,
        auto_delete: bool = False,
        exclusive: bool = False,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> QueueInfo:
        """Declare queue ``name`` (``type``: ``classic``, ``quorum``, ``stream``, RabbitMQ's
        ``x-queue-type``; ``arguments``: its ``x-`` arguments) and return it as it is. An
        equal declaration of an existing queue is fine; a different one is a
        :class:`~amqp10.errors.ConflictError`. ``exclusive`` (the queue goes with this
        connection) is RabbitMQ's; the OASIS node has no such attribute."""
        args = dict(arguments or {})
        if type is not None:
            args["x-queue-type"] = type
        with self._deadline(timeout, f"declaring queue {name!r}"):
            return await self._declare_queue(name, durable, auto_delete, exclusive, args)

    async def delete_queue(
        self, name: str, *, if_unused: bool = False, if_empty: bool = False, timeout: float | None = None
    ) -> int:
        """Delete queue ``name``; how many messages went with it. ``if_unused``/``if_empty``:
        refuse (409) when it has consumers / messages (read first: see the module)."""
        what = f"deleting queue {name!r}"
        with self._deadline(timeout, what):
            if if_unused or if_empty:
                q = await self._queue_info(name)
                if if_unused and q.consumer_count:
                    raise _conflict(what, f"queue '{name}' has {q.consumer_count} consumers")
                if if_empty and q.message_count:
                    raise _conflict(what, f"queue '{name}' has {q.message_count} messages")
            return await self._delete_queue(name)

    async def purge_queue(self, name: str, *, timeout: float | None = None) -> int:
        """Drop every message of queue ``name``; how many were dropped."""
        with self._deadline(timeout, f"purging queue {name!r}"):
            return await self._purge_queue(name)

    async def queue_info(self, name: str, *, timeout: float | None = None) -> QueueInfo:
        """Queue ``name`` as it is now (:class:`~amqp10.errors.NotFoundError` if there is none)."""
        with self._deadline(timeout, f"reading queue {name!r}"):
            return await self._queue_info(name)

    async def list_queues(self, *, timeout: float | None = None) -> list[QueueInfo]:
        """Every queue (and stream) the user may see, by name."""
        with self._deadline(timeout, "listing queues"):
            return await self._list_queues()

    # -- exchanges ----------------------------------------------------------------------------
    async def declare_exchange(
        self,
        name: str,
        type: str = "direct",
        *,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Declare exchange ``name`` of ``type`` (``direct``, ``fanout``, ``topic``,
        ``headers``, ...); a different declaration of an existing one is a
        :class:`~amqp10.errors.ConflictError`."""
        with self._deadline(timeout, f"declaring exchange {name!r}"):
            await self._declare_exchange(name, type, durable, auto_delete, internal, dict(arguments or {}))

    async def delete_exchange(self, name: str, *, timeout: float | None = None) -> None:
        with self._deadline(timeout, f"deleting exchange {name!r}"):
            await self._delete_exchange(name)

    async def list_exchanges(self, *, timeout: float | None = None) -> list[ExchangeInfo]:
        """Every exchange the user may see, by name."""
        with self._deadline(timeout, "listing exchanges"):
            return await self._list_exchanges()

    # -- bindings -----------------------------------------------------------------------------
    async def bind(
        self,
        source: str,
        *,
        destination_queue: str | None = None,
        destination_exchange: str | None = None,
        binding_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Bind exchange ``source`` to a queue or (exchange-to-exchange) an exchange."""
        kind, destination = _destination(destination_queue, destination_exchange)
        with self._deadline(timeout, f"binding {kind} {destination!r} to {source!r}"):
            await self._bind(source, kind, destination, binding_key, dict(arguments or {}))

    async def unbind(
        self,
        source: str,
        *,
        destination_queue: str | None = None,
        destination_exchange: str | None = None,
        binding_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Remove the binding :meth:`bind` made with the same arguments."""
        kind, destination = _destination(destination_queue, destination_exchange)
        with self._deadline(timeout, f"unbinding {kind} {destination!r} from {source!r}"):
            await self._unbind(source, kind, destination, binding_key, dict(arguments or {}))

    # -- the links ------------------------------------------------------------------------------
    async def close(self, *, timeout: float | None = None) -> None:
        """Detach the management links (a later call attaches them again)."""
        links, self._links = self._links, None
        if links is not None:
            await links.close(timeout=timeout)

    async def __aenter__(self) -> Management:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _deadline(self, timeout: float | None, what: str) -> AbstractContextManager[None]:
        chosen = timeout if timeout is not None else self._timeout
        return deadline(chosen if chosen is not None else self._conn.timeout, what)

    async def _request(self, message: Message) -> Message:
        async with self._lock:
            links = self._links
            if links is None or not links.is_open:
                links = self._links = await self._open_links()
        return await links.request(message, timeout=math.inf)  # (bounded by the caller's deadline)

    # -- each protocol's ------------------------------------------------------------------------
    async def _open_links(self) -> RequestLinks:
        raise NotImplementedError

    async def _declare_queue(
        self, name: str, durable: bool, auto_delete: bool, exclusive: bool, arguments: dict[str, Any]
    ) -> QueueInfo:
        raise NotImplementedError

    async def _delete_queue(self, name: str) -> int:
        raise NotImplementedError

    async def _purge_queue(self, name: str) -> int:
        raise NotImplementedError

    async def _queue_info(self, name: str) -> QueueInfo:
        raise NotImplementedError

    async def _list_queues(self) -> list[QueueInfo]:
        raise NotImplementedError

    async def _declare_exchange(
        self, name: str, kind: str, durable: bool, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> None:
        raise NotImplementedError

    async def _delete_exchange(self, name: str) -> None:
        raise NotImplementedError

    async def _list_exchanges(self) -> list[ExchangeInfo]:
        raise NotImplementedError

    async def _bind(self, source: str, kind: str, destination: str, key: str, arguments: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _unbind(self, source: str, kind: str, destination: str, key: str, arguments: dict[str, Any]) -> None:
        raise NotImplementedError


class RabbitManagement(Management):
    """RabbitMQ 4's management node: HTTP over AMQP 1.0 (:mod:`amqp10.management.http`)."""

    protocol = RABBITMQ

    async def _open_links(self) -> RequestLinks:
        return await self._conn.request_links(
            http.ADDRESS,
            reply_address=http.ADDRESS,
            reply_to=http.REPLY_TO,
            name=f"management-link-pair-{uuid.uuid4()}",
            properties=dict(http.LINK_PROPERTIES),
            settle_mode=SettleMode.AT_MOST_ONCE,
        )

    async def _call(self, method: str, path: str, body: Any, ok: tuple[int, ...], what: str) -> Any:
        status, answer = http.parse_reply(await self._request(http.request(method, path, body)))
        return http.check(status, answer, ok, what)

    async def _declare_queue(
        self, name: str, durable: bool, auto_delete: bool, exclusive: bool, arguments: dict[str, Any]
    ) -> QueueInfo:
        body = http.queue_body(durable=durable, auto_delete=auto_delete, exclusive=exclusive, arguments=arguments)
        answer = await self._call("PUT", http.queue_path(name), body, (200, 201), f"declaring queue {name!r}")
        return http.parse_queue_map(answer)

    async def _delete_queue(self, name: str) -> int:
        answer = await self._call("DELETE", http.queue_path(name), None, (200,), f"deleting queue {name!r}")
        return _count(answer, "message_count")

    async def _purge_queue(self, name: str) -> int:
        answer = await self._call("DELETE", http.purge_path(name), None, (200,), f"purging queue {name!r}")
        return _count(answer, "message_count")

    async def _queue_info(self, name: str) -> QueueInfo:
        answer = await self._call("GET", http.queue_path(name), None, (200,), f"reading queue {name!r}")
        return http.parse_queue_map(answer)

    async def _list_queues(self) -> list[QueueInfo]:
        raise _unsupported("listing queues")

    async def _declare_exchange(
        self, name: str, kind: str, durable: bool, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> None:
        body = http.exchange_body(kind, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments)
        await self._call("PUT", http.exchange_path(name), body, (201, 204), f"declaring exchange {name!r}")

    async def _delete_exchange(self, name: str) -> None:
        await self._call("DELETE", http.exchange_path(name), None, (204,), f"deleting exchange {name!r}")

    async def _list_exchanges(self) -> list[ExchangeInfo]:
        raise _unsupported("listing exchanges")

    async def _bind(self, source: str, kind: str, destination: str, key: str, arguments: dict[str, Any]) -> None:
        body = http.binding_body(source, kind, destination, key, arguments)
        await self._call("POST", http.BINDINGS, body, (204,), f"binding {kind} {destination!r} to {source!r}")

    async def _unbind(self, source: str, kind: str, destination: str, key: str, arguments: dict[str, Any]) -> None:
        what = f"unbinding {kind} {destination!r} from {source!r}"
        if not arguments:
            path = http.binding_path(source, kind, destination, key)
        else:  # the path names the arguments by the server's hash: ask the server for it
            found = await self._call("GET", http.bindings_query(source, kind, destination, key), None, (200,), what)
            paths = [b.get("location") for b in found or [] if isinstance(b, Mapping) and b.get("arguments") == arguments]
            if not paths or not isinstance(paths[0], str):
                return  # no such binding: done (as RabbitMQ answers a delete of none)
            path = paths[0]
        await self._call("DELETE", path, None, (204,), what)


class OasisManagement(Management):
    """The OASIS AMQP Management draft's ``$management`` (:mod:`amqp10.management.oasis`)."""

    protocol = OASIS

    async def _open_links(self) -> RequestLinks:
        return await self._conn.request_links(oasis.ADDRESS)

    async def _call(self, request: oasis.Request, ok: tuple[int, ...], what: str) -> oasis.Response:
        response = oasis.parse_response(await self._request(oasis.request(request)))
        if response.status not in ok:
            raise errors.ManagementError.for_status(response.status, response.description, what)
        return response

    async def _entity(self, operation: str, kind: str, name: str, what: str, body: Any = None) -> Any:
        ok = {"CREATE": (201,), "DELETE": (204,)}.get(operation, (200,))
        return (await self._call(oasis.Request(operation=operation, type=kind, name=name, body=body), ok, what)).body

    async def _declare_queue(
        self, name: str, durable: bool, auto_delete: bool, exclusive: bool, arguments: dict[str, Any]
    ) -> QueueInfo:
        what = f"declaring queue {name!r}"
        kind = "stream" if arguments.get("x-queue-type") == "stream" else "queue"
        attrs = oasis.queue_attributes(durable=durable, auto_delete=auto_delete, arguments=arguments)
        try:
            return oasis.parse_queue(await self._entity("CREATE", kind, name, what, attrs))
        except errors.ConflictError as exc:  # the draft's CREATE of what exists: equal is fine
            have = await self._queue_info(name)
            wanted = (kind == "stream", durable, auto_delete, arguments)
            if (have.type == "stream", have.durable, have.auto_delete, have.arguments) != wanted:
                raise _conflict(what, f"queue '{name}' exists with other properties ({exc.description})") from None
            return have

    async def _queue_entity(self, name: str, operation: str, what: str) -> Any:
        """``operation`` on queue ``name``, a queue or a stream."""
        try:
            return await self._entity(operation, "queue", name, what)
        except errors.NotFoundError as exc:
            no_queue = exc
        try:
            return await self._entity(operation, "stream", name, what)
        except errors.NotFoundError:
            raise no_queue from None

    async def _delete_queue(self, name: str) -> int:
        what = f"deleting queue {name!r}"
        q = await self._queue_info(name)
        await self._entity("DELETE", "stream" if q.type == "stream" else "queue", name, what)
        return q.message_count

    async def _purge_queue(self, name: str) -> int:
        return _count(await self._entity("PURGE", "queue", name, f"purging queue {name!r}"), "purged")

    async def _queue_info(self, name: str) -> QueueInfo:
        return oasis.parse_queue(await self._queue_entity(name, "READ", f"reading queue {name!r}"))

    async def _query(self, kind: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
        """Every entity of ``kind``, as maps of ``names``, a page per request."""
        rows: list[dict[str, Any]] = []
        while True:
            request = oasis.Request(
                operation="QUERY",
                properties={"entityType": kind, "offset": len(rows)},
                body={"attributeNames": list(names)},
            )
            body = (await self._call(request, (200,), f"listing {kind}s")).body
            page = body.get("results") if isinstance(body, Mapping) else None
            if not page:
                return rows
            rows.extend(dict(zip(names, row, strict=False)) for row in page)

    async def _list_queues(self) -> list[QueueInfo]:
        found = [*await self._query("queue", oasis.QUEUE_READ), *await self._query("stream", oasis.QUEUE_READ)]
        return sorted((oasis.parse_queue(q) for q in found), key=lambda q: q.name)

    async def _declare_exchange(
        self, name: str, kind: str, durable: bool, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> None:
        what = f"declaring exchange {name!r}"
        attrs = oasis.exchange_attributes(
            kind, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments
        )
        try:
            await self._entity("CREATE", "exchange", name, what, attrs)
        except errors.ConflictError as exc:
            have = oasis.parse_exchange(await self._entity("READ", "exchange", name, what))
            if (have.type, have.durable, have.auto_delete, have.internal) != (kind, durable, auto_delete, internal):
                raise _conflict(what, f"exchange '{name}' exists with other properties ({exc.description})") from None

    async def _delete_exchange(self, name: str) -> None:
        await self._entity("DELETE", "exchange", name, f"deleting exchange {name!r}")

    async def _list_exchanges(self) -> list[ExchangeInfo]:
        return [oasis.parse_exchange(x) for x in await self._query("exchange", oasis.EXCHANGE_READ)]

    async def _bind(self, source: str, kind: str, destination: str, key: str, arguments: dict[str, Any]) -> None:
        attrs = oasis.binding_attributes(source, kind, destination, key, arguments)
        await self._entity("CREATE", "binding", "", f"binding {kind} {destination!r} to {source!r}", attrs)

    async def _unbind(self, source: str, kind: str, destination: str, key: str, arguments: dict[str, Any]) -> None:
        name = oasis.binding_name(source, kind, destination, key, arguments)
        await self._entity("DELETE", "binding", name, f"unbinding {kind} {destination!r} from {source!r}")


def open_management(conn: Requests, *, protocol: str | None = None, timeout: float | None = None) -> Management:
    """The management of ``conn``'s peer in ``protocol`` (None: :func:`protocol_of` its open)."""
    chosen = protocol if protocol is not None else protocol_of(conn.remote_properties)
    if chosen == RABBITMQ:
        return RabbitManagement(conn, timeout=timeout)
    if chosen == OASIS:
        return OasisManagement(conn, timeout=timeout)
    raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")


def _destination(queue: str | None, exchange: str | None) -> tuple[str, str]:
    if (queue is None) == (exchange is None):
        raise ValueError("name one destination: destination_queue or destination_exchange")
    return ("queue", queue) if queue is not None else ("exchange", str(exchange))


def _count(body: Any, key: str) -> int:
    value = body.get(key) if isinstance(body, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.ManagementError(f"the reply has no {key} count: {body!r}"[:300])
    return value


def _conflict(what: str, description: str) -> errors.ManagementError:
    return errors.ManagementError.for_status(409, description, what)


def _unsupported(what: str) -> errors.ManagementError:
    return errors.ManagementError.for_status(501, "RabbitMQ 4's management protocol has no listing", what)
