"""``/management``: RabbitMQ 4's management node, HTTP over AMQP 1.0 ("AMQP 1.0 management v2").

RabbitMQ 4's own AMQP 1.0 clients (Java, .NET, Go, Python, JavaScript) and ours
(``conn.management()``) manage topology through a pair of links attached to
``/management``; the requests, paths, bodies and replies are
:mod:`amqp10.management.http`'s, shared with the client.

Names in paths are percent-encoded. Errors are RabbitMQ's: 400 a bad request (with
its reason), 403 the default exchange or a reserved ``amq.`` name, 404 no such queue,
409 a declaration that differs from what exists, 401 a token renewal (``PUT
/auth/tokens``, RabbitMQ 4.1) with a token that is not valid or names another user. Queue types: ``classic`` and
``quorum`` are core queues (a quorum queue reports its type), ``stream`` a stream.
The declarations are :mod:`amqp10.broker.management.rabbitmq`'s, the mapping RabbitMQ's
HTTP API uses too; the reply waits for the store's commit like every management answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...management import QueueInfo, http
from ...message import Message
from ...types import AmqpValue, DecodeError, Error, ErrorCondition, Properties, decode_at
from ..core import AccessRefused, ModelError, Node, NotFound, QueuedMessage, VirtualHost
from ..management import ManagementError, NotFoundError
from ..management.rabbitmq import (
    Inequivalent,
    binding_of,
    declare_exchange,
    declare_queue,
    exchange_name,
    find_queue,
    node_name,
    queue_type,
    rabbit_flag,
)
from .management import ManagementNode
from .message import Amqp1Message

__all__ = ["RABBITMQ_MANAGEMENT_ADDRESS", "RabbitManagementNode", "queue_map"]

RABBITMQ_MANAGEMENT_ADDRESS = http.ADDRESS

Answer = tuple[int, Any]


class HttpError(Exception):
    """A request answered with an error status and RabbitMQ's reason (a string body)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def queue_map(attrs: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A queue as RabbitMQ's management node answers it (``GET``/``PUT /queues/{q}``)."""
    node = node_name()
    return http.queue_map(
        QueueInfo(
            name=attrs["name"],
            type=queue_type(attrs, kind),
            durable=attrs.get("durable", True),
            auto_delete=attrs.get("auto_delete", False),
            exclusive=attrs.get("exclusive", False),
            arguments=dict(attrs.get("arguments") or {}),
            message_count=attrs.get("depth", 0),
            consumer_count=attrs.get("consumers", 0),
            vhost=attrs.get("vhost", "/"),
            leader=node,
            replicas=[node],
        )
    )


class RabbitManagementNode(ManagementNode):
    """``/management`` as one connection sees it: its requests answered on the paired receiver."""

    kind = "rabbitmq-management"
    any_section_order = True

    def __init__(
        self,
        vhost: VirtualHost,
        may_configure: Callable[[str], bool],
        *,
        user: str | None,
        owner: object,
        is_open: Callable[[], bool],
        renew_token: Callable[[str | bytes], str | None] = lambda token: "no OAuth 2 token to renew",
    ) -> None:
        super().__init__(vhost, may_configure, user=user, is_open=is_open, address=RABBITMQ_MANAGEMENT_ADDRESS)
        self.owner = owner
        """The connection, the owner of the exclusive queues its requests declare."""
        self.renew_token = renew_token
        """Replace the connection's OAuth 2 token (``PUT /auth/tokens``): None, or why not."""
        self._routes: dict[tuple[str, str], Callable[[list[str], dict[str, str], Any], Answer]] = {
            ("GET", "queues"): self._queue_get,
            ("PUT", "queues"): self._queue_put,
            ("DELETE", "queues"): self._queue_delete,
            ("PUT", "exchanges"): self._exchange_put,
            ("DELETE", "exchanges"): self._exchange_delete,
            ("POST", "bindings"): self._binding_post,
            ("DELETE", "bindings"): self._binding_delete,
            ("GET", "bindings"): self._bindings_get,
            ("PUT", "auth"): self._token_put,
        }

    @staticmethod
    def decode_request(msg: QueuedMessage) -> Message | Error:
        """The request ``msg`` carries: its properties and amqp-value body, its sections in
        any order (RabbitMQ reads them so, and the Python client's proton writes a null body
        before the properties)."""
        data = msg.form(Amqp1Message.format)
        props: Properties | None = None
        body: Any = None
        pos = 0
        try:
            while pos < len(data):
                section, pos = decode_at(data, pos)
                if isinstance(section, Properties):
                    props = section
                elif isinstance(section, AmqpValue):
                    body = section.value
        except (DecodeError, LookupError, ValueError) as exc:
            return Error(condition=ErrorCondition.DECODE_ERROR, description=f"undecodable request: {exc}")
        return Message(body=body, properties=props)

    def request(self, msg: QueuedMessage) -> Error | None:
        request = self.decode_request(msg)
        if isinstance(request, Error):
            return request
        reply_to = request.reply_to
        target: Node | None = None
        if reply_to in (None, http.REPLY_TO):
            target = next((q for q in self.reply_links.values() if not q.deleted), None)
        elif isinstance(reply_to, str):
            target = self._reply_target(reply_to)
        if target is None:
            return Error(
                condition=ErrorCondition.NOT_FOUND,
                description=f"attach a receiver link from {self.name} (its pair) before sending requests",
            )
        status, body = self.answer(request.subject, request.to, request.body)
        if not self.is_open():
            return None
        props, subject = http.reply(status)
        self.send_reply(target, request, props, body, subject=subject)
        return None

    def answer(self, method: Any, path: Any, body: Any) -> Answer:
        """The status code and body for one request."""
        if not isinstance(method, str) or not isinstance(path, str):
            return 400, "a request needs its HTTP method in 'subject' and its path in 'to'"
        segments, query = http.parse_path(path)
        route = self._routes.get((method, segments[0] if segments else ""))
        if route is None:
            return 400, f"unsupported request {method} {path}"
        try:
            return route(segments[1:], query, body)
        except HttpError as exc:
            return exc.status, exc.reason
        except Inequivalent as exc:
            return 409, exc.description
        except ManagementError as exc:
            return (exc.status if exc.status in (400, 403, 404, 409) else 400), exc.description
        except NotFound as exc:
            return 404, str(exc)
        except AccessRefused as exc:
            return 403, str(exc)
        except ModelError as exc:
            return 409, str(exc)

    # -- queues ------------------------------------------------------------------------------
    def _queue_name(self, rest: list[str]) -> str:
        if not rest or not rest[0]:
            raise HttpError(400, "declare queue with empty name not allowed")
        return rest[0]

    def _queue_get(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._queue_name(rest)
        found = find_queue(self.management, self.caller, self.vhost.name, name)
        if found is None:
            raise HttpError(404, f"queue '{name}' in vhost '{self.vhost.name}' not found")
        return 200, queue_map(*found)

    def _queue_put(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._queue_name(rest)
        fields = _fields(body, http.QUEUE_FIELDS, "queue property")
        _no_line_breaks(name)
        if name.startswith("amq."):
            raise HttpError(403, f"queue '{name}' in vhost '{self.vhost.name}' starts with reserved prefix 'amq.'")
        if rabbit_flag(fields.get("exclusive"), "exclusive", False):
            return self._exclusive_queue(name, fields)
        (attrs, kind), created = declare_queue(self.management, self.caller, self.vhost.name, name, fields)
        return (201 if created else 200), queue_map(attrs, kind)

    def _exclusive_queue(self, name: str, fields: Mapping[str, Any]) -> Answer:
        """An exclusive queue: this connection's, deleted when it closes."""
        if not self.may_configure(name):
            raise HttpError(403, f"configure access to queue '{name}' in vhost '{self.vhost.name}' refused")
        created = name not in self.vhost.nodes
        self.vhost.declare_queue(
            name,
            durable=rabbit_flag(fields.get("durable"), "durable", True),
            auto_delete=rabbit_flag(fields.get("auto_delete"), "auto_delete", False),
            arguments=dict(fields.get("arguments") or {}),
            exclusive_owner=self.owner,
        )
        found = find_queue(self.management, self.caller, self.vhost.name, name)
        assert found is not None
        return (201 if created else 200), queue_map(*found)

    def _queue_delete(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._queue_name(rest)
        if rest[1:] == ["messages"]:
            found = find_queue(self.management, self.caller, self.vhost.name, name)
            if found is None:
                raise HttpError(400, f"no queue '{name}' in vhost '{self.vhost.name}'")
            if found[1] == "stream":
                raise HttpError(400, f"purge not supported by queue '{name}' in vhost '{self.vhost.name}'")
            return 200, {"message_count": self.management.purge(self.caller, "queue", name)}
        if rest[1:]:
            raise HttpError(400, f"unsupported request DELETE /queues/{'/'.join(rest)}")
        found = find_queue(self.management, self.caller, self.vhost.name, name)
        if found is None:
            return 200, {"message_count": 0}  # deleting what is not there is done (RabbitMQ's way)
        attrs, kind = found
        self.management.delete(self.caller, kind, name)
        return 200, {"message_count": attrs.get("depth", 0)}

    # -- exchanges ---------------------------------------------------------------------------
    def _exchange_name(self, rest: list[str]) -> str:
        name = exchange_name(rest[0]) if rest else ""
        if not name:
            raise HttpError(403, "operation not permitted on the default exchange")
        _no_line_breaks(name)
        return name

    def _exchange_put(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._exchange_name(rest)
        fields = _fields(body, http.EXCHANGE_FIELDS, "exchange property")
        if name.startswith("amq.") and name not in self.vhost.exchanges:
            raise HttpError(403, f"exchange '{name}' in vhost '{self.vhost.name}' starts with reserved prefix 'amq.'")
        declare_exchange(self.management, self.caller, self.vhost.name, name, fields)
        return 204, None

    def _exchange_delete(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._exchange_name(rest)
        if name.startswith("amq."):
            raise HttpError(403, f"exchange '{name}' in vhost '{self.vhost.name}' starts with reserved prefix 'amq.'")
        try:
            self.management.delete(self.caller, "exchange", name)
        except NotFoundError:
            pass  # deleting what is not there is done
        return 204, None

    # -- bindings ----------------------------------------------------------------------------
    def _binding_post(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        fields = _fields(body, http.BINDING_FIELDS, "binding field")
        source = fields.get("source")
        if "destination_queue" in fields:
            kind, destination = "queue", fields["destination_queue"]
        elif "destination_exchange" in fields:
            kind, destination = "exchange", fields["destination_exchange"]
        else:
            raise HttpError(400, "a binding needs 'destination_queue' or 'destination_exchange'")
        if not isinstance(source, str) or not isinstance(destination, str):
            raise HttpError(400, "a binding needs 'source' and its destination as strings")
        self._binding_names(source, kind, destination)
        attrs = binding_of(source, kind, destination, fields.get("binding_key", ""), fields.get("arguments"))
        try:
            self.management.create(self.caller, "binding", "", attrs)
        except NotFoundError as exc:
            raise HttpError(400, exc.description) from None
        return 204, None

    def _binding_delete(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        named = http.parse_binding_path(rest[0]) if len(rest) == 1 else None
        if named is None:
            raise HttpError(400, f"bad binding path segment '{'/'.join(rest)}'")
        source, kind, destination, key, hashed = named
        self._binding_names(source, kind, destination)
        for b in self._bindings(source, kind, destination, key):
            if http.args_hash(b["arguments"]) == hashed:
                self.management.delete(self.caller, "binding", b["name"])
                break
        return 204, None

    def _bindings_get(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        if rest or "src" not in query or "key" not in query:
            raise HttpError(400, "query the bindings with src, dstq or dste, and key")
        if "dste" in query:
            kind, destination = "exchange", query["dste"]
        elif "dstq" in query:
            kind, destination = "queue", query["dstq"]
        else:
            raise HttpError(400, f"missing 'dste' or 'dstq' in query: {query!r}")
        found = self._bindings(query["src"], kind, destination, query["key"])
        return 200, [_binding_map(b) for b in found]

    # -- token renewal (RabbitMQ 4.1) ---------------------------------------------------------
    def _token_put(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        """``PUT /auth/tokens``: the connection's OAuth 2 token replaced by the body's (204);
        401 for a token that is not valid or names another user."""
        if rest != ["tokens"]:
            raise HttpError(400, f"unsupported request PUT /auth/{'/'.join(rest)}")
        if not isinstance(body, bytes | str):
            raise HttpError(400, "the body of PUT /auth/tokens is the token (binary or string)")
        refused = self.renew_token(body)
        if refused is not None:
            return 401, f"failed to update credential: {refused}"
        return 204, None

    def _binding_names(self, source: str, kind: str, destination: str) -> None:
        for name in (source, destination):
            if not name or name == "amq.default":
                raise HttpError(403, "operation not permitted on the default exchange")
            _no_line_breaks(name)

    def _bindings(self, source: str, kind: str, destination: str, key: str) -> list[dict[str, Any]]:
        return [
            b
            for b in self.management.list(self.caller, "binding")
            if b["source"] == source and b["destination_type"] == kind and b["destination"] == destination and b["routing_key"] == key
        ]


def _fields(body: Any, allowed: tuple[str, ...], what: str) -> dict[str, Any]:
    """A request's map body (null: empty), every key one of ``allowed``."""
    if body is None:
        return {}
    if not isinstance(body, Mapping):
        raise HttpError(400, f"the body must be a map, not {type(body).__name__}")
    for key, value in body.items():
        if key not in allowed:
            raise HttpError(400, f"bad {what} {key!r}: {value!r}")
    return dict(body)


def _no_line_breaks(name: str) -> None:
    if "\n" in name or "\r" in name:
        raise HttpError(400, f"Bad name '{name}': line feed and carriage return characters not allowed")


def _binding_map(b: Mapping[str, Any]) -> dict[str, Any]:
    return http.binding_map(
        b["source"], b["destination_type"], b["destination"], b["routing_key"], b.get("arguments") or {}
    )
