"""A 0-10 session's state in the broker: its subscriptions (the core's consumers), the
messages it was sent and has not yet accepted or released, and its transaction."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ...amqp010 import Compound
from ...amqp010.connection import Session
from ...amqp010.spec import ENUMS, OPS, STRUCTS
from ..core import Node, NodeElsewhere, Queue, QueuedMessage, Stream
from ..core.consumer_timeout import UnsettledClock
from .context import Amqp010Context
from .message import FORMAT, split, unpack

if TYPE_CHECKING:
    from ..core.exchanges import Exchange
    from .dtx import Branch

__all__ = ["ACCEPT", "ACQUIRE", "UNLIMITED", "Amqp010Session", "Pending", "Subscription", "TxWork"]

ACCEPT: Final = ENUMS["message.accept-mode"]
ACQUIRE: Final = ENUMS["message.acquire-mode"]
FLOW: Final = ENUMS["message.flow-mode"]
UNLIMITED: Final = 0xFFFFFFFF
"""Credit of this value is infinite (0-10 §10.5 ``message.flow``)."""
_TRANSFER = OPS["message.transfer"]
_DELIVERY = STRUCTS["delivery-properties"]
_PREFIX = 4
BROWSED_KEPT: Final = 65536
"""Browsed transfers a session remembers for ``message.acquire`` (the oldest forgotten first)."""
"""The octets of a 0-10 message's ``data`` before its header structs (their length)."""


@dataclass(slots=True)
class TxWork:
    """Work a transactional session (``tx.select``) holds until ``tx.commit``: ``apply`` does
    it; and what it does, for a commit that reaches other workers' queues (``workers`` > 1):
    the message it publishes through ``exchange`` with ``key``, or the transfers it accepts."""

    apply: Callable[[], None]
    exchange: Exchange | None = None
    msg: QueuedMessage | None = None
    key: str = ""
    accepted: tuple[int, ...] = ()
    reached: list[Queue | Stream | NodeElsewhere] | None = None
    """The queues its message reaches, once ``tx.commit`` routed it (several workers:
    :class:`~amqp10.broker.core.RoutedOnce`): ``apply`` publishes it to them."""


@dataclass(slots=True)
class Pending:
    """A transfer the client holds (acquired, not yet accepted, released or rejected)."""

    node: Node
    """Its queue (a queue another worker owns: its stand-in, which settles it there)."""
    msg: QueuedMessage
    sub: Subscription | None


