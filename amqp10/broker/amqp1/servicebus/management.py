"""``ENTITY/$management``: the Service Bus entity operations ``azure-servicebus`` sends.

Requests come on a sender link to ``ENTITY/$management`` with the operation in the
``operation`` application property and an amqp-value map body; the response (with
``statusCode`` and ``statusDescription``) goes to this connection's receiver link
from that node. Supported:

- ``com.microsoft:peek-message`` (``from-sequence-number``, ``message-count``): the
  queue's messages from that sequence number on, left where they are; 204 when none.
  A message's sequence number is its :attr:`~amqp10.broker.core.QueuedMessage.number`,
  which a scheduled message keeps when it becomes due (Service Bus keeps it for life).
- ``com.microsoft:renew-lock`` (``lock-tokens``): new ``expirations``; a lock that
  ran out (or was never taken) is a 410 with ``com.microsoft:message-lock-lost``.
- ``com.microsoft:schedule-message`` (``messages``: maps with ``message``, the encoded
  message carrying ``x-opt-scheduled-enqueue-time``): held by the core's scheduler;
  answers their ``sequence-numbers``.
- ``com.microsoft:cancel-scheduled-message`` (``sequence-numbers``).
- ``com.microsoft:receive-by-sequence-number`` (``sequence-numbers``): deferred
  messages, each with a ``lock-token``; ``com.microsoft:update-disposition``
  (``disposition-status`` completed, abandoned, suspended: dead-lettered with
  ``deadletter-reason``/``deadletter-description``, or defered; ``lock-tokens``)
  settles them (see :mod:`.deferred`).

- ``com.microsoft:get-session-state``, ``set-session-state``, ``renew-session-lock``
  (``session-id``; see :mod:`.sessions`). A session lock lasts the entity's lock
  duration; renew-session-lock extends it (a 410 with ``com.microsoft:session-lock-lost``
  once it ran out); when it runs out the session receiver's link is detached with
  ``com.microsoft:session-lock-lost`` and its unsettled messages go back.
- ``com.microsoft:add-rule``, ``remove-rule``, ``enumerate-rules`` on a
  subscription's ``$management`` (see :mod:`.rules`).

Any other operation is a 501. A failed operation's response carries the Service Bus
error condition in ``errorCondition`` (as the SDKs read it: ``com.microsoft:message-lock-lost``,
``com.microsoft:entity-already-exists``, ``amqp:not-found``, ...).
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import itertools
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ....message import Message
from ....types import (
    Accepted,
    Array,
    DecodeError,
    Error,
    ErrorCondition,
    Modified,
    Rejected,
    codec,
    symbol,
    timestamp,
)
from ...core import Node, NodeElsewhere, Queue, QueuedMessage, VirtualHost, nothing
from ...management import BadRequest, Caller, Management, ManagementError, NotFoundError
from ..management import ManagementNode
from ..message import Amqp1Message, parse_transfer
from .consumer import DEAD_LETTER, DEFERRED, annotated, holder, with_reason
from .deferred import deferred, undefer
from .entities import entity_node
from .rules import OPERATIONS as RULE_OPERATIONS
from .rules import OperationError, rule_operation
from .sessions import session_state, set_session_state

__all__ = ["ON_THE_OWNER", "AzureRequestNode", "EntityManagementNode", "entity_request"]

Reply = tuple[int, str, Any]
VENDOR = "com.microsoft:"
SESSION_LOCK_LOST = "com.microsoft:session-lock-lost"
# a failed operation's errorCondition, by its status (unless the operation names one)
_CONDITIONS = {
    400: "com.microsoft:argument-error",
    404: "amqp:not-found",
    409: "com.microsoft:entity-already-exists",
    410: "com.microsoft:message-lock-lost",
    501: "amqp:not-implemented",
    503: "com.microsoft:server-busy",
}


class AzureRequestNode(ManagementNode):
    """A request node as Azure's clients use it: requests without ``reply-to`` are answered
    on the receiver link from the node; :meth:`answer` gives the status and body."""

    def answer(self, props: Mapping[str, Any], body: Any) -> tuple[dict[str, Any], Any]:
        """The response's application properties and body for a request."""
        raise NotImplementedError

    def respond(self, target: Node, request: Message) -> None:
        """Answer ``request`` on ``target`` (at once, here)."""
        props, body = self.answer(request.application_properties or {}, request.body)
        self.send_reply(target, request, props, body)

    def request(self, msg: QueuedMessage) -> Error | None:
        request = self.decode_request(msg)
        if isinstance(request, Error):
            return request
        reply_to = request.reply_to if isinstance(request.reply_to, str) else None
        target = self._reply_target(reply_to) if reply_to else next(iter(self.reply_links.values()), None)
        if target is None:
            return Error(condition=ErrorCondition.NOT_FOUND, description=f"attach a receiver link from {self.name} first")
        self.respond(target, request)
        return None


