"""The 0-10 front end's ``message.*`` and ``tx.*`` commands (``dtx.*``: :mod:`.dtx`).

``message.transfer`` routes a message through the virtual host (its ``destination`` is
the exchange; the default exchange routes by queue name) and completes once every queue
that took it has it safe. ``message.subscribe`` makes a :class:`.session.Subscription`,
a core consumer whose credit ``message.flow`` gives (``set-flow-mode``: credit, or a
window that transfers' completion refills); ``accept``, ``release`` and ``reject`` settle
what it was sent. In a transaction (``tx.select``) transfers are routed and accepts
applied at ``tx.commit``; ``tx.rollback`` drops them (the messages stay acquired, as
0-10 says, until the client releases them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ...amqp010 import Compound, Connection, result_struct
from ...amqp010.ranges import RangeSet
from ..core import (
    Answered,
    ConsumeResult,
    ModelError,
    Node,
    NodeElsewhere,
    NotFound,
    PublishResult,
    Queue,
    QueuedMessage,
    Refused,
    Stream,
    answer_now,
    commit_reaching,
    nothing,
    route_once,
    settled_everywhere,
)
from ..core.exchanges import Exchange
from .context import Amqp010Context, CommandError
from .message import from_transfer
from .session import ACCEPT, ACQUIRE, FLOW, Amqp010Session, Subscription, TxWork

__all__ = ["CONSUME_REFUSALS", "MessageCommands", "TxCommands"]

CONSUME_REFUSALS: Final[dict[ConsumeResult, tuple[str, str]]] = {
    ConsumeResult.EXCLUSIVE_HELD: ("resource-locked", "queue '{queue}' in vhost '{vhost}' has an exclusive subscriber"),
    ConsumeResult.IN_USE: ("resource-locked", "queue '{queue}' in vhost '{vhost}' has an exclusive subscriber"),
    ConsumeResult.LOCKED: ("resource-locked", "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'"),
}
"""How ``message.subscribe`` answers each of the core's refusals: ``execution.exception``
with this error code and text."""


def _full(x: Exchange, key: str) -> str:
    return f"the queues exchange '{x.name}' routed '{key}' to are full"


def _check_admitted(result: ConsumeResult, queue: str, vhost: str) -> None:
    """Raise what ``message.subscribe`` answers if the queue did not admit the subscriber."""
    if not result:
        error, text = CONSUME_REFUSALS[result]
        raise CommandError(error, text.format(queue=queue, vhost=vhost))


def _ids(transfers: tuple[tuple[int, int], ...] | None) -> list[int]:
    out: list[int] = []
    for lo, hi in transfers or ():
        if hi - lo > 1 << 20:
            raise CommandError("invalid-argument", f"a range of {hi - lo + 1} transfers")
        out.extend(range(lo, hi + 1))
    return out


class MessageCommands:
    """``message.transfer``, ``subscribe``, ``cancel``, ``accept``, ``reject``, ``release``,
    ``acquire``, ``resume``, ``set-flow-mode``, ``flow``, ``flush``, ``stop``."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx

    @property
    def conn(self) -> Connection:
        return self.ctx.conn

    # -- publishing -------------------------------------------------------------------------
    def transfer(self, s: Amqp010Session, c: Compound) -> None:
        """Route the message; the command completes when it is stored (here, or later)."""
        ctx = self.ctx
        vh = ctx.vhost
        name = c.get("destination", "")
        x = vh.exchange(name)
        if x is None:
            raise NotFound(f"no exchange '{name}' in vhost '{vh.name}'")
        ctx.authorize(x.name, "write", "exchange")
        msg = from_transfer(c, name, ctx.broker.now())
        msg.mark_origin(ctx.origin)
        dp = c.header("delivery-properties")
        key = "" if dp is None else dp.get("routing_key", "")
        if s.branch is not None:  # routed at the branch's commit (kept in the store once prepared)
            s.branch.held.publish(ctx.vhost, x.name, key, msg)
            self.conn.complete(s.channel, c)
            return
        if s.tx is not None:
            work = TxWork(nothing, x, msg, key)
            work.apply = lambda: self._route(s, x, msg, key, None, work.reached)
            s.tx.append(work)
            self.conn.complete(s.channel, c)
            return
        self._route(s, x, msg, key, c)

    def _route(
        self,
        s: Amqp010Session,
        x: Exchange,
        msg: QueuedMessage,
        key: str,
        c: Compound | None,
        reached: list[Queue | Stream | NodeElsewhere] | None = None,
    ) -> None:
        """Route a transfer's ``msg`` (``c`` None: a transaction's, at its commit; ``reached``:
        the queues it reaches, found already: :meth:`VirtualHost.route`'s)."""
        ctx = self.ctx

        def stored() -> None:
            if c is not None:
                ctx.complete_transfer(s, c)  # (on the connection the session is on by then)

        refused = None
        if c is not None and ctx.broker.placement is not None:  # (a queue another worker owns)
            refused = self._refused(s, x, key, c)
        result = ctx.vhost.route(x, msg, key, stored, refused, reached)
        if result is PublishResult.FULL and c is not None:  # qpid.policy_type reject: as Qpid's broker
            raise CommandError("resource-limit-exceeded", _full(x, key))
        if result is not PublishResult.TAKEN and c is not None:  # unroutable or refused: dropped
            ctx.complete_transfer(s, c)

    def _refused(self, s: Amqp010Session, x: Exchange, key: str, c: Compound) -> Refused:
        """What a transfer's queues another worker owns answer if they did not take it after
        all: full fails it as a full queue here does; the owner unavailable fails it too
        (the client is told, as a 0-9-1 publisher is nacked); no such queue there: dropped
        and completed, as unroutable here."""
        ctx = self.ctx

        def refused(result: PublishResult | None) -> None:
            if result is PublishResult.FULL:
                ctx.fail(s, c, "resource-limit-exceeded", _full(x, key))
            elif result is None:
                ctx.fail(
                    s, c, "internal-error", f"a worker that owns a queue exchange '{x.name}' routed '{key}' to is unavailable"
                )
            else:
                ctx.complete_transfer(s, c)

        return refused

    # -- subscribing ------------------------------------------------------------------------
    def subscribe(self, s: Amqp010Session, c: Compound) -> None:
        """A subscription to a queue of this worker's, or (its stand-in) of another's: then
        its owner admits it (an exclusive subscriber anywhere holds the queue) and the
        command completes once it did."""
        ctx = self.ctx
        name = c.get("queue", "")
        elsewhere = ctx.elsewhere(name)
        q: Node = ctx.queue(name, s) if elsewhere is None else elsewhere
        ctx.authorize(q.name, "read", "queue")
        destination = c.get("destination", "")
        if destination in s.subscriptions:
            raise CommandError("not-allowed", f"destination '{destination}' is subscribed already")
        exclusive = bool(c["exclusive"])
        if elsewhere is None:
            _check_admitted(q.admits(exclusive=exclusive), q.name, ctx.vhost.name)
        sub = Subscription(
            s,
            destination,
            q,
            accept_mode=c.get("accept_mode", ACCEPT["explicit"]),
            acquire_mode=c.get("acquire_mode", ACQUIRE["pre-acquired"]),
            exclusive=exclusive,
        )
        arguments = c.get("arguments") or {}
        priority = arguments.get("x-priority", 0)
        if isinstance(priority, int) and not isinstance(priority, bool):
            sub.priority = priority
        timeout = arguments.get("x-consumer-timeout")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
                raise CommandError(
                    "invalid-argument", f"x-consumer-timeout must be a positive integer (ms), not {timeout!r}"
                )
            sub.timeout = timeout / 1000
        if elsewhere is not None:
            self._subscribe_elsewhere(s, sub, elsewhere)
            return
        s.subscriptions[destination] = sub
        q.add_consumer(sub)

    def _subscribe_elsewhere(self, s: Amqp010Session, sub: Subscription, q: NodeElsewhere) -> None:
        """The subscription is the session's once the owner admitted it."""
        vhost = self.ctx.vhost.name

        def admitted(answer: Callable[[], ConsumeResult]) -> None:
            result = answer()
            if result and (s.closed or sub.destination in s.subscriptions):  # (the session went)
                sub.active = False
                q.remove_consumer(sub)
                return
            _check_admitted(result, q.name, vhost)
            s.subscriptions[sub.destination] = sub

        self.ctx.later(
            lambda answered: q.ask_consume(sub, exclusive=sub.exclusive, answered=answered),
            admitted,
        )

    def _sub(self, s: Amqp010Session, c: Compound) -> Subscription:
        destination = c.get("destination", "")
        sub = s.subscriptions.get(destination)
        if sub is None:
            raise CommandError("not-found", f"no subscription to destination '{destination}'")
        return sub

    def cancel(self, s: Amqp010Session, c: Compound) -> None:
        sub = self._sub(s, c)
        del s.subscriptions[sub.destination]
        sub.active = False
        node = sub.node
        if isinstance(node, NodeElsewhere):  # complete once its owner dropped it too
            self.ctx.later(lambda answered: node.ask_cancel(sub, answered), answer_now)
            return
        node.remove_consumer(sub)

    def set_flow_mode(self, s: Amqp010Session, c: Compound) -> None:
        sub = self._sub(s, c)
        sub.stop()
        sub.window = c.get("flow_mode", FLOW["credit"]) == FLOW["window"]
        sub.node.consumer_ready(sub)  # (no credit: taken back from an owner elsewhere, as by message.stop)

    def flow(self, s: Amqp010Session, c: Compound) -> None:
        sub = self._sub(s, c)
        sub.add_credit(c.get("unit", 0), c.get("value", 0))
        sub.node.consumer_ready(sub)

    def flush(self, s: Amqp010Session, c: Compound) -> None:
        """Send what the credit allows now, then stop: complete once it is sent (at once
        here; a queue another worker owns: once its owner has sent it, ``Node.drain``)."""
        sub = self._sub(s, c)
        self.ctx.later(lambda answered: sub.node.drain(sub, lambda _more: answered(nothing)), lambda _: sub.stop())

    def stop(self, s: Amqp010Session, c: Compound) -> None:
        """No credit: told to the node (a queue another worker owns takes back from its
        owner what it was granted, so what comes next stays there for other subscribers)."""
        sub = self._sub(s, c)
        sub.stop()
        sub.node.consumer_ready(sub)

    # -- outcomes ---------------------------------------------------------------------------
    def accept(self, s: Amqp010Session, c: Compound) -> None:
        ids = _ids(c.get("transfers"))
        if s.branch is not None:  # the branch holds them, past the session's end
            for p in s.take(ids):
                s.branch.held.take(p.node, p.msg)
        elif s.tx is not None:
            s.tx.append(TxWork(lambda: s.settle(ids, "accept"), accepted=tuple(ids)))
        else:
            self._settle_everywhere(s, ids, "accept")

    def release(self, s: Amqp010Session, c: Compound) -> None:
        s.settle(_ids(c.get("transfers")), "release", redelivered=bool(c["set_redelivered"]))

    def reject(self, s: Amqp010Session, c: Compound) -> None:
        """Dead-letter or drop the transfers (completed as :meth:`_settle_everywhere` says)."""
        self._settle_everywhere(s, _ids(c.get("transfers")), "reject")

    def _settle_everywhere(self, s: Amqp010Session, ids: list[int], outcome: str) -> None:
        """Accept or reject the transfers ``ids``; those of a queue another worker holds
        complete once their owner applied the outcome (``settled_everywhere``: a message
        group freed, the dead letters in their queues), as on one broker before it reads
        the client's next command."""
        held = (s.unacked.get(i) for i in ids)
        elsewhere = {id(p.node): p.node for p in held if p is not None and isinstance(p.node, NodeElsewhere)}
        s.settle(ids, outcome)
        if elsewhere:
            self.ctx.later(lambda answered: settled_everywhere(list(elsewhere.values()), answered), answer_now)

    def resume(self, s: Amqp010Session, c: Compound) -> Compound:
        """``message.resume``: the broker keeps no partly sent message (0-10 lets a
        recipient discard them), so the transfer resumes from offset 0, the whole message."""
        return result_struct("message-resume-result", offset=0)

    def acquire(self, s: Amqp010Session, c: Compound) -> Compound | None:
        """Acquire browsed messages (sent to a not-acquired subscription) still on their queue;
        those of queues another worker owns are asked of it, and the command completes with
        its answer (:meth:`NodeElsewhere.ask_acquire`)."""
        got, elsewhere = s.acquire(_ids(c.get("transfers")))
        if not elsewhere:
            return _acquired(got)

        def then(answer: Callable[[], list[tuple[NodeElsewhere, dict[int, QueuedMessage]]]]) -> Compound:
            for node, taken in answer():
                wanted = elsewhere[node]
                for seq, msg in taken.items():
                    if s.closed:  # (the session went meanwhile: back it goes)
                        node.release(msg)
                        continue
                    s.hold_acquired(wanted[seq], node, msg)
                    got.append(wanted[seq])
            return _acquired(sorted(got))

        self.ctx.later(lambda answered: _acquire_everywhere(elsewhere, answered), then)
        return None