class Subscription:
    """A ``message.subscribe``: the core's consumer; its credit is the message and byte
    credit ``message.flow`` gave it (in window mode, given back as transfers complete)."""

    def __init__(
        self,
        session: Amqp010Session,
        destination: str,
        node: Node,
        *,
        accept_mode: int,
        acquire_mode: int,
        exclusive: bool,
    ) -> None:
        self.id = session.ctx.broker.next_consumer_id()
        self.session = session
        self.destination = destination
        self.node = node
        self.accept_mode = accept_mode
        self.acquire_mode = acquire_mode
        self.browse = acquire_mode == ACQUIRE["not-acquired"]
        self.exclusive = exclusive
        self.priority = 0
        self.timeout: float | None = None
        """Its ``x-consumer-timeout`` (seconds), over its queue's (core/consumer_timeout.py)."""
        self.window = True
        """Window mode (what a subscription starts in, as Qpid's broker has it): a transfer's
        completion gives its credit back; credit mode (``set-flow-mode``): it does not."""
        self.messages = 0
        self.bytes = 0
        self.active = True
        self.in_window: set[int] = set()
        """Window mode: transfers whose completion gives their credit back."""
        self.short = False
        """The next message is larger than the byte credit left: none is sent until more."""
        self.selector: Callable[[QueuedMessage], bool] | None = None
        """None: it takes any message (the core's ``getattr`` default would raise and catch
        an AttributeError for each one)."""

    def credit(self) -> int:
        s = self.session
        if not self.active or s.closed or not s.attached or self.bytes <= 0 or self.short:
            return 0
        n = self.messages if self.messages != UNLIMITED else 1 << 30
        if self.bytes != UNLIMITED:  # the core takes a count: the bytes, in the queue's mean size
            node = self.node
            count: int = getattr(node, "count", 0)  # (a queue another worker owns holds none here)
            mean = max(node.bytes // count - _PREFIX, 1) if count else 1
            n = min(n, max(self.bytes // mean, 1))
        return n

    bytes_as: Final = (FORMAT, _PREFIX)
    """How it counts a message's bytes (its 0-10 form, less the length before its header
    structs): what the owner of a queue another worker holds counts its byte credit by."""

    def byte_credit(self) -> int | None:
        """Its byte credit left (None: unlimited), granted to the owner of a queue another
        worker holds (workers/bytecredit.py)."""
        return None if self.bytes == UNLIMITED else self.bytes

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        if self.bytes != UNLIMITED and not self.browse and not isinstance(node, Stream):
            if len(msg.form(FORMAT)) - _PREFIX > self.bytes:  # byte credit is exact: not this one
                self.short = True
                node.release(msg)
                return
        self.session.transfer(self, node, msg)

    @property
    def origin(self) -> object:
        """Its connection (as its session's messages are marked: no-local queues)."""
        return self.session.ctx.origin

    def cancelled(self) -> None:
        """Its queue is gone: it takes nothing more, and what the session held of it goes
        (a deleted queue's alternate exchange takes it now, as Qpid's broker has it:
        QPID-3481). It stays the session's until ``message.cancel``, as in Qpid's broker."""
        self.active = False
        if self.node.deleted:
            self.session.release_held(self.node)

    def stop(self) -> None:
        """No credit, and none back from transfers completed later (``message.stop``)."""
        self.messages = 0
        self.bytes = 0
        self.short = False
        self.in_window.clear()

    def add_credit(self, unit: int, value: int) -> None:
        if unit == 0:
            self.messages = (
                UNLIMITED
                if value == UNLIMITED or self.messages == UNLIMITED
                else min(self.messages + value, UNLIMITED - 1)
            )
        else:
            self.bytes = (
                UNLIMITED
                if value == UNLIMITED or self.bytes == UNLIMITED
                else min(self.bytes + value, UNLIMITED - 1)
            )
            self.short = False

    def spend(self, cid: int, size: int) -> None:
        if self.messages != UNLIMITED:
            self.messages -= 1
        if self.bytes != UNLIMITED:
            self.bytes = max(self.bytes - size, 0)
        if self.window:
            self.in_window.add(cid)

    def completed(self, cid: int, size: int) -> None:
        """Window mode: a transfer completed, its credit comes back."""
        self.in_window.discard(cid)
        if self.messages != UNLIMITED:
            self.messages += 1
        if self.bytes != UNLIMITED:
            self.bytes += size
            self.short = False


@dataclass(eq=False)
class Amqp010Session:
    """One attached session (it is also the owner of the exclusive queues it declares)."""

    ctx: Amqp010Context
    channel: int
    name: bytes
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    unacked: dict[int, Pending] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    """Window mode: the size of each transfer whose completion gives credit back."""
    tx: list[TxWork] | None = None
    """In a transaction (``tx.select``): the work ``tx.commit`` does, in order."""
    closed: bool = False
    browsed: OrderedDict[int, tuple[Queue | NodeElsewhere, int]] = field(default_factory=OrderedDict)
    """Transfers sent to not-acquired subscriptions: their queue and seq, for ``message.acquire``
    (a queue another worker owns: its stand-in, and the seq the owner's copy carries)."""
    state: Session | None = None
    """The engine's side of the session (command ids, completion, replay), which moves
    with it to the connection that resumes it."""
    attached: bool = True
    """False while kept detached (:mod:`.kept`): nothing is sent to it."""
    dtx_selected: bool = False
    branch: Branch | None = None
    """The dtx branch the session works in (``dtx.start``), if any (:mod:`.dtx`)."""
    suspended: list[Branch] = field(default_factory=list)
    """Branches this session suspended (``dtx.end`` with ``suspend``)."""
    unsettled_clock: UnsettledClock = field(default_factory=UnsettledClock)
    """When its unaccepted transfers were first seen unaccepted (consumer timeouts)."""

    @property
    def origin(self) -> object:
        """The connection it is attached to (as its messages are marked: no-local queues)."""
        return self.ctx.origin

    def take(self, ids: list[int]) -> list[Pending]:
        """The transfers ``ids`` sent and not yet settled, no longer the session's."""
        return [p for p in (self.unacked.pop(cid, None) for cid in ids) if p is not None]

    def complete(self, c: Compound, result: Compound | None = None) -> None:
        """Command ``c`` is done (now or later, as a stored transfer), with ``result`` if it
        has one: told to the peer on the connection the session is attached to, or recorded
        for when it resumes (the result is not: a resumed session does not see it)."""
        if self.attached:
            self.ctx.conn.complete(self.channel, c, result)
            self.ctx.wake()
        elif self.state is not None and not self.closed:
            self.state.record_completed(c.id, c.sync)

    def resumed(self, ctx: Amqp010Context, channel: int) -> None:
        """Attached again, by the connection of ``ctx`` on ``channel``."""
        self.ctx = ctx
        self.channel = channel
        self.attached = True

    def restart(self) -> None:
        """After a resume: the subscriptions take messages again, as their credit allows."""
        for sub in list(self.subscriptions.values()):
            sub.node.consumer_ready(sub)

    def transfer(self, sub: Subscription, node: Node, msg: QueuedMessage) -> None:
        """Send ``msg`` to ``sub``'s destination as a ``message.transfer`` (its header structs
        as they came, unless a redelivery sets ``redelivered``)."""
        command = Compound(
            _TRANSFER,
            destination=sub.destination,
            accept_mode=sub.accept_mode,
            acquire_mode=sub.acquire_mode,
        )
        if msg.delivery_count > 0:
            headers, body = unpack(msg.form(FORMAT))
            dp = next((h for h in headers if h.spec is _DELIVERY), None)
            if dp is None:
                dp = Compound(_DELIVERY)
                headers.insert(0, dp)
            dp.values["redelivered"] = True
            command.headers = headers
        else:
            command.raw_headers, body = split(msg.form(FORMAT))
        command.body = body
        cid = self.ctx.send(self.channel, command)
        cost = (
            len(msg.form(FORMAT)) - _PREFIX
        )  # the header structs and the body, as Qpid counts bytes
        sub.spend(cid, cost)
        if sub.window:
            self.sizes[cid] = cost
        if sub.browse:
            queue: Queue | NodeElsewhere | None = None
            if isinstance(node, Queue):
                queue, seq = node, node.browsers.get(sub.id)
            elif isinstance(node, NodeElsewhere):
                queue, seq = node, msg.seq  # (the owner's copy carries its seq there)
            if queue is not None and seq is not None:
                # (the core sends a browser a copy: its seq is the browser's mark)
                browsed = self.browsed
                browsed[cid] = (queue, seq)
                if len(browsed) > BROWSED_KEPT:
                    browsed.popitem(last=False)
            return
        if sub.accept_mode == ACCEPT["none"]:
            node.ack(msg)
        else:
            self.unacked[cid] = Pending(node, msg, sub)

    def acquire(self, ids: list[int]) -> tuple[list[int], dict[NodeElsewhere, dict[int, int]]]:
        """Acquire the browsed transfers ``ids`` still on their queues (``message.acquire``):
        each is then the session's, as if sent acquired; return those acquired, and those of
        queues another worker owns, to ask of it: queue -> seq -> transfer
        (:meth:`hold_acquired` once it took them)."""
        got: list[int] = []
        elsewhere: dict[NodeElsewhere, dict[int, int]] = {}
        for cid in ids:
            seen = self.browsed.pop(cid, None)
            if seen is None:
                continue
            queue, seq = seen
            if isinstance(queue, NodeElsewhere):
                elsewhere.setdefault(queue, {})[seq] = cid
                continue
            msg = queue.acquire(seq)
            if msg is None:
                continue
            got.append(cid)
            self.hold_acquired(cid, queue, msg)
        return got, elsewhere

    def hold_acquired(self, cid: int, node: Node, msg: QueuedMessage) -> None:
        """Transfer ``cid`` (a browsed copy) is acquired as ``msg``: the session's, as if sent
        acquired (done with at once if its subscription accepts nothing)."""
        sub = next((s for s in self.subscriptions.values() if s.node is node), None)
        if sub is not None and sub.accept_mode == ACCEPT["none"]:
            node.ack(msg)
        else:
            self.unacked[cid] = Pending(node, msg, sub)

    def settle(self, ids: list[int], outcome: str, *, redelivered: bool = True) -> None:
        """``accept``, ``release`` or ``reject`` the transfers ``ids``."""
        nodes: dict[int, Node] = {}
        for cid in ids:
            p = self.unacked.pop(cid, None)
            if p is None:
                continue
            if outcome == "accept":
                p.node.ack(p.msg)
            elif outcome == "release":
                p.node.release(p.msg, delivery_failed=redelivered)
            else:
                p.node.reject(p.msg)
            nodes[id(p.node)] = p.node
        for node in nodes.values():
            node.dispatch()

    def release_held(self, node: Node) -> None:
        """Release what the session holds of ``node`` (and hold it no more)."""
        self.settle([cid for cid, p in self.unacked.items() if p.node is node], "release")

    def transfers_completed(self, ranges: tuple[tuple[int, int], ...]) -> None:
        """The client completed these transfers: window-mode credit comes back."""
        if not self.sizes:
            return
        ready: dict[int, Subscription] = {}
        for lo, hi in ranges:
            for cid in [c for c in self.sizes if lo <= c <= hi]:
                size = self.sizes.pop(cid)
                for sub in self.subscriptions.values():
                    if cid in sub.in_window:
                        sub.completed(cid, size)
                        ready[sub.id] = sub
        for sub in ready.values():
            sub.node.consumer_ready(sub)

    def close(self) -> None:
        """The session ended: its subscriptions stop, what it held goes back, its exclusive
        queues go."""
        if self.closed:
            return
        self.closed = True
        subs = list(self.subscriptions.values())
        for sub in subs:
            sub.active = False
        # released while it is still a consumer: an auto-delete queue it leaves empty then
        # finds them back on it, in order (and its alternate exchange takes them in order)
        self.settle(list(self.unacked), "release")
        for sub in subs:
            sub.node.remove_consumer(sub)
        self.subscriptions.clear()
        self.tx = None
        for b in [self.branch, *self.suspended]:
            if b is not None:
                b.session_ended(self)
        self.branch = None
        self.suspended.clear()
        self.ctx.vhost.owner_gone(self)
