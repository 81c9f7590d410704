"""Local transactions of the async client (AMQP 1.0 Part 4): declare, work, discharge.

::

    async with conn.transaction() as txn:
        await sender.send(msg, txn=txn)
        d = await receiver.receive()
        await d.accept(txn=txn)
    # the block's end commits; an exception inside rolls back and propagates

``await conn.transaction()`` gives the declared transaction for explicit
:meth:`Transaction.commit` / :meth:`Transaction.rollback`. Control messages go
over one coordinator link per connection, attached on first use. A
transaction is tied to its connection: after a reconnect it is gone (the peer
rolled it back), and using it raises :class:`TransactionError`.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from types import TracebackType
from typing import Any

import anyio

from .. import errors
from ..message import Message
from ..types import Accepted, Rejected, TxnCapability, symbol
from ..types.transactions import Coordinator, Declare, Declared, Discharge, TransactionalState
from ._common import describe_outcome
from .core import ConnectionCore
from .sender import Sender
from .sessions import Endpoints

__all__ = ["Transaction", "TransactionError", "Transactions"]

log = logging.getLogger("amqp10.client")


class TransactionError(errors.AMQPError):
    """A declare or discharge failed, or the transaction is no longer usable.

    A failed commit means the transaction was rolled back (``condition``
    says why, e.g. ``amqp:transaction:rollback``).
    """


class Transaction:
    """A local transaction on a connection's transaction coordinator.

    ``state`` is ``"new"`` (not declared yet), ``"open"``, ``"committed"``,
    ``"rolled back"`` or ``"failed"``; ``txn_id`` the coordinator's id once declared.
    """

    def __init__(self, conn: Transactions, *, timeout: float | None = None) -> None:
        self._conn = conn
        self._timeout = timeout
        self._coordinator: Sender | None = None
        self._reconnects = 0  # the connection's count at the declare: a reconnect ends us
        self.txn_id: bytes | None = None
        self.state = "new"
        self._txn_state: TransactionalState | None = None  # what transfers/dispositions carry

    def __repr__(self) -> str:
        tid = self.txn_id.hex() if self.txn_id is not None else "-"
        return f"<Transaction {tid} {self.state}>"

    # -- declare ------------------------------------------------------------------------------
    async def declare(self) -> Transaction:
        """Ask the coordinator for a transaction (done by ``await``/``async with``)."""
        if self.state != "new":
            raise errors.IllegalStateError(f"the transaction is already {self.state}")
        coordinator = await _coordinator_of(self._conn, self._timeout)
        self.state = "declaring"
        try:
            outcome = await self._control(coordinator, Declare())
        except BaseException:
            self.state = "failed"
            raise
        if not isinstance(outcome, Declared) or not isinstance(outcome.txn_id, bytes):
            self.state = "failed"
            raise _failure("declare", outcome)
        self._coordinator = coordinator
        self._reconnects = self._conn.reconnects
        self.txn_id = outcome.txn_id
        self._txn_state = TransactionalState(txn_id=outcome.txn_id)
        self.state = "open"
        return self

    def __await__(self) -> Generator[Any, None, Transaction]:
        return self.declare().__await__()

    # -- discharge ----------------------------------------------------------------------------
    async def commit(self) -> None:
        """Discharge with ``fail=false``: the work becomes visible. Raises
        :class:`TransactionError` if the coordinator refused (it rolled back)."""
        await self._discharge(fail=False)

    async def rollback(self) -> None:
        """Discharge with ``fail=true``: posted messages are dropped, outcomes undone."""
        await self._discharge(fail=True)

    async def _discharge(self, *, fail: bool) -> None:
        coordinator = self._usable_coordinator()
        self.state = "discharging"
        try:
            outcome = await self._control(coordinator, Discharge(txn_id=self.txn_id, fail=fail))
        except BaseException:
            self.state = "failed"
            raise
        if not isinstance(outcome, Accepted):
            self.state = "failed"
            raise _failure("commit" if not fail else "rollback", outcome)
        self.state = "rolled back" if fail else "committed"

    async def _control(self, coordinator: Sender, body: Any) -> Any:
        return await coordinator.send(Message(body=body), settled=False, timeout=self._timeout)

    # -- for senders and deliveries -----------------------------------------------------------
    def _usable_coordinator(self) -> Sender:
        if self.state != "open":
            raise errors.IllegalStateError(f"the transaction is {self.state}")
        coordinator = self._coordinator
        assert coordinator is not None
        if (
            coordinator.error is not None
            or self._conn._coordinator is not coordinator
            or self._conn.reconnects != self._reconnects
        ):
            self.state = "failed"
            raise TransactionError(
                "the transaction was lost with its coordinator link (or connection)"
            )
        return coordinator

    def _state_for(self, conn: ConnectionCore) -> TransactionalState:
        """The ``transactional-state`` a transfer on ``conn`` carries (checks it may)."""
        if conn is not self._conn:
            raise errors.IllegalStateError("the transaction belongs to another connection")
        self._usable_coordinator()
        assert self._txn_state is not None
        return self._txn_state

    def _outcome_state(self, conn: ConnectionCore, outcome: Any) -> TransactionalState:
        """The state of a disposition giving ``outcome`` within the transaction."""
        return TransactionalState(txn_id=self._state_for(conn).txn_id, outcome=outcome)

    # -- as a context ------------------------------------------------------------------------
    async def __aenter__(self) -> Transaction:
        if self.state == "new":
            await self.declare()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.state != "open":
            return  # committed or rolled back inside the block
        if exc_type is None:
            await self.commit()
            return
        try:
            with anyio.CancelScope(shield=True):  # a cancelled block still rolls back
                await self.rollback()
        except Exception as rollback_error:
            # the peer rolls back anyway when the link or connection is gone; the
            # block's own exception is the one that matters
            log.warning("rolling back %r failed: %s", self, rollback_error)


class Transactions(Endpoints):
    """The layer of :class:`~amqp10.client.Connection` that makes transactions."""

    def _init_layer(self) -> None:
        super()._init_layer()
        self._coordinator: Sender | None = None  # the control link (made on first use)

    def transaction(self, *, timeout: float | None = None) -> Transaction:
        """A local transaction (AMQP Part 4) on this connection's coordinator.

        ``async with conn.transaction() as txn:`` declares it, commits when the
        block ends and rolls back (then re-raises) if the block raises;
        ``txn = await conn.transaction()`` declares it for explicit
        ``await txn.commit()`` / ``await txn.rollback()``. Work joins it with
        ``sender.send(msg, txn=txn)`` and ``delivery.accept(txn=txn)`` (and the
        other outcomes). ``timeout`` bounds each declare/discharge exchange.
        """
        self._check_open()
        return Transaction(self, timeout=timeout)


async def _coordinator_of(conn: Transactions, timeout: float | None) -> Sender:
    """The connection's coordinator link, attached on first use."""
    async with conn._lock():
        c = conn._coordinator
        if c is None or c.error is not None or not c.is_open:
            c = await conn.open_sender(
                None,
                name=conn._link_name("coordinator", None),
                target=Coordinator(capabilities=[symbol(TxnCapability.LOCAL_TRANSACTIONS)]),
                timeout=timeout,
            )
            conn._coordinator = c
        return c


def _failure(what: str, outcome: Any) -> TransactionError:
    if isinstance(outcome, Rejected) and outcome.error is not None:
        return TransactionError.from_error(f"transaction {what} refused", outcome.error)
    shown = describe_outcome(outcome) if outcome is not None else "no outcome"
    return TransactionError(f"transaction {what} refused: {shown}")