def _acquired(got: list[int]) -> Compound:
    """``message.acquire``'s result: the transfers acquired."""
    return result_struct("acquired", transfers=RangeSet((cid, cid) for cid in got).sequence_set())


def _acquire_everywhere(
    elsewhere: dict[NodeElsewhere, dict[int, int]],
    answered: Answered[list[tuple[NodeElsewhere, dict[int, QueuedMessage]]]],
) -> None:
    """Ask each queue of ``elsewhere`` to acquire its seqs; ``answered`` with what each took
    once all answered (one that refused, its queue gone, took none)."""
    taken: list[tuple[NodeElsewhere, dict[int, QueuedMessage]]] = []
    left = len(elsewhere)

    def asker(node: NodeElsewhere) -> Answered[dict[int, QueuedMessage]]:
        def one(answer: Callable[[], dict[int, QueuedMessage]]) -> None:
            nonlocal left
            try:
                taken.append((node, answer()))
            except ModelError:
                pass  # (its queue is gone: none of it is acquired)
            left -= 1
            if left == 0:
                answered(lambda: taken)

        return one

    for node, seqs in elsewhere.items():
        node.ask_acquire(sorted(seqs), asker(node))


class TxCommands:
    """``tx.select``, ``commit`` and ``rollback``."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx

    def select(self, s: Amqp010Session, c: Compound) -> None:
        if s.tx is None:
            s.tx = []

    def _work(self, s: Amqp010Session) -> list[TxWork]:
        if s.tx is None:
            raise CommandError("illegal-state", "the session is not transactional (no tx.select)")
        work, s.tx = s.tx, []
        return work

    def commit(self, s: Amqp010Session, c: Compound) -> None:
        """Do the transaction's work; with several workers, as one with its parts on the
        queues other workers own (two-phase: ``broker/workers/transactions.py``), completed
        once every owner committed."""
        work = self._work(s)

        def apply() -> None:
            for w in work:
                w.apply()

        coordinator = self.ctx.broker.coordinator
        if coordinator is None:
            apply()
            return
        vh = self.ctx.vhost
        publishes: list[tuple[Node, QueuedMessage]] = []
        for w in work:
            if w.exchange is not None and w.msg is not None:  # (routed once: apply publishes to these)
                publishes += route_once(vh, w.exchange, w.msg, w.key, w)
        acks = [(p.node, p.msg) for w in work for cid in w.accepted if (p := s.unacked.get(cid)) is not None]

        def ask(answered: Answered[None]) -> None:
            commit_reaching(coordinator, publishes, acks, apply, answered)

        self.ctx.later(ask, answer_now)  # (a refusal by an owner fails the command: nothing was applied)

    def rollback(self, s: Amqp010Session, c: Compound) -> None:
        self._work(s)

