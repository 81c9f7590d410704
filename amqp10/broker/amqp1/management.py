"""``$management`` over AMQP 1.0: the OASIS AMQP Management draft, on the broker's management layer.

A request is a message sent to ``$management`` (on a sender link to it, or through
the anonymous relay) with ``reply-to`` set and the operation in its application
properties: ``operation``, ``type`` (the entity type), ``name`` or ``identity``,
``locales`` (ignored), and for QUERY ``entityType``, ``offset``, ``count``. The body
is a map (attributes, or ``attributeNames``). The response goes to ``reply-to``:
the target address of one of this connection's receiver links attached to
``$management`` (the convention of Azure's and Qpid's clients), or a node such as a
dynamic reply queue; its ``correlation-id`` is the request's ``message-id`` (or the
request's own ``correlation-id``, if it set one, as Qpid's clients do), and its application properties carry
``statusCode`` and ``statusDescription`` (and ``status-code``, as some clients read
it). A bad request gets a 4xx response; the link stays up. A request that cannot be
answered at all (undecodable, no ``reply-to``, a ``reply-to`` that names nothing)
is rejected with the reason (a ``reply-to`` naming a node another worker would hold is
looked for there first: the request, and those after it, wait for that worker's answer,
:meth:`ManagementNode.publish_answered`). The operations themselves are
:mod:`amqp10.broker.management`'s (see :mod:`amqp10.broker.management.draft`).

Beside them, the broker's own lower-case operations, which ``amqp10 definitions``,
``amqp10 admin`` and the Spark connector use; they answer with ``status-code``
(200 done, 201 created, 400 bad request, 403 refused, 404 not found, 409
conflicting declaration) and a map body (``error``: the reason of a refusal), as
they always have:

- ``stream-info`` (``address``): a stream's first and next offsets, count, bytes;
- ``declare-exchange`` (``name``, ``type``, ``durable``, ``auto_delete``,
  ``internal``, ``alternate_exchange``, ``arguments``), ``delete-exchange``
  (``name``), ``declare-queue`` (``name``, ``durable``, ``type``: queue or stream,
  ``arguments``: RabbitMQ's ``x-`` queue arguments), ``delete-queue`` (``name``),
  ``bind`` and ``unbind`` (``source``, ``destination``, ``destination_type``: queue
  or exchange, ``routing_key``, ``arguments``): declarations as 0-9-1 makes them
  (an existing equal entity is a 200), under the user's configure permission;
- ``declare-policy`` (``name``, ``pattern``, ``apply-to``, ``definition``,
  ``priority``) and ``delete-policy`` (``name``), for ``[management] policy_tags``;
- ``export-definitions`` (the broker's RabbitMQ JSON as the body) and
  ``import-definitions`` (the document as the body; replies ``imported``,
  ``warnings``, ``skipped``), for ``[management] admin_tags``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ...management import oasis
from ...message import Message
from ...transport import Receiver, Sender
from ...types import DecodeError, Error, ErrorCondition, Target
from ..config import QueuePolicy
from ..core import (
    AccessRefused,
    ModelError,
    Node,
    NodeElsewhere,
    NotFound,
    PublishResult,
    Queue,
    QueuedMessage,
    Refused,
    VirtualHost,
    nothing,
)
from ..core.accounting import DETACHED
from ..management import Caller, Management, ManagementError
from .message import Amqp1Message

__all__ = ["MANAGEMENT_ADDRESS", "ManagementNode"]

MANAGEMENT_ADDRESS = oasis.ADDRESS

log = logging.getLogger("amqp10.broker")

Reply = tuple[int, Any]


class _LookElsewhere(Exception):
    """A request's reply-to names ``node``, which another worker holds if anything does:
    that worker is asked first (:meth:`ManagementNode.publish_answered`)."""

    def __init__(self, node: NodeElsewhere) -> None:
        super().__init__(node.name)
        self.node = node



class ManagementNode(Node):
    """``$management`` as one connection sees it (each connection has its own)."""

    kind = "management"
    any_section_order = False
    """Whether a request's sections may come in any order (the node decodes them itself)."""
    answers_later = True
    """(A request whose reply-to another worker would hold waits for it: :meth:`publish_answered`.)"""

    def __init__(
        self,
        vhost: VirtualHost,
        may_configure: Callable[[str], bool] = lambda resource: True,
        *,
        user: str | None = None,
        may_reply_to: Callable[[str], bool] = lambda address: True,
        is_open: Callable[[], bool] = lambda: True,
        address: str = MANAGEMENT_ADDRESS,
    ) -> None:
        super().__init__(address, QueuePolicy())
        self.vhost = vhost
        self.may_configure = may_configure
        """The permission check for the lower-case declarations (the connection's user)."""
        self.may_reply_to = may_reply_to
        """Whether the user may write to a node named by a ``reply-to`` (not its own reply links)."""
        self.refusal: Error | None = None
        """Why the last request could not be answered (its transfer is rejected with it)."""
        self.is_open = is_open
        """Whether the connection is still open (a request may close it: then no reply)."""
        self.caller = Caller(user=user, vhost=vhost.name)
        self.management = Management.of(vhost.broker)
        self.reply_links: dict[object, Queue] = {}
        """This connection's receiver links from this node, by their key (see :meth:`reply_queue`)."""
        self._unnamed = itertools.count(1)
        self._answering: set[asyncio.Future[None]] = set()
        """Requests being answered by every worker (``workers`` > 1)."""
        self._waiting: deque[tuple[QueuedMessage, Callable[[], None], Refused]] = deque()
        """Requests not answered yet, in order: the first waits for another worker to say
        whether it holds its reply-to (``workers`` > 1)."""
        self._looked: tuple[NodeElsewhere, bool] | None = None
        """The reply-to that worker has (True) or has not, while the request that asked is answered."""
        self._legacy: dict[str, Callable[[Mapping[str, Any]], Reply]] = {
            "stream-info": self._stream_info,
            "declare-exchange": self._declare_exchange,
            "delete-exchange": self._delete_exchange,
            "declare-queue": self._declare_queue,
            "delete-queue": self._delete_queue,
            "bind": self._bind,
            "unbind": self._unbind,
        }

    # -- reply links -----------------------------------------------------------------------------
    def reply_queue(self, link: Sender) -> Queue:
        """The private queue behind ``link``, a receiver link from this node: the responses
        whose ``reply-to`` is its target address (a link without one gets a name of its own)."""
        target = link.remote_target
        key = (target.address if isinstance(target, Target) else None) or f"$management-replies-{next(self._unnamed)}"
        return self.keyed_reply_queue(key, key)

    def keyed_reply_queue(self, key: object, name: str) -> Queue:
        """The reply link queue kept under ``key`` (made, named ``name``, if there is none)."""
        q = self.reply_links.get(key)
        if q is None or q.deleted:
            q = self.reply_links[key] = Queue(name, QueuePolicy(), now=self.vhost.now, dynamic=True)
            q.account_to(self.vhost.broker.stats)  # replies nobody takes count against the memory limit
        return q

    def requests_of(self, link: Receiver) -> ManagementNode:
        """The node the requests on ``link``, a publisher's link to this node, go to: this one
        (a node that pairs links answers each pair on its own); raises
        :class:`~.addresses.AddressError` if the node refuses the link."""
        return self

    def reply_link_gone(self, queue: Queue) -> None:
        """A reply link detached: what it did not take is dropped with it."""
        for key, q in list(self.reply_links.items()):
            if q is queue and not q.consumers:
                del self.reply_links[key]
                q.delete()
                q.account_to(DETACHED)

    # -- requests ---------------------------------------------------------------------------------
    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        """Answer a request; REFUSED (and :attr:`refusal` says why) if it cannot be answered.
        One that waits for another worker (:meth:`publish_answered`) is TAKEN, and nobody is
        told if it is refused after all (its sender cannot be: a pre-settled request)."""
        return self.publish_answered(msg, on_stored, _unheard)

    def publish_answered(self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused) -> PublishResult:
        """:meth:`publish`, for a sender that can be told later: a request whose reply-to
        names a node another worker would hold waits until that worker says whether it has
        it (one broker rejects a reply-to that names no node; a reply would make one there),
        and the requests after it wait with it, so that each is answered in order; then
        ``on_stored``, or ``on_refused`` (REFUSED: :attr:`refusal` says why)."""
        waiting = self._waiting
        if not waiting:
            try:
                return self._answer(msg, on_stored, None)
            except _LookElsewhere as look:
                waiting.append((msg, on_stored, on_refused))
                self._look(look.node)
                return PublishResult.TAKEN
        waiting.append((msg, on_stored, on_refused))
        return PublishResult.TAKEN

    def _answer(self, msg: QueuedMessage, on_stored: Callable[[], None], looked: tuple[NodeElsewhere, bool] | None) -> PublishResult:
        """Answer one request now (``looked``: what the worker asked about its reply-to
        said); raises :class:`_LookElsewhere` if its reply-to is to be looked for first."""
        self._looked = looked
        try:
            refused = self.refusal = self.request(msg)
        finally:
            self._looked = None
        if refused is not None:
            log.info("management request not answered: %s", refused.description)
            return PublishResult.REFUSED
        on_stored()
        return PublishResult.TAKEN

    def _answer_waiting(self, looked: tuple[NodeElsewhere, bool] | None) -> None:
        """Answer the waiting requests in order (the first with ``looked``), until one needs
        another worker's answer."""
        waiting = self._waiting
        while waiting:
            if not self.is_open():  # (nobody to answer)
                waiting.clear()
                return
            msg, on_stored, on_refused = waiting[0]
            try:
                result = self._answer(msg, on_stored, looked)
            except _LookElsewhere as look:
                self._look(look.node)
                return
            looked = None
            waiting.popleft()
            if result is not PublishResult.TAKEN:
                on_refused(result)

    def _look(self, node: NodeElsewhere) -> None:
        """Ask the worker that would hold ``node`` whether it has it; then answer on."""
        node.ask_held(lambda held: self._answer_waiting((node, _held(held))))

    def request(self, msg: QueuedMessage) -> Error | None:
        """Answer one request; None, or why it cannot be answered (the transfer is rejected)."""
        request = self.decode_request(msg)
        if isinstance(request, Error):
            return request
        reply_to = request.reply_to
        if not isinstance(reply_to, str) or not reply_to:
            return Error(
                condition=ErrorCondition.INVALID_FIELD,
                description="a management request needs a reply-to address (a receiver link's target, or a node)",
            )
        target = self._reply_target(reply_to)
        if target is None:
            return Error(
                condition=ErrorCondition.NOT_FOUND,
                description=f"reply-to {reply_to!r} names no receiver link from $management on this connection, "
                "and no node this user may write to",
            )
        props = request.application_properties
        props = dict(props) if isinstance(props, Mapping) else {}
        op = props.get("operation")
        if op == "stream-info" and self._stream_info_elsewhere(props, request.body):
            self._answer_stream_info(target, request, props, reply_to)
            return None
        if isinstance(op, str) and (op in self._legacy or op in _LEGACY_OTHER):
            status, body = self._legacy_request(op, props, request.body)
            reply_props: dict[str, Any] = {"status-code": status}
        else:
            parsed = oasis.parse_request(props, request.body)
            if self.management.whole is not None:  # workers > 1: the whole broker's answer
                self._answer_whole(target, request, parsed, reply_to)
                return None
            response = self.management.execute(self.caller, parsed)
            body = response.body
            reply_props = oasis.reply_properties(response)
        if not self.is_open():  # the request closed its own connection: nobody to answer
            return None
        self.send_reply(target, request, reply_props, body, to=reply_to)
        return None

    def _answer_whole(self, target: Node, request: Message, parsed: oasis.Request, reply_to: str) -> None:
        """Answer ``parsed`` once the other workers have answered their parts (``workers`` > 1)."""

        async def answer() -> None:
            response = await self.management.execute_whole(self.caller, parsed)
            if self.is_open():
                self.send_reply(target, request, oasis.reply_properties(response), response.body, to=reply_to)

        self._later(answer())

    def _later(self, answer: Coroutine[Any, Any, None]) -> None:
        """Run ``answer`` (a reply once other workers answered) in a task of its own."""
        task = asyncio.ensure_future(answer)
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    @staticmethod
    def decode_request(msg: QueuedMessage) -> Message | Error:
        """The request ``msg`` carries, or why it cannot be decoded."""
        try:
            return Message.decode(msg.form(Amqp1Message.format))
        except (DecodeError, LookupError, ValueError) as exc:
            return Error(condition=ErrorCondition.DECODE_ERROR, description=f"undecodable request: {exc}")

    def send_reply(
        self,
        target: Node,
        request: Message,
        props: dict[str, Any],
        body: Any,
        to: str | None = None,
        *,
        subject: str | None = None,
    ) -> None:
        """Put the reply to ``request`` on ``target`` once what the request changed is
        committed to the store (:meth:`~amqp10.broker.core.Broker.after_commit`: a reply
        says the change is made, so it must survive a crash); it correlates by the request's
        message-id (the draft, Azure), or its correlation-id if it set one (Qpid's
        SyncRequestResponse matches replies by the correlation-id it sent)."""
        correlation = request.id if request.correlation_id is None else request.correlation_id
        reply = Message(body=body, correlation_id=correlation, application_properties=props)
        reply.to = to
        if subject is not None:
            reply.subject = subject
        data = reply.encode()

        def answer() -> None:
            if self.is_open():  # (the connection may have ended while the change was committed)
                target.publish(Amqp1Message(data, arrival=self.vhost.now()), nothing)

        self.vhost.broker.after_commit(answer)

    def _reply_target(self, address: str) -> Node | None:
        q = self.reply_links.get(address)
        if q is not None:
            return q
        made = self.vhost.nodes.get(address)
        if made is not None and made.dynamic:  # a client's reply queue is where it was made
            return made  # (workers > 1: on this worker, whoever owns its name)
        node = self.vhost.lookup(address, create=False)
        if node is None or isinstance(node, ManagementNode):
            return None
        if not node.dynamic and not self.may_reply_to(address):
            return None
        if isinstance(node, NodeElsewhere):  # another worker holds it, if anything does
            looked = self._looked
            if looked is not None and looked[0] is node:
                return node if looked[1] else None
            raise _LookElsewhere(node)
        return node

    # -- the broker's own operations ---------------------------------------------------------------
    def _legacy_request(self, op: str, props: Mapping[str, Any], body: Any) -> Reply:
        args = {k: v for k, v in props.items() if k != "operation"}
        if isinstance(body, Mapping):
            args.update(body)
        try:
            if op == "export-definitions":
                return 200, self.management.export_definitions(self.caller)
            if op == "import-definitions":
                return 200, self.management.import_definitions(self.caller, body)
            if op in ("declare-policy", "delete-policy"):
                return self._policy(op, args)
            handler = self._legacy[op]
            if handler != self._stream_info:
                self._check(args)
            return handler(args)
        except ManagementError as exc:
            return exc.status, {"error": exc.description}
        except NotFound as exc:
            return 404, {"error": str(exc)}
        except AccessRefused as exc:
            return 403, {"error": str(exc)}
        except ModelError as exc:
            return 409, {"error": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            return 400, {"error": f"bad request: {exc}"}

    def _policy(self, op: str, args: Mapping[str, Any]) -> Reply:
        name = args.get("name")
        if not isinstance(name, str):
            return 400, {"error": "bad request: 'name' (a string) is missing"}
        m, me = self.management, self.caller
        if op == "delete-policy":
            m.delete(me, "policy", name)
            return 200, {}
        if name in self.vhost.policies:
            m.update(me, "policy", name, args)
            return 200, {}
        m.create(me, "policy", name, args)
        return 201, {}

    def _check(self, args: Mapping[str, Any]) -> None:
        for key in ("name", "destination"):
            if key in args and not self.may_configure(str(args[key])):
                raise AccessRefused(f"configure access to {args[key]!r} in vhost {self.vhost.name!r} refused")

    def _stream_info(self, args: Mapping[str, Any]) -> Reply:
        info = self.vhost.stream_info(str(args.get("address")))
        if info is not None:
            return 200, info
        return 404, {"error": f"no stream at {args.get('address')!r}"}

    def _stream_info_elsewhere(self, props: Mapping[str, Any], body: Any) -> bool:
        """With several workers: whether ``stream-info`` asks about a stream this worker does
        not hold (another worker owns it, or made it): then the whole broker answers."""
        if self.management.whole is None:
            return False
        address = props.get("address", body.get("address") if isinstance(body, Mapping) else None)
        info = self.vhost.stream_info(str(address))
        if info is None:
            return True  # (made on another worker only)
        # a partitioned address is on every worker; a stream, only its owner's is the stream
        return "partitions" not in info and self.vhost.elsewhere(str(address)) is not None

    def _answer_stream_info(self, target: Node, request: Message, props: Mapping[str, Any], reply_to: str) -> None:
        """``stream-info`` of a stream another worker holds, answered once it answered."""
        body = request.body
        address = str(props.get("address", body.get("address") if isinstance(body, Mapping) else None))
        whole = self.management.whole
        assert whole is not None

        async def answer() -> None:
            info = await whole.stream_info(self.vhost.name, address)
            status, reply = (200, info) if info is not None else (404, {"error": f"no stream at {address!r}"})
            if self.is_open():
                self.send_reply(target, request, {"status-code": status}, reply, to=reply_to)

        self._later(answer())

    def _declare_exchange(self, args: Mapping[str, Any]) -> Reply:
        name = str(args["name"])
        existed = name in self.vhost.exchanges
        self.vhost.declare_exchange(
            name,
            str(args.get("type", "direct")),
            durable=bool(args.get("durable", True)),
            auto_delete=bool(args.get("auto_delete", False)),
            internal=bool(args.get("internal", False)),
            alternate=_opt_str(args.get("alternate_exchange")),
            arguments=dict(args.get("arguments") or {}),
        )
        return (200 if existed else 201), {}

    def _delete_exchange(self, args: Mapping[str, Any]) -> Reply:
        self.vhost.delete_exchange(str(args["name"]), if_unused=bool(args.get("if_unused", False)))
        return 200, {}

    def _declare_queue(self, args: Mapping[str, Any]) -> Reply:
        name = str(args["name"])
        existed = name in self.vhost.nodes
        arguments = dict(args.get("arguments") or {})
        kind = args.get("type")
        q = self.vhost.declare_queue(
            name,
            durable=bool(args.get("durable", True)),
            kind=None if kind is None else str(kind),
            arguments=arguments,
        )
        return (200 if existed else 201), {"name": q.name, "message_count": q.count}

    def _delete_queue(self, args: Mapping[str, Any]) -> Reply:
        name = str(args["name"])
        if self.vhost.queue(name) is None:
            raise NotFound(f"no queue {name!r} in vhost {self.vhost.name!r}")
        self.vhost.delete_node(name)
        return 200, {}

    def _binding_args(self, args: Mapping[str, Any]) -> tuple[str, str, str, dict[str, Any], str]:
        return (
            str(args["source"]),
            str(args["destination"]),
            str(args.get("routing_key", "")),
            dict(args.get("arguments") or {}),
            str(args.get("destination_type", "queue")),
        )

    def _bind(self, args: Mapping[str, Any]) -> Reply:
        source, dest, key, arguments, kind = self._binding_args(args)
        self.vhost.bind(source, dest, key, arguments, destination_kind=kind)
        return 201, {}

    def _unbind(self, args: Mapping[str, Any]) -> Reply:
        source, dest, key, arguments, kind = self._binding_args(args)
        self.vhost.unbind(source, dest, key, arguments, destination_kind=kind)
        return 200, {}


_LEGACY_OTHER = frozenset({"export-definitions", "import-definitions", "declare-policy", "delete-policy"})


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _unheard(result: PublishResult | None) -> None:
    """A request refused after it waited, whose sender cannot be told (pre-settled)."""


def _held(answer: Callable[[], bool]) -> bool:
    """What the worker asked whether it holds a node answered (a refusal: it does not)."""
    try:
        return bool(answer())
    except ModelError:
        return False
