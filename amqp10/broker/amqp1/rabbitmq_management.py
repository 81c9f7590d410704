"""``/management``: RabbitMQ 4's management node, HTTP over AMQP 1.0 ("AMQP 1.0 management v2").

RabbitMQ 4's own AMQP 1.0 clients (Java, .NET, Go, Python, JavaScript) and ours
(``conn.management()``) manage topology through a pair of links attached to
``/management``; the requests, paths, bodies and replies are
:mod:`amqp10.management.http`'s, shared with the client. As in RabbitMQ, the sender
and the receiver of a pair share a link name in one session and each carry the link
property ``paired: true`` (an attach without it is refused, ``invalid-field``, with
RabbitMQ's description); a request is answered on the receiver paired with the sender
it came on, so a connection may hold several pairs. A second sender (or receiver) of a
pair whose half is attached is refused, ``precondition-failed``, as RabbitMQ refuses it:
the Python client's second management object on one connection attaches the same link
names (with our engine, the attach has already taken the name from the first, which is
detached ``link:stolen``; RabbitMQ's first half lives on).

Names in paths are percent-encoded. Errors are RabbitMQ's: 400 a bad request (with
its reason), 403 the default exchange or a reserved ``amq.`` name, 404 no such queue,
409 a declaration that differs from what exists, 401 a token renewal (``PUT
/auth/tokens``, RabbitMQ 4.1) with a token that is not valid or names another user. Queue types: ``classic`` and
``quorum`` are core queues (a quorum queue reports its type), ``stream`` a stream.
The declarations are :mod:`amqp10.broker.management.rabbitmq`'s, the mapping RabbitMQ's
HTTP API uses too; the reply waits for the store's commit like every management answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from ...management import QueueInfo, http
from ...message import Message
from ...transport import Link, LinkState, Receiver, Sender, Session
from ...types import AmqpValue, DecodeError, Error, ErrorCondition, Properties, decode_at, symbol
from ..core import AccessRefused, ModelError, Node, NotFound, Queue, QueuedMessage, VirtualHost
from ..core.equivalence import check_redeclared
from ..management import Caller, Management, ManagementError, NodeOp, NotFoundError
from ..management.rabbitmq import (
    Inequivalent,
    amqp_table,
    binding_of,
    declare_exchange,
    declare_queue,
    exchange_name,
    find_queue,
    node_name,
    queue_type,
    rabbit_flag,
)
from .addresses import AddressError
from .management import ManagementNode
from .message import Amqp1Message

if TYPE_CHECKING:
    from ..oauth import TokenGrant

__all__ = [
    "NOT_PAIRED", "RABBITMQ_MANAGEMENT_ADDRESS", "PairKey", "RabbitManagementNode", "delete_queue", "pair_of",
    "purge_messages", "queue_map",
]  # fmt: skip

RABBITMQ_MANAGEMENT_ADDRESS = http.ADDRESS

Answer = tuple[int, Any]
Reply = Callable[[int, Any], None]


class _Later:
    """The body of an answer that comes later (status 0): ``ask(reply)`` gets it, from
    another worker (an exclusive queue of a name another worker owns, workers > 1)."""

    __slots__ = ("ask",)

    def __init__(self, ask: Callable[[Reply], None]) -> None:
        self.ask = ask


def purge_messages(
    m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
) -> list[Any]:
    """``DELETE /queues/Q/messages``: its status and body (a
    :data:`~amqp10.broker.management.NodeOp`: on the queue's owner)."""
    found = find_queue(m, caller, vhost or "/", name)
    if found is None:
        return [400, f"no queue '{name}' in vhost '{vhost}'"]
    if found[1] == "stream":
        return [400, f"purge not supported by queue '{name}' in vhost '{vhost}'"]
    return [200, {"message_count": m.purge(caller, "queue", name, vhost=vhost)}]


def get_queue(
    m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
) -> list[Any]:
    """``GET /queues/Q``: its status and body (a :data:`~amqp10.broker.management.NodeOp`:
    on the queue's owner, whose record has its counts)."""
    found = find_queue(m, caller, vhost or "/", name)
    if found is None:
        return [404, f"queue '{name}' in vhost '{vhost}' not found"]
    return [200, queue_map(*found)]


def delete_queue(
    m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
) -> list[Any]:
    """``DELETE /queues/Q``: its status and body (a :data:`~amqp10.broker.management.NodeOp`:
    on the queue's owner)."""
    found = find_queue(m, caller, vhost or "/", name)
    if found is None:
        return [200, {"message_count": 0}]  # deleting what is not there is done (RabbitMQ's way)
    attrs, kind = found
    m.delete(caller, kind, name, vhost=vhost)
    return [200, {"message_count": attrs.get("depth", 0)}]


def _refused(exc: Exception) -> Answer:
    """The status and body that answer a request refused with ``exc``."""
    if isinstance(exc, HttpError):
        return exc.status, exc.reason
    if isinstance(exc, Inequivalent):
        return 409, exc.description
    if isinstance(exc, ManagementError):
        return (exc.status if exc.status in (400, 403, 404, 409) else 400), exc.description
    if isinstance(exc, NotFound):
        return 404, str(exc)
    if isinstance(exc, AccessRefused):
        return 403, str(exc)
    return 409, str(exc)


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


PairKey = tuple[Session, str]
"""A management link pair: the session of its two halves and the link name they share."""

PAIRED = symbol("paired")
NOT_PAIRED = "Link property 'paired' is not set to boolean value 'true'"
"""RabbitMQ's description (with ``invalid-field``) of an attach to ``/management`` without ``paired: true``."""


def pair_of(link: Link) -> PairKey:
    """The management link pair ``link`` is a half of: RabbitMQ pairs a sender to
    ``/management`` and a receiver from it by their link name, in one session, each with
    the link property ``paired: true``; without it the attach is refused, as RabbitMQ
    refuses it (raises :class:`~.addresses.AddressError`)."""
    attach = link.remote_attach
    properties = attach.properties if attach is not None else None
    if not isinstance(properties, Mapping) or properties.get(PAIRED) is not True:
        raise AddressError("invalid-field", NOT_PAIRED)
    return link.session, link.name


class RabbitManagementNode(ManagementNode):
    """``/management`` as one connection sees it: each request answered on the receiver
    paired with the sender it came on (its own node, :meth:`requests_of`)."""

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
        pair: PairKey | None = None,
        renew_token: Callable[[str | bytes], str | None] = lambda token: "no OAuth 2 token to renew",
        grant: Callable[[], TokenGrant | None] = lambda: None,
    ) -> None:
        super().__init__(vhost, may_configure, user=user, is_open=is_open, address=RABBITMQ_MANAGEMENT_ADDRESS)
        self._user = user
        self.grant = grant
        """The connection's OAuth 2 token as it is now (None: no token; the users file decides)."""
        self.owner = owner
        """The connection, the owner of the exclusive queues its requests declare."""
        self.pair = pair
        """The link pair whose requests this node answers (None: the connection's node)."""
        self.renew_token = renew_token
        """Replace the connection's OAuth 2 token (``PUT /auth/tokens``): None, or why not."""
        self._halves: dict[tuple[PairKey, bool], Link] = {}
        """The attached half of each pair, by its pair and whether it is the sending half."""
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

    def me(self) -> Caller:
        """Who asks: the connection's user with its token as it is now, checked on resource
        permissions only (RabbitMQ 4 asks no management tag here: :attr:`Caller.resources_only`)."""
        return Caller(user=self._user, vhost=self.vhost.name, grant=self.grant(), resources_only=True)

    # -- the link pairs ------------------------------------------------------------------------
    def _claim(self, link: Link) -> PairKey:
        """The pair ``link`` is a half of, now held by it; raises
        :class:`~.addresses.AddressError` if it is not paired, or if that half of its pair
        is attached already (RabbitMQ's ``precondition-failed``)."""
        pair = pair_of(link)
        key = (pair, isinstance(link, Receiver))  # our receiver: the client's sending half
        held = self._halves.get(key)
        if held is not None and held is not link and held.state is not LinkState.DETACHED:
            raise AddressError(
                "precondition-failed",
                f"received invalid attach for management link pair {link.name!r}: its"
                f" {'sending' if key[1] else 'receiving'} half is attached already",
            )
        self._halves[key] = link
        return pair

    def reply_queue(self, link: Sender) -> Queue:
        """The receiving half of a link pair: the replies to the requests on its sending half."""
        return self.keyed_reply_queue(self._claim(link), f"{self.name}#{link.name}")

    def requests_of(self, link: Receiver) -> RabbitManagementNode:
        """The sending half of a link pair: a node of its own, answering on the pair's
        receiving half (this node's reply links, shared: a half may attach later)."""
        node = RabbitManagementNode(
            self.vhost, self.may_configure, user=self._user,
            owner=self.owner,
            is_open=self.is_open,
            pair=self._claim(link),
            renew_token=self.renew_token,
            grant=self.grant,
        )
        node.reply_links = self.reply_links
        return node

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
            target = None if self.pair is None else self.reply_links.get(self.pair)
        elif isinstance(reply_to, str):
            target = self._reply_target(reply_to)
        if target is None or target.deleted:
            return Error(
                condition=ErrorCondition.NOT_FOUND,
                description=f"attach a receiver link from {self.name} with this sender's link name "
                "(its pair, paired: true) before sending requests",
            )
        status, body = self.answer(request.subject, request.to, request.body)
        if isinstance(body, _Later):
            body.ask(partial(self._reply, target, request))
            return None
        self._reply(target, request, status, body)
        return None

    def _reply(self, target: Node, request: Message, status: int, body: Any) -> None:
        if not self.is_open():
            return
        props, subject = http.reply(status)
        self.send_reply(target, request, props, body, subject=subject)

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
        except (HttpError, ManagementError, ModelError) as exc:
            return _refused(exc)

    # -- queues ------------------------------------------------------------------------------
    def _queue_name(self, rest: list[str]) -> str:
        if not rest or not rest[0]:
            raise HttpError(400, "declare queue with empty name not allowed")
        return rest[0]

    def _queue_get(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        return self._on_owner(get_queue, self._queue_name(rest))

    def _queue_put(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._queue_name(rest)
        fields = _fields(body, http.QUEUE_FIELDS, "queue property")
        _no_line_breaks(name)
        if name.startswith("amq."):
            raise HttpError(403, f"queue '{name}' in vhost '{self.vhost.name}' starts with reserved prefix 'amq.'")
        if rabbit_flag(fields.get("exclusive"), "exclusive", False):
            return self._exclusive_queue(name, fields)
        (attrs, kind), created = declare_queue(self.management, self.me(), self.vhost.name, name, fields)
        return (201 if created else 200), queue_map(attrs, kind)

    def _exclusive_queue(self, name: str, fields: Mapping[str, Any]) -> Answer:
        """An exclusive queue: this connection's, deleted when it closes. Of a name another
        worker owns: made here unless that worker has such a queue (then it is locked)."""
        if not self.may_configure(name):
            raise HttpError(403, f"configure access to queue '{name}' in vhost '{self.vhost.name}' refused")
        remote = self.vhost.elsewhere(name)
        if remote is None:
            return self._make_exclusive(name, fields)

        def ask(reply: Reply) -> None:
            def asked(answer: Callable[[], tuple[int, int]]) -> None:
                try:
                    answer()
                except NotFound:
                    pass
                except ModelError as exc:  # another connection's exclusive queue there
                    reply(409, str(exc))
                    return
                else:
                    if name not in self.vhost.nodes:  # a queue there this worker has no record of
                        reply(409, self._locked(name))
                        return
                if not self.is_open():
                    return  # (nothing to own it)
                try:  # (a shared queue's record here answers as on one broker)
                    status, made = self._make_exclusive(name, fields)
                except ModelError as exc:
                    reply(409, str(exc))
                    return
                if isinstance(made, _Later):
                    made.ask(reply)
                else:
                    reply(status, made)

            remote.ask_status(asked)

        return 0, _Later(ask)

    def _make_exclusive(self, name: str, fields: Mapping[str, Any]) -> Answer:
        """Make exclusive queue ``name`` here. With several workers a new one is answered
        once its placement is in the metadata's order (:meth:`Broker.after_commit
        <amqp10.broker.core.Broker.after_commit>`): if another worker's placement of the
        name came first, the queue made here is gone again (workers/placing.py) and the
        declaration is refused as locked, as on one broker when another connection
        declared it first."""
        vhost = self.vhost
        created = name not in vhost.nodes
        durable = rabbit_flag(fields.get("durable"), "durable", True)
        auto_delete = rabbit_flag(fields.get("auto_delete"), "auto_delete", False)
        arguments = vhost.declared_arguments(  # (the host's default queue type, as RabbitMQ 4 adds it)
            amqp_table(dict(fields.get("arguments") or {})), durable=durable, exclusive=True, auto_delete=auto_delete
        )
        existing = vhost.queue(name)
        if existing is not None and not (isinstance(existing, Queue) and existing.owner not in (None, self.owner)):
            # declared again: equivalent to it, as RabbitMQ compares (another connection's: locked, below)
            check_redeclared(vhost, existing, durable=durable, auto_delete=auto_delete, exclusive=True, arguments=arguments)
        q = vhost.declare_queue(
            name, durable=durable, auto_delete=auto_delete, arguments=arguments, exclusive_owner=self.owner
        )
        found = find_queue(self.management, self.me(), vhost.name, name)
        assert found is not None
        status, body = (201 if created else 200), queue_map(*found)
        if not created or vhost.broker.metadata is None:
            return status, body

        def ask(reply: Reply) -> None:
            def placed() -> None:
                if vhost.nodes.get(name) is q:
                    reply(status, body)
                else:
                    reply(409, self._locked(name))

            vhost.broker.after_commit(placed)

        return 0, _Later(ask)

    def _locked(self, name: str) -> str:
        """Why exclusive queue ``name`` cannot be declared: another connection's holds it."""
        return f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.vhost.name}'"

    def _queue_delete(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._queue_name(rest)
        if rest[1:] not in ([], ["messages"]):
            raise HttpError(400, f"unsupported request DELETE /queues/{'/'.join(rest)}")
        return self._on_owner(purge_messages if rest[1:] else delete_queue, name)

    def _on_owner(self, op: NodeOp, name: str) -> Answer:
        """``op`` of queue ``name``, answered by the queue's owner (workers/whole.py)."""
        if self.management.whole is None:
            status, answer = op(self.management, self.me(), "queue", name, self.vhost.name, {})
            return status, answer

        def ask(reply: Reply) -> None:  # workers > 1: on the queue's owner
            async def on_owner() -> None:
                try:
                    status, answer = await self.management.on_owner(self.me(), op, "queue", name, vhost=self.vhost.name)
                except (ManagementError, ModelError) as exc:
                    status, answer = _refused(exc)
                reply(status, answer)

            task = asyncio.ensure_future(on_owner())
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

        return 0, _Later(ask)

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
        declare_exchange(self.management, self.me(), self.vhost.name, name, fields)
        return 204, None

    def _exchange_delete(self, rest: list[str], query: dict[str, str], body: Any) -> Answer:
        name = self._exchange_name(rest)
        if name.startswith("amq."):
            raise HttpError(403, f"exchange '{name}' in vhost '{self.vhost.name}' starts with reserved prefix 'amq.'")
        try:
            self.management.delete(self.me(), "exchange", name)
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
            self.management.create(self.me(), "binding", "", attrs)
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
                self.management.delete(self.me(), "binding", b["name"])
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
            for b in self.management.list(self.me(), "binding")
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