class EntityManagementNode(AzureRequestNode):
    """``ENTITY/$management`` as one connection sees it."""

    kind = "entity-management"

    def __init__(
        self,
        vhost: VirtualHost,
        entity: str,
        lock_duration: Callable[[str], float],
        renew_session: Callable[[Queue, str], float | None] = lambda queue, sid: None,
    ) -> None:
        super().__init__(vhost)
        self.name = entity + "/$management"
        self.entity = entity
        self.lock_duration = lock_duration
        self.renew_session = renew_session
        self._ops: dict[str, Callable[[Queue, Mapping[str, Any]], Reply]] = {
            VENDOR + "peek-message": self._peek,
            VENDOR + "renew-lock": self._renew_lock,
            VENDOR + "schedule-message": self._schedule,
            VENDOR + "cancel-scheduled-message": self._cancel_scheduled,
            VENDOR + "receive-by-sequence-number": self._receive_deferred,
            VENDOR + "update-disposition": self._update_disposition,
            VENDOR + "get-session-state": self._get_session_state,
            VENDOR + "set-session-state": self._set_session_state,
            VENDOR + "renew-session-lock": self._renew_session_lock,
        }
        self.locks: dict[uuid.UUID, int] = {}
        """Lock tokens of the deferred messages read here, to their sequence numbers."""

    def respond(self, target: Node, request: Message) -> None:
        """At ``workers`` > 1, an operation of :data:`ON_THE_OWNER` on a queue (or a topic
        subscription) another worker owns is answered by that worker (:func:`entity_request`),
        the rest here: an ``update-disposition`` of a peek-lock a consumer here holds (its
        delivery is settled on its link; one that names deferred messages' locks too has
        those settled on the owner next), ``renew-lock``, ``renew-session-lock``. It is asked
        once the outcomes this worker gave the queue so far are applied there (a deferral
        is, before the ``receive-by-sequence-number`` that reads it back), with the lock
        tokens of the deferred messages read on this connection, which come back as its
        answer left them (:attr:`locks`)."""
        props = request.application_properties or {}
        op = props.get("operation")
        owner = None
        if self.management.whole is not None and op in ON_THE_OWNER:
            owner = self._elsewhere()
        body = request.body
        if owner is not None and op == VENDOR + "update-disposition":
            here, there = self._held_here(owner, body)
            if here and not there:
                owner = None
            elif here:  # peek-locks held here settled here first, the rest on the owner
                reply_props, _ = self.answer(props, {**body, "lock-tokens": here})
                if reply_props["statusCode"] != 200:
                    self.send_reply(target, request, reply_props, None)
                    return
                body = {**body, "lock-tokens": there}
        if owner is None:
            super().respond(target, request)
            return
        sent = dict(self.locks)
        asked = {"entity": self.entity, "request": _encoded([dict(props), body, sent])}

        async def on_the_owner() -> None:
            settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def applied(answer: Callable[[], None]) -> None:
                if not settled.done():
                    settled.set_result(None)

            owner.ask_settled(applied)
            try:
                await settled
                answer = await self.management.on_owner(
                    self.caller, entity_request, "queue", owner.name, vhost=self.vhost.name, args=asked
                )
                reply_props, body, after = codec.decode(base64.b64decode(answer["reply"]))
                self._locks_changed(sent, dict(after))
            except (ManagementError, DecodeError, KeyError, TypeError, ValueError) as exc:
                reply_props = {"statusCode": 503, "statusDescription": f"the queue's owner did not answer: {exc}"}
                reply_props["errorCondition"] = _CONDITIONS[503]
                body = None
            if self.is_open():
                self.send_reply(target, request, dict(reply_props), body)

        self._later(on_the_owner())

    def _held_here(self, queue: NodeElsewhere, body: Any) -> tuple[list[Any], list[Any]]:
        """The lock tokens an ``update-disposition`` names that a consumer on this worker
        holds (peek-locks), and the others (deferred messages', on the owner)."""
        tokens = list(body.get("lock-tokens", ())) if isinstance(body, Mapping) else []
        try:
            held = [holder(self.vhost.broker, queue, _uuid(t)) is not None for t in tokens]
        except (TypeError, ValueError):
            return [], tokens  # (the owner answers a bad request)
        return [t for t, h in zip(tokens, held) if h], [t for t, h in zip(tokens, held) if not h]

    def _locks_changed(self, sent: dict[uuid.UUID, int], after: dict[Any, Any]) -> None:
        """The owner answered with the deferred messages' locks ``after`` (it was sent ``sent``):
        those it took and gave are taken and given here (others may have come meanwhile)."""
        for token in sent.keys() - after.keys():
            self.locks.pop(token, None)
        for token, number in after.items():
            if token not in sent:
                self.locks[_uuid(token)] = int(number)

    def _elsewhere(self) -> NodeElsewhere | None:
        """The stand-in for the entity's queue if another worker owns it: a subscription's
        (``entity_node`` answers it), or a queue's (this worker's record of it is not it)."""
        node = entity_node(self.vhost, self.entity)
        if isinstance(node, NodeElsewhere):
            return node
        return self.vhost.elsewhere(self.entity) if isinstance(node, Queue) and node.name == self.entity else None

    def answer(self, props: Mapping[str, Any], body: Any) -> tuple[dict[str, Any], Any]:
        try:
            status, description, reply = self._execute(props.get("operation"), body)
        except OperationError as exc:
            status, description, reply = exc.status, exc.description, None
            return {"statusCode": status, "statusDescription": description, "errorCondition": exc.condition}, None
        out: dict[str, Any] = {"statusCode": status, "statusDescription": description}
        if status >= 400:
            out["errorCondition"] = _CONDITIONS.get(status, "amqp:internal-error")
        return out, reply

    def _execute(self, op: Any, body: Any) -> Reply:
        handler = self._ops.get(op) if isinstance(op, str) else None
        if handler is None and op not in RULE_OPERATIONS:
            return 501, f"operation {op!r} is not implemented on {self.name}", None
        queue = entity_node(self.vhost, self.entity)
        if not isinstance(queue, Queue):
            return 404, f"no queue {self.entity!r}", None
        if not isinstance(body, Mapping):
            return 400, "the request's body is a map", None
        try:
            if handler is None:
                return rule_operation(self.vhost, queue, str(op), body)
            return handler(queue, body)
        except (KeyError, TypeError, ValueError, DecodeError) as exc:
            return 400, f"bad request: {exc}", None

    def _peek(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        start = int(body.get("from-sequence-number", 0))
        count = max(0, min(int(body.get("message-count", 1)), self.vhost.broker.config.management.max_peek))
        # in sequence-number order, which is not quite the queue's: a scheduled message is
        # queued when due, behind messages numbered after it (its number < its seq). Every
        # message numbered from ``start`` has a seq from ``start``: the first ``count`` of
        # those by seq (paged-out ones read back), and every one held in memory (where a
        # renumbered message sits unless its queue is over budget), give the ``count`` least
        ahead = itertools.islice((m for m in queue.browse(start - 1) if m.number >= start), count)
        held = (m for m in queue if m.number >= start)
        candidates = {m.seq: m for m in itertools.chain(ahead, held)}
        found = heapq.nsmallest(count, candidates.values(), key=_number)
        if not found:
            return 204, "no messages", None
        return 200, "OK", {"messages": [{"message": annotated(m.form(Amqp1Message.format), m)} for m in found]}

    def _holder(self, queue: Queue, token: uuid.UUID) -> Any:
        """The consumer here that holds peek-lock ``token`` on the entity's queue (another
        worker's: on its stand-in), or None."""
        return holder(self.vhost.broker, self._elsewhere() or queue, token)

    def _renew_lock(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        out = []
        for token in (_uuid(t) for t in body["lock-tokens"]):
            c = self._holder(queue, token)
            until = c.renew(token) if c is not None else None
            if until is None and token in self.locks:  # a deferred message's
                until = self.vhost.now() + self.lock_duration(self.entity)
            if until is None:
                return 410, f"lock {token} is not held (message lock lost)", None
            out.append(timestamp(int(until * 1000)))
        return 200, "OK", {"expirations": Array(timestamp, out)}

    def _schedule(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        seqs: list[int] = []
        for entry in body["messages"]:
            msg = parse_transfer(bytes(entry["message"]), self.vhost.now(), queue.needs_message_ids)
            if not queue.publish(msg, nothing):
                return 503, f"queue {self.entity!r} is full", None
            seqs.append(msg.number)
        return 200, "OK", {"sequence-numbers": Array(int, seqs)}

    def _cancel_scheduled(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        missing = [int(s) for s in body["sequence-numbers"] if not queue.cancel_scheduled(int(s))]
        if missing:
            return 404, f"no scheduled messages {missing}", None
        return 200, "OK", {}

    def _receive_deferred(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        out = []
        for s in body["sequence-numbers"]:
            msg = deferred(queue, int(s))
            if msg is None:
                return 404, f"no deferred message {int(s)} in {self.entity!r}", None
            token = uuid.uuid4()
            self.locks[token] = msg.number
            out.append({"message": annotated(msg.form(Amqp1Message.format), msg, state=DEFERRED), "lock-token": token})
        return 200, "OK", {"messages": out}

    def _update_disposition(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        status = body["disposition-status"]
        if status not in ("completed", "abandoned", "suspended", "defered"):
            return 400, f"unknown disposition-status {status!r}", None
        for token in (_uuid(t) for t in body["lock-tokens"]):
            c = self._holder(queue, token)
            if c is not None:  # a delivery on a receiver link
                if not c.settle_by_token(token, _outcome(status, body)):
                    return 410, f"lock {token} is not held (message lock lost)", None
                continue
            seq = self.locks.get(token)
            msg = None if seq is None or status == "defered" else undefer(queue, seq)
            if seq is None or (msg is None and status != "defered"):
                return 410, f"lock {token} is not held (message lock lost)", None
            if msg is None:
                continue
            self.locks = {t: s for t, s in self.locks.items() if s != seq}
            if status == "completed":
                queue.ack(msg)
            elif status == "abandoned":
                queue.release(msg, delivery_failed=True)
            else:
                with_reason(
                    msg,
                    {
                        "DeadLetterReason": body.get("deadletter-reason"),
                        "DeadLetterErrorDescription": body.get("deadletter-description"),
                    },
                )
                queue.reject(msg)
        return 200, "OK", {}

    def _get_session_state(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        return 200, "OK", {"session-state": session_state(queue, str(body["session-id"]))}

    def _set_session_state(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        state = body.get("session-state")
        set_session_state(queue, str(body["session-id"]), None if state is None else bytes(state))
        return 200, "OK", {}

    def _renew_session_lock(self, queue: Queue, body: Mapping[str, Any]) -> Reply:
        sid = str(body["session-id"])
        until = self.renew_session(queue, sid)
        if until is None:
            raise OperationError(410, SESSION_LOCK_LOST, f"session {sid!r} is not locked by this connection (session lock lost)")
        return 200, "OK", {"expiration": timestamp(int(until * 1000))}


def _number(msg: QueuedMessage) -> int:
    return msg.number


def _uuid(token: Any) -> uuid.UUID:
    return token if isinstance(token, uuid.UUID) else uuid.UUID(str(token))


def _outcome(status: str, body: Mapping[str, Any]) -> Any:
    """The link outcome an update-disposition's ``disposition-status`` stands for."""
    if status == "completed":
        return Accepted()
    if status == "abandoned":
        return Modified(delivery_failed=True)
    if status == "defered":
        return Modified(delivery_failed=True, undeliverable_here=True)
    info = {"DeadLetterReason": body.get("deadletter-reason"), "DeadLetterErrorDescription": body.get("deadletter-description")}
    return Rejected(error=Error(condition=symbol(DEAD_LETTER), info=info))


ON_THE_OWNER = frozenset(
    VENDOR + op
    for op in (
        "peek-message",
        "schedule-message",
        "cancel-scheduled-message",
        "get-session-state",
        "set-session-state",
        "receive-by-sequence-number",
        "update-disposition",
    )
) | frozenset(RULE_OPERATIONS)
"""The entity operations that read or change only its queue (or the deferred messages it
holds, whose locks the asking connection keeps: :attr:`EntityManagementNode.locks`
travels with them), and a subscription's rules: at ``workers`` > 1 made by the worker that
owns the queue, wherever they were asked (but the settling of a peek-lock held on the
asking worker: :meth:`EntityManagementNode.respond`)."""


def _encoded(value: Any) -> str:
    return base64.b64encode(codec.encode(value)).decode()


def entity_request(
    m: Management, caller: Caller, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
) -> dict[str, str]:
    """A node operation (``workers.whole.NODE_OPS``): the request of :data:`ON_THE_OWNER`
    that ``args["request"]`` carries ([application properties, body], AMQP-encoded, base64)
    made on entity ``args["entity"]``'s queue here (``name``, its owner's), with the asking
    connection's locks of deferred messages (``[..., locks]``); its reply, encoded so, with
    those locks as it left them."""
    host = m.broker.vhost(vhost if vhost is not None else caller.vhost)
    if host is None:
        raise NotFoundError(f"no vhost {vhost!r}")
    props, body, locks = codec.decode(base64.b64decode(str(args["request"])))
    if props.get("operation") not in ON_THE_OWNER:
        raise BadRequest(f"operation {props.get('operation')!r} is not made on the owner")
    node = EntityManagementNode(host, str(args["entity"]), lambda entity: 0.0)  # (none takes a peek-lock)
    node.locks = {_uuid(token): int(number) for token, number in dict(locks).items()}
    return {"reply": _encoded([*node.answer(props, body), node.locks])}
