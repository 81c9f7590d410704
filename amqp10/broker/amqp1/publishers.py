"""Publishers of the AMQP 1.0 front end: broker receiver links and what arrives on them.

:class:`Publishers` answers a publisher's attach (its target names a node, or
nothing: the anonymous relay), takes each transfer to its node and settles it
with the outcome the node's answer maps to (:data:`OUTCOMES`), keeps each
publisher's credit within the node's room and the memory limit, and keeps a lost
publisher's unsettled deliveries for link recovery (§2.6.13).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ...transport import Delivery, DeliveryReceived, IllegalStateError, Link, Receiver, Session
from ...types import (
    Accepted,
    DecodeError,
    Error,
    ErrorCondition,
    Rejected,
    Released,
    Role,
    Source,
    Target,
    symbol,
)
from ...types.transactions import TransactionalState
from ..core import (
    Node,
    NodeElsewhere,
    PublishResult,
    Queue,
    Refused,
    SuspendedLink,
    Topic,
    nothing,
    unheard,
)
from ..core import store as _store
from ..core.recovery import Unsettled
from ..workers.remote import RemoteNode
from .addresses import AddressError, AnonymousTarget, parse
from .context import Amqp1Context, refuse
from .lookup import NodeLookup
from .management import ManagementNode
from .message import Amqp1Message, parse_transfer
from .termini import CONDITIONS, capabilities, echo, made_by_link
from .transactions import Transactions

__all__ = ["OUTCOMES", "Publishers"]

# one accepted outcome for every message the broker accepts: the engine batches
# consecutive dispositions with the same state, and identity is the cheapest test
_ACCEPTED: Final = Accepted()
_RELEASED = Released()
_TAKEN = PublishResult.TAKEN


def _full(node: Node) -> Rejected:
    """A queue that refused the message names itself and its limit (RabbitMQ 4 rejects what
    a ``reject-publish`` queue refuses); a node that routes names itself."""
    if isinstance(node, RemoteNode):  # the owning worker's queue refused it (its limits are there)
        description = f"queue {node.name!r} is full"
    elif isinstance(node, Queue):
        p = node.policy
        limits = [f"{arg} {v}" for arg, v in (("x-max-length", p.max_length), ("x-max-length-bytes", p.max_bytes)) if v is not None]
        why = f" ({', '.join(limits)}, overflow {p.overflow})" if limits else ""
        description = f"queue {node.name!r} is full{why}"
    else:
        description = f"node {node.name!r} is full: every queue it routed the message to refused it"
    return Rejected(error=Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description=description))


OUTCOMES: dict[PublishResult, Callable[[Node], Any]] = {
    # no queue took it: released, as RabbitMQ 4 answers an unroutable message
    PublishResult.UNROUTABLE: lambda node: _RELEASED,
    PublishResult.FULL: _full,
    # a request the node cannot answer: the node says why
    PublishResult.REFUSED: lambda node: Rejected(error=getattr(node, "refusal", None)),
}
"""The 1.0 outcome of a message a node did not take, by what the node said."""


class Publishers:
    """The publisher links of one connection (broker receivers), by ``id(link)``."""

    def __init__(self, ctx: Amqp1Context, nodes: NodeLookup, txns: Transactions, elsewhere: Callable[[Receiver, Delivery], None]) -> None:
        self.ctx = ctx
        self.nodes = nodes
        self.txns = txns
        self.elsewhere = elsewhere
        """Takes a delivery on a receiver link that is not a publisher's (a coordinator's)."""
        self.links: dict[int, tuple[Receiver, Node]] = {}
        """Each publisher's link and the node its target names."""
        self.by_name: set[int] = set()
        """Publishers whose target names only a queue that exists (the anonymous relay,
        ``/queues/NAME``): one another worker owns is reached by name there (nothing is made)."""
        self.blocked: set[int] = set()
        """Publishers held back (no credit) until their node has room or the alarm clears."""
        self.touched: set[int] = set()
        """Publishers that took deliveries in this batch of events: their credit is topped up after it."""

    # -- attach -------------------------------------------------------------------------------
    def attach(self, link: Receiver) -> None:
        ctx = self.ctx
        target = link.remote_target
        if target is None:
            target = Target()  # no target at all: the anonymous relay, as one with no address
        elif not isinstance(target, Target):
            refuse(link, ErrorCondition.INVALID_FIELD, "a publisher's attach needs a target")
            return
        try:
            node = self.nodes.target_node(target)
            if isinstance(node, ManagementNode):
                node = node.requests_of(link)  # /management: the link pair's own
        except AddressError as exc:
            refuse(link, CONDITIONS[exc.condition], exc.description)
            return
        link.max_message_size = ctx.broker.config.limits.max_message_size
        record = ctx.take_suspended(link, target.address, None if node.dynamic else node)
        if record is None and not node.dynamic:
            # another worker may keep it: resumed with the unsettled map it hands over
            def handed_over(unsettled: Unsettled | None) -> None:
                if ctx.can_answer(link):
                    self._answer(link, target, node, None, unsettled)
                    ctx.wake()

            if ctx.resume_elsewhere(link, target.address, handed_over):
                return
        if record is not None and any(_awaits_store(d) for d in record.deliveries):
            # A message that came before the loss is still being committed: its
            # outcome goes into our unsettled map (else the sender would send it
            # again), so the attach is answered once every earlier commit is done.
            def answer() -> None:
                if ctx.can_answer(link):
                    self._answer(link, target, node, record)
                    ctx.wake()
                else:
                    record.drop()

            ctx.broker.journal.submit((_store.BARRIER,), answer)
            return
        self._answer(link, target, node, record)

    def _answer(
        self, link: Receiver, target: Target, node: Node, record: SuspendedLink | None, unsettled: Unsettled | None = None
    ) -> None:
        """Attach ``link`` to ``node``, resuming it from ``record`` (kept here) or
        ``unsettled`` (another worker's record, handed over), if either."""
        link.attach(
            source=echo(link.remote_source, Source),
            target=Target(
                address=node.name if target.dynamic else target.address,
                durable=target.durable or 0,
                expiry_policy=target.expiry_policy or symbol("session-end"),
                timeout=target.timeout or 0,
                dynamic=target.dynamic,
                capabilities=capabilities(self.ctx.vhost.kind_of(node), None, None) or target.capabilities,
            ),
            resume_deliveries=record.deliveries if record is not None else None,
            unsettled=unsettled,
        )
        if record is not None or unsettled is not None:
            self.ctx.broker.recovery.resumed += 1
        self.links[id(link)] = (link, node)
        if type(node) is AnonymousTarget or (
            type(node) is RemoteNode and target.address is not None and parse(target.address) is not None
        ):
            self.by_name.add(id(link))
        link.context = node
        self.grant(link, node)

    # -- transfers ----------------------------------------------------------------------------
    def on_delivery(self, e: DeliveryReceived) -> None:
        """A transfer arrived: publish it, and settle it with what its node answered."""
        link = e.link
        d = e.delivery
        key = id(link)
        entry = self.links.get(key)
        if entry is None:
            self.elsewhere(link, d)
            return
        self.touched.add(key)  # its credit is topped up after this batch of events
        outcome = self._publish(link, d, entry[1])
        if outcome is not None and not d.remote_settled and not d.settled:
            d.settle(outcome)

    def _publish(self, link: Receiver, d: Delivery, node: Node) -> Any:
        """Publish ``d`` to ``node``: the outcome to settle it with now (None: none now;
        a stored message is accepted once it is safe)."""
        ctx = self.ctx
        # read as Any: an ExchangeTarget's ``deleted`` is its exchange's (a property), which
        # code compiled with Node's ``deleted`` slot in view would not call (setup.py)
        target: Any = node
        if target.deleted:
            ctx.fail_link(link, ErrorCondition.RESOURCE_DELETED, f"node {node.name!r} was deleted")
            return None
        formats = ctx.plugin.formats
        if formats and d.message_format in formats:
            formats[d.message_format](d, node)
            return None
        broker = ctx.broker
        try:
            msg = parse_transfer(d.payload, broker.now(), node.needs_message_ids, ctx.origin)
        except DecodeError as exc:
            if not (isinstance(node, ManagementNode) and node.any_section_order):
                return Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=str(exc)))
            msg = Amqp1Message(d.payload, arrival=broker.now())  # the node reads it its own way
        if type(node) is AnonymousTarget:
            try:
                node = node.node_for(msg)
            except AddressError as exc:
                return self._unroutable(link, d, exc)
            if type(node) is RemoteNode and d.remote_settled and d.remote_state is None:
                # pre-settled, to another worker's queue: by name there (the relay makes no node)
                node.publish_answered(msg, nothing, unheard)
                return None
        state = d.remote_state
        if state is not None and isinstance(state, TransactionalState):
            txn = self.txns.find(state, link)  # transactional posting (§4.4.1)
            if txn is not None:
                self.txns.post(txn, d, node, msg)
            return None
        stalled = broker.journal.stalled
        if stalled is not None:  # the disk is full: nothing new is taken that cannot be stored
            return Rejected(error=Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description=stalled))
        if d.remote_settled:  # pre-settled: nothing to answer once it is stored
            result = node.publish(msg, nothing)
        else:
            publishing = True

            def stored() -> None:
                if not d.settled and not d.settle_pending:
                    try:  # (inline, not settle_quietly: once per message)
                        d.settle(_ACCEPTED)
                    except IllegalStateError:
                        pass  # the link went meanwhile
                    if not publishing:  # a commit's callback: the writer is told (inside
                        ctx.wake()  # publish, the driver writes after the batch of events)

            if type(node) is RemoteNode:  # owned by another worker: its answer comes later
                if id(link) in self.by_name:
                    # the relay (AnonymousTarget) and /queues/NAME make no node: its owner routes
                    # by name, as the default exchange does, unroutable if it has no such queue
                    result = node.publish_answered(msg, stored, self._refused(d, node, by_name=True))
                else:  # (two calls, not one of a method chosen: a compiled call each)
                    result = node.publish_refusable(msg, stored, self._refused(d, node))
            elif node.answers_later:  # ($management, when another worker holds a reply-to)
                result = node.publish_answered(msg, stored, self._refused(d, node))
            else:
                result = node.publish(msg, stored)
            publishing = False
        return None if result is _TAKEN else OUTCOMES[result](node)

    def _refused(self, d: Delivery, node: Node, *, by_name: bool = False) -> Refused:
        """What settles ``d`` when ``node`` (one another worker owns, or one that waits for
        another worker) did not take it after all: the outcome its answer maps to
        (:data:`OUTCOMES`); released when that worker is unavailable.
        ``by_name`` (the relay's, a ``/queues/NAME`` target's): unroutable is its owner's "no
        such queue", rejected not-found as a name that names no node here is."""
        ctx = self.ctx

        def refused(result: PublishResult | None) -> None:
            if d.settled or d.settle_pending:
                return
            if by_name and result is PublishResult.UNROUTABLE:
                outcome: Any = Rejected(
                    error=Error(condition=ErrorCondition.NOT_FOUND, description=f"no node at address {node.name!r}")
                )
            else:
                outcome = _RELEASED if result is None else OUTCOMES[result](node)
            try:
                d.settle(outcome)
            except IllegalStateError:
                return  # the link went meanwhile
            ctx.wake()

        return refused

    def _unroutable(self, link: Receiver, d: Delivery, exc: AddressError) -> Any:
        """A message to the anonymous relay whose ``to`` names no node (or one it may not use):
        rejected, and the link stays up (the anonymous terminus spec, §2.2)."""
        rejected = Rejected(error=Error(condition=CONDITIONS[exc.condition], description=exc.description))
        state = d.remote_state
        if isinstance(state, TransactionalState) and not (d.remote_settled or d.settled):
            txn = self.txns.find(state, link)
            return None if txn is None else TransactionalState(txn_id=txn.txn_id, outcome=rejected)
        return rejected

    def on_aborted(self, link: Link) -> bool:
        """A transfer was aborted; False: not on a publisher's link."""
        if id(link) not in self.links:
            return False
        self.touched.add(id(link))
        return True

    # -- credit -------------------------------------------------------------------------------
    def top_up(self) -> None:
        """Credit is topped up once per batch of events: the engine has already counted
        every transfer in the batch against the link's credit."""
        touched, self.touched = self.touched, set()
        for key in touched:
            entry = self.links.get(key)
            if entry is not None:
                self.grant(*entry)

    def grant(self, link: Receiver, node: Node) -> None:
        """Top up a publisher's credit, bounded by the node's room and the memory limit."""
        if not link.is_attached:
            return
        broker = self.ctx.broker
        window = broker.config.limits.credit_window
        room = node.room()
        target = window if room is None else min(window, room)
        if not broker.memory_ok():
            target = 0
        if target <= 0:
            if link.credit > 0:
                link.flow(0)  # take back what was granted: the node is full
            self._watch_space(link, node)
            return
        if room is not None:
            self._watch_space(link, node)
        if link.credit > target or link.credit <= target // 2:
            link.flow(target)

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm: take every publisher's credit back (raised), or
        give it again to those held back (cleared)."""
        if raised:
            for link, node in list(self.links.values()):
                self.grant(link, node)
            self.ctx.wake()
        else:
            self._unblock_all()

    def _watch_space(self, link: Receiver, node: Node) -> None:
        self.blocked.add(id(link))
        for q in _queues(node):
            q.space_listeners.add(self._unblock_all)

    def _unblock_all(self) -> None:
        for key in list(self.blocked):
            entry = self.links.get(key)
            if entry is None:
                self.blocked.discard(key)
                continue
            self.grant(*entry)
        self.ctx.wake()

    # -- the end of a link --------------------------------------------------------------------
    def drop(self, key: int, *, suspend: bool) -> None:
        """Forget a publisher however its link ended (detach, session end, connection loss,
        broker shutdown): a node made for its dynamic target goes with it, unless the
        target asked to outlive the link."""
        self.blocked.discard(key)
        self.by_name.discard(key)
        entry = self.links.pop(key, None)
        if entry is None:
            return
        link, node = entry
        if suspend:
            self._suspend(link, node)
        for q in _queues(node):
            q.space_listeners.discard(self._unblock_all)
        if node.dynamic and made_by_link(link.remote_target):
            self.ctx.delete_dynamic(node)

    def session_ended(self, session: Session) -> None:
        for key in [k for k, (link, _) in self.links.items() if link.session is session]:
            self.drop(key, suspend=False)

    def drop_all(self, *, suspend: bool) -> None:
        for key in list(self.links):
            self.drop(key, suspend=suspend)

    def _suspend(self, link: Receiver, node: Node) -> None:
        """Keep what a lost producer had not settled, with our state, for its resumption."""
        recovery = self.ctx.broker.recovery
        if not recovery.enabled or node.dynamic or not link.unsettled:
            return
        target = link.remote_target
        lifetime = recovery.retention(target)
        if lifetime <= 0:
            return
        deliveries = [d for d in link.unsettled.values() if not d.settled]
        if deliveries:
            recovery.suspend(
                SuspendedLink(
                    (self.ctx.remote_container_id, link.name, Role.RECEIVER),
                    address=getattr(target, "address", None),
                    deliveries=deliveries,
                    node=node,
                ),
                lifetime,
            )


def _queues(node: Node) -> list[Queue | NodeElsewhere]:
    """The queues whose room a publisher to ``node`` waits for (held here, or elsewhere)."""
    queues = list(node.subscriptions.values()) if isinstance(node, Topic) else [node]
    return [q for q in queues if isinstance(q, Queue | NodeElsewhere)]


def _awaits_store(d: Delivery) -> bool:
    """A producer's complete delivery with no outcome yet: its message waits for a commit."""
    return d.state is None and bool(d.payload) and not d.remote_settled
