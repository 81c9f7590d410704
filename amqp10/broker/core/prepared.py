"""Work held for a transaction's outcome, kept in the store once it is prepared.

A front end with two-phase transactions (0-10's ``dtx``; a 1.0 coordinator could use it
too) keeps a transaction's work in a :class:`HeldWork`: the messages it publishes, routed
through their exchange only at the commit, and the messages it took from queues, still
acquired (no other consumer gets them), acknowledged at the commit and released at a
rollback. Nothing of it is written while the transaction runs.

:meth:`HeldWork.prepare` writes it to the store (the ``prepared`` tables: the publishes
as message bytes with their exchange and routing key, the taken messages as queue and
seq) and calls back once that is durable, so the answer to a prepare is never given
before. The commit or rollback removes the record in the same store batch as its own
writes (the publishes' puts, the acknowledgements' deletes), so a crash leaves either the
prepared transaction or its outcome, never both.

After a restart :meth:`~.broker.Broker.recover` rebuilds each prepared transaction: its
taken messages come back from the store acquired (:meth:`~.queues.Queue.restore`),
its publishes as messages again, and the front end that owns it takes it with
:meth:`~.broker.Broker.recovered_transactions`, to be committed or rolled back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import store as _store
from .message import QueuedMessage
from .nodes import Journal, Node, NodeElsewhere, nothing
from .queues import Queue
from .streams import Stream
from .transactions import route_once

if TYPE_CHECKING:
    from .vhost import VirtualHost

__all__ = ["HeldPublish", "HeldWork"]


class HeldPublish:
    """A message to route through ``exchange`` of ``vhost`` at the commit."""

    __slots__ = ("exchange", "msg", "reached", "routing_key", "vhost")

    def __init__(self, vhost: VirtualHost, exchange: str, routing_key: str | None, msg: QueuedMessage) -> None:
        self.vhost = vhost
        self.exchange = exchange
        self.routing_key = routing_key
        self.msg = msg
        self.reached: list[Queue | Stream | NodeElsewhere] | None = None
        """The queues it reaches, once :meth:`HeldWork.reached` routed it
        (:class:`~.transactions.RoutedOnce`)."""

    def row(self) -> tuple[object, ...]:
        """Its row in the store (``prepared_publishes``, after the transaction and position)."""
        m = self.msg
        return (self.vhost.name, self.exchange, self.routing_key, m.priority, int(m.durable), m.expiry, m.arrival,
                m.message_id, m.format, m.data)  # fmt: skip


class HeldWork:
    """One transaction's publishes and taken messages, until its commit or rollback.

    ``owner`` names the front end it belongs to, ``txn_id`` the transaction in that
    front end's spelling (the store's key); ``journal`` is the broker's."""

    __slots__ = ("journal", "owner", "prepared", "published", "taken", "txn_id")

    def __init__(self, owner: str, txn_id: bytes, journal: Journal) -> None:
        self.owner = owner
        self.txn_id = txn_id
        self.journal = journal
        self.published: list[HeldPublish] = []
        self.taken: list[tuple[Node, QueuedMessage]] = []
        self.prepared = False
        """Recorded in the store (:meth:`prepare`): the outcome removes the record."""

    def publish(self, vhost: VirtualHost, exchange: str, routing_key: str | None, msg: QueuedMessage) -> None:
        """Route ``msg`` through ``exchange`` at the commit (``routing_key`` None: its own)."""
        self.published.append(HeldPublish(vhost, exchange, routing_key, msg))

    def take(self, node: Node, msg: QueuedMessage) -> None:
        """``msg``, taken from ``node``, stays acquired: acknowledged at the commit, released at a rollback."""
        self.taken.append((node, msg))

    def reached(self) -> list[tuple[Node, QueuedMessage]]:
        """The queues its publishes reach, each with its message (what a transaction over
        several workers learns its participants from), kept for the commit: routed once."""
        reached: list[tuple[Node, QueuedMessage]] = []
        for p in self.published:
            exchange = p.vhost.exchange(p.exchange)
            if exchange is not None:
                reached += route_once(p.vhost, exchange, p.msg, p.routing_key, p)
        return reached

    def prepare(self, on_durable: Callable[[], None]) -> None:
        """Write the work to the store; ``on_durable`` once it is there."""
        taken = [(_store.message_key(n.vhost, n.name), m.seq) for n, m in self.taken if isinstance(n, Queue)]
        rows = [p.row() for p in self.published]
        self.prepared = True
        self.journal.submit((_store.PREPARE, self.txn_id, self.owner, rows, taken), on_durable)

    def commit(self, on_durable: Callable[[], None] = nothing) -> None:
        """Route the publishes, acknowledge the taken messages; ``on_durable`` once it is stored."""
        published, self.published = self.published, []
        taken, self.taken = self.taken, []
        # submitted to the journal without yielding: one store batch, the record's removal with it
        for p in published:
            exchange = p.vhost.exchange(p.exchange)
            if exchange is not None:  # (else unroutable: dropped, as it would be now)
                p.vhost.route(exchange, p.msg, p.routing_key, nothing, None, p.reached)
        for node, msg in taken:
            node.ack(msg)
        self._done(taken, on_durable)

    def rollback(self, on_durable: Callable[[], None] = nothing) -> None:
        """Drop the publishes; the taken messages go back as failed deliveries."""
        self.published.clear()
        taken, self.taken = self.taken, []
        for node, msg in taken:
            node.release(msg, delivery_failed=True)
        self._done(taken, on_durable)

    def _done(self, taken: list[tuple[Node, QueuedMessage]], on_durable: Callable[[], None]) -> None:
        if self.prepared:
            self.prepared = False
            self.journal.submit((_store.FORGET_PREPARED, self.txn_id))
        self.journal.submit((_store.BARRIER,), on_durable)
        for node in {id(n): n for n, _ in taken}.values():
            node.dispatch()

    def __repr__(self) -> str:
        return f"HeldWork({self.owner}, {self.txn_id.hex()}, published={len(self.published)}, taken={len(self.taken)})"
