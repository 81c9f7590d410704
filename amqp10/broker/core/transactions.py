"""The node side of a local transaction: work held until commit, undone at rollback.

A front end (the 1.0 coordinator in :mod:`amqp10.broker.amqp1.transactions`;
0-9-1's ``tx.select`` later) declares a :class:`Transaction`, posts messages and
retires consumed ones in it, and discharges it. Nothing posted reaches a node
before the commit, which publishes every posted message and applies every
retirement synchronously: the store's group committer takes the writes as one
batch, i.e. one SQLite transaction. A rollback puts retired messages back on
their queues as failed deliveries (delivery-count + 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from . import store as _store
from .message import QueuedMessage
from .nodes import Answered, Journal, Node, NodeElsewhere, nothing
from .queues import Queue
from .streams import Stream

if TYPE_CHECKING:
    from .exchanges import Exchange
    from .vhost import VirtualHost

__all__ = ["Coordinator", "Retirement", "RoutedOnce", "Transaction", "commit_reaching", "route_once"]


class Coordinator(Protocol):
    """:attr:`Broker.coordinator <amqp10.broker.core.Broker.coordinator>` with several
    workers: commits a transaction whose work reaches nodes other workers own as one
    (``broker/workers/transactions.py``). None with one worker: every node is local."""

    def commit(
        self,
        publishes: Sequence[tuple[Node, QueuedMessage]],
        acks: Sequence[tuple[Node, QueuedMessage]],
        apply: Callable[[], None],
        answered: Answered[None],
        *,
        create: bool = False,
    ) -> bool:
        """Commit a transaction's ``publishes`` (each message with a node it reaches; with
        ``create``, a node its owner lacks is made, as a 1.0 publisher's attach makes it on
        one broker; else such a message is dropped, as the default exchange routes it) and
        ``acks`` (messages taken from nodes, accepted) as one. False, with nothing done, when
        none of it reaches a node another worker owns (the caller commits as on one
        broker). Else each owner reached prepares its part, then ``apply`` (the front end's
        own commit: what it reaches on those owners is not sent again) runs in the store
        batch that records the decision, then each owner commits; ``answered`` once all of
        it is stored, or with the refusal (an owner could not prepare: nothing was applied,
        the caller rolls its own work back)."""
        ...

    def prepare(
        self,
        key: bytes,
        publishes: Sequence[tuple[Node, QueuedMessage]],
        acks: Sequence[tuple[Node, QueuedMessage]],
        answered: Answered[None],
    ) -> bool:
        """The first phase alone, of a branch a front end prepares now and decides later
        (0-10's ``dtx.prepare``), named by ``key`` (the front end's id of it, as in its
        store). False, with nothing done, when none of it reaches another worker's node.
        Else each owner reached prepares its part (its messages the branch acknowledges are
        its own from then on: their outcome here sends nothing) and ``answered`` is told,
        or refused (nothing is prepared anywhere); a refusal aside, the caller writes its
        own prepared record in the same turn, and later decides with :meth:`finish`."""
        ...

    def finish(self, key: bytes, commit: bool, apply: Callable[[], None], answered: Answered[None]) -> bool:
        """Decide the branch ``key`` that :meth:`prepare` prepared (before a restart too):
        ``apply`` (the front end's own commit or rollback) runs in the store batch of the
        decision, then every owner commits or rolls back its part; ``answered`` once all
        of it is stored. False, with nothing done, when ``key`` has no part on another
        worker (the caller decides as on one broker)."""
        ...


class RoutedOnce(Protocol):
    """A transactional publish (0-9-1's, 0-10's, a dtx branch's) that its commit routes once
    with several workers (:func:`route_once`)."""

    reached: list[Queue | Stream | NodeElsewhere] | None
    """The queues it reaches, once :func:`route_once` routed it (to learn the workers its
    transaction reaches): its commit publishes it to them
    (:meth:`VirtualHost.route <.vhost.VirtualHost.route>`'s ``reached``), not routing it
    again. None before (one worker: routed at the commit)."""


def route_once(
    vhost: VirtualHost, exchange: Exchange, msg: QueuedMessage, key: str | None, publish: RoutedOnce
) -> list[tuple[Node, QueuedMessage]]:
    """Route ``publish``'s ``msg`` through ``exchange`` with ``key`` (None: its own), keeping
    the queues it reaches in its :attr:`~RoutedOnce.reached`: each of them with ``msg``
    (what :meth:`Coordinator.commit` and :meth:`~Coordinator.prepare` take)."""
    publish.reached = vhost.destinations(exchange, msg, key)
    return [(q, msg) for q in publish.reached]


def commit_reaching(
    coordinator: Coordinator,
    publishes: Sequence[tuple[Node, QueuedMessage]],
    acks: Sequence[tuple[Node, QueuedMessage]],
    apply: Callable[[], None],
    answered: Answered[None],
) -> None:
    """A front end's ``tx.commit`` with several workers (0-9-1's, 0-10's): its ``publishes``
    (each message with a queue it reaches, routed once: :func:`route_once`) and ``acks``
    committed as one through ``coordinator`` (:meth:`Coordinator.commit`) when they reach a
    node another worker owns; else as on one broker: ``apply``, then ``answered``."""
    if not coordinator.commit(publishes, acks, apply, answered):
        apply()
        answered(nothing)


class Retirement:
    """A consumed message whose outcome waits for the commit."""

    __slots__ = ("accepted", "apply", "msg", "node")

    def __init__(self, node: Node, msg: QueuedMessage, apply: Callable[[], None], *, accepted: bool = False) -> None:
        self.node = node
        self.msg = msg
        self.apply = apply
        """Applies the outcome (the front end's settle code, the same as outside a transaction)."""
        self.accepted = accepted
        """The outcome acknowledges it (what a node on another worker takes as its part)."""


class Transaction:
    """One declared transaction: the messages posted in it and the outcomes given in it."""

    __slots__ = ("posted", "retired", "txn_id")

    def __init__(self, txn_id: bytes) -> None:
        self.txn_id = txn_id
        self.posted: list[tuple[Node, QueuedMessage]] = []
        self.retired: list[Retirement] = []

    def post(self, node: Node, msg: QueuedMessage) -> None:
        """Hold ``msg`` for ``node`` until the commit."""
        self.posted.append((node, msg))

    def retire(self, node: Node, msg: QueuedMessage, apply: Callable[[], None], *, accepted: bool = False) -> None:
        """``msg`` (taken from ``node``) stays acquired; ``apply`` settles it at the commit
        (``accepted``: it acknowledges it)."""
        self.retired.append(Retirement(node, msg, apply, accepted=accepted))

    def overfull(self) -> str | None:
        """The name of a ``reject``-overflow queue the posted messages would overflow."""
        need: dict[int, tuple[Queue, int, int]] = {}
        for node, msg in self.posted:
            if isinstance(node, Queue) and node.policy.overflow_mode == "reject":
                q, n, size = need.get(id(node), (node, 0, 0))
                need[id(node)] = (q, n + 1, size + msg.size)
        for q, n, size in need.values():
            p = q.policy
            if (p.max_length is not None and q.count + n > p.max_length) or (
                p.max_bytes is not None and q.bytes + size > p.max_bytes
            ):
                return q.name
        return None

    def commit(self, journal: Journal, on_durable: Callable[[], None]) -> None:
        """Publish what was posted, apply what was retired; ``on_durable`` once it is stored."""
        # Everything below is submitted to the journal without yielding: the group
        # committer takes it as one batch, i.e. one SQLite transaction.
        posted, self.posted = self.posted, []
        retired, self.retired = self.retired, []
        for node, msg in posted:
            node.publish(msg, nothing)
        for r in retired:
            r.apply()
        # the barrier's callback runs once every write above is durable
        journal.submit((_store.BARRIER,), on_durable)

    def rollback(self) -> None:
        """Forget what was posted; retired messages go back as failed deliveries."""
        self.posted.clear()
        retired, self.retired = self.retired, []
        for r in retired:
            # the delivery happened: count it, as a modified(delivery-failed) would
            r.node.release(r.msg, delivery_failed=True)

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id.hex()}, posted={len(self.posted)}, retired={len(self.retired)})"
