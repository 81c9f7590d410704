"""Local transactions (AMQP 1.0 Part 4, §4.1-4.5): the coordinator and its transactions.

A controller attaches a link to a :class:`~amqp10.types.Coordinator` target and
sends it ``declare`` and ``discharge`` messages (amqp-value bodies). A declared
transaction collects work until its discharge:

- transactional posting (§4.4.1): a transfer whose state is a
  ``transactional-state`` is answered with ``transactional-state(txn-id,
  accepted)`` and held here; nothing reaches the node until the commit, which
  publishes every posted message synchronously, so the store's group committer
  writes them (and the retirements' deletes) in one SQLite transaction, and the
  discharge is accepted only once that transaction is committed. A crash before
  the commit loses the posted messages (never acknowledged); a crash after the
  discharge was accepted loses nothing.
- transactional retirement (§4.4.2): a consumer's disposition with a
  ``transactional-state(txn-id, outcome)`` settles the delivery, keeps the
  message acquired (not redelivered) and applies the outcome at commit through
  :meth:`LinkConsumer.apply` (the same code as a plain outcome). A rollback
  puts the message back on its queue as a failed delivery (delivery-count + 1,
  as a ``modified(delivery-failed)`` would).
- transactional acquisition (§4.4.3, a flow with ``txn-id`` in its properties)
  is not supported: such a flow is ignored (the credit is plain credit), and we
  do not offer ``amqp:multi-txns-per-ssn``-style capabilities beyond
  ``amqp:local-transactions``.

Transactions belong to the connection that declared them (§4.2): a coordinator
link that detaches, or a connection that ends, rolls back its open
transactions. A transfer or disposition naming a txn-id this connection does not
know detaches its link with ``amqp:transaction:unknown-id``. ``declare`` with a
global-id (distributed transactions) is rejected with ``amqp:not-implemented``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...message import Message
from ...transport import Delivery, IllegalStateError, Link, Receiver, Session
from ...types import (
    Accepted,
    DecodeError,
    Error,
    ErrorCondition,
    Rejected,
    Source,
    TxnCapability,
    symbol,
)
from ...types.transactions import Coordinator, Declare, Declared, Discharge, TransactionalState
from ..core import ModelError, Node, QueuedMessage, Transaction, nothing

if TYPE_CHECKING:
    from .consumers import LinkConsumer
    from .context import Amqp1Context

__all__ = ["Transactions"]

log = logging.getLogger("amqp10.broker")

CAPABILITIES = [symbol(TxnCapability.LOCAL_TRANSACTIONS)]
COORDINATOR_CREDIT = 100


class Transactions:
    """The coordinator of one connection: its coordinator links and open transactions."""

    def __init__(self, ctx: Amqp1Context) -> None:
        self.ctx = ctx
        self.coordinators: dict[int, Receiver] = {}  # by id(link)
        self.open: dict[bytes, Transaction] = {}
        self._coordinator_of: dict[bytes, Link] = {}  # txn-id -> the link that declared it
        self.committed = 0
        self.rolled_back = 0

    # -- coordinator links ------------------------------------------------------------------
    def attach(self, link: Receiver) -> None:
        """Accept a link to the coordinator, offering local transactions."""
        remote = link.remote_source
        link.attach(source=remote if isinstance(remote, Source) else Source(), target=Coordinator(capabilities=CAPABILITIES))
        self.coordinators[id(link)] = link
        link.flow(COORDINATOR_CREDIT)

    def is_coordinator(self, link: Link) -> bool:
        return id(link) in self.coordinators

    def link_gone(self, link: Link) -> None:
        """A link detached: if it was a coordinator, its open transactions roll back (§4.2)."""
        if self.coordinators.pop(id(link), None) is None:
            return
        for txn in [t for t in self.open.values() if self._coordinator_of.get(t.txn_id) is link]:
            del self.open[txn.txn_id]
            self._rollback(txn)

    def session_ended(self, session: Session) -> None:
        """A session ended: its coordinator links are gone."""
        for link in [c for c in self.coordinators.values() if c.session is session]:
            self.link_gone(link)

    def close(self) -> None:
        """The connection ended: every open transaction rolls back."""
        self.coordinators.clear()
        txns, self.open = list(self.open.values()), {}
        for txn in txns:
            self._rollback(txn)

    # -- control messages ---------------------------------------------------------------------
    def control(self, link: Receiver, d: Delivery) -> None:
        """A ``declare`` or ``discharge`` arrived on a coordinator link."""
        if link.credit <= COORDINATOR_CREDIT // 2:
            link.flow(COORDINATOR_CREDIT)
        try:
            body = Message.decode(d.payload).body
        except DecodeError as exc:
            self._answer(d, _rejected(ErrorCondition.DECODE_ERROR, str(exc)))
            return
        if isinstance(body, Declare):
            if body.global_id is not None:
                self._answer(
                    d,
                    _rejected(
                        ErrorCondition.NOT_IMPLEMENTED, "distributed transactions are not supported"
                    ),
                )
                return
            txn_id = _new_txn_id(self.open)
            self.open[txn_id] = Transaction(txn_id)
            self._coordinator_of[txn_id] = link
            log.debug("declared transaction %s", txn_id.hex())
            self._answer(d, Declared(txn_id=txn_id))
        elif isinstance(body, Discharge):
            txn = self.open.pop(_txn_key(body.txn_id), None)
            if txn is None:
                self._answer(
                    d,
                    _rejected(
                        ErrorCondition.TRANSACTION_UNKNOWN_ID, f"no transaction {body.txn_id!r}"
                    ),
                )
            elif body.fail:
                self._rollback(txn)
                self._answer(d, Accepted())
            else:
                self._commit(txn, d)
        else:
            self._answer(
                d,
                _rejected(
                    ErrorCondition.DECODE_ERROR,
                    "a coordinator takes declare and discharge messages",
                ),
            )

    def _answer(self, d: Delivery, state: Any) -> None:
        if d.settled or d.settle_pending:
            return
        try:
            d.settle(state)
        except IllegalStateError:
            return  # the link went meanwhile
        self.ctx.wake()

    # -- work in a transaction ----------------------------------------------------------------
    def find(self, state: TransactionalState, link: Link) -> Transaction | None:
        """The transaction ``state`` names; None (and ``link`` detached) if there is none."""
        txn = self.open.get(_txn_key(state.txn_id))
        if txn is None:
            self.ctx.fail_link(
                link,
                ErrorCondition.TRANSACTION_UNKNOWN_ID,
                f"no transaction {state.txn_id!r} on this connection",
            )
        return txn

    def post(self, txn: Transaction, d: Delivery, node: Node, msg: QueuedMessage) -> None:
        """Transactional posting (§4.4.1): hold ``msg`` until the commit."""
        txn.post(node, msg)
        if not d.remote_settled and not d.settled:
            d.settle(TransactionalState(txn_id=txn.txn_id, outcome=Accepted()))

    def retire(self, txn: Transaction, consumer: LinkConsumer, d: Delivery, outcome: Any) -> None:
        """Transactional retirement (§4.4.2): the message stays acquired until the commit."""
        msg = consumer.in_flight.pop(d.tag, None)
        if msg is not None:
            txn.retire(consumer.node, msg, lambda: consumer.apply(msg, outcome), accepted=type(outcome) is Accepted)

    # -- discharge ---------------------------------------------------------------------------
    def _commit(self, txn: Transaction, d: Delivery) -> None:
        self._coordinator_of.pop(txn.txn_id, None)
        full = txn.overfull()
        if full is not None:
            self._rollback(txn)
            self._answer(
                d,
                _rejected(
                    ErrorCondition.TRANSACTION_ROLLBACK,
                    f"node {full!r} has no room for the transaction's messages",
                ),
            )
            return
        log.debug("committing %r", txn)
        self.committed += 1
        journal = self.ctx.broker.journal
        coordinator = self.ctx.broker.coordinator
        if coordinator is not None:  # (several workers: its work may reach other workers' nodes)

            def answered(answer: Callable[[], None]) -> None:
                try:
                    answer()
                except ModelError as exc:  # an owner could not prepare: nothing was applied
                    self.committed -= 1
                    self._rollback(txn)
                    self._answer(d, _rejected(ErrorCondition.TRANSACTION_ROLLBACK, str(exc)))
                    return
                self._answer(d, Accepted())

            acks = [(r.node, r.msg) for r in txn.retired if r.accepted]
            if coordinator.commit(txn.posted, acks, lambda: txn.commit(journal, nothing), answered, create=True):
                return
        txn.commit(journal, lambda: self._answer(d, Accepted()))

    def _rollback(self, txn: Transaction) -> None:
        self._coordinator_of.pop(txn.txn_id, None)
        self.rolled_back += 1
        log.debug("rolled back %r", txn)
        txn.rollback()


def _new_txn_id(taken: dict[bytes, Transaction]) -> bytes:
    """A txn-id of 8 random bytes: another connection's is never ours (but by a 2**-64
    chance), without a counter shared by every connection."""
    txn_id = secrets.token_bytes(8)
    while txn_id in taken:
        txn_id = secrets.token_bytes(8)
    return txn_id


def _txn_key(txn_id: Any) -> bytes:
    return bytes(txn_id) if isinstance(txn_id, (bytes, bytearray, memoryview)) else b""


def _rejected(condition: ErrorCondition, description: str) -> Rejected:
    return Rejected(error=Error(condition=condition, description=description))
