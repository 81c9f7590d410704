"""Part 4 against a real peer: Proton's reactor declares transactions on our broker.

``Container.declare_transaction`` attaches Proton's coordinator link; its
``Transaction.send`` posts messages with a ``transactional-state``, and
``Transaction.accept`` retires received ones. We check what the queues hold
after Proton commits or aborts.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from tests.broker.conftest import RunningBroker

pytestmark = pytest.mark.proton

N = 10
T = 10


class _TxnProducer(MessagingHandler, TransactionHandler):  # type: ignore[misc]
    """Sends ``N`` messages in one transaction, then commits or aborts it."""

    def __init__(self, url: str, address: str, commit: bool) -> None:
        super().__init__()
        self.url = url
        self.address = address
        self.commit = commit
        self.txn: Any = None
        self.sender: Any = None
        self.sent = 0
        self.outcome: str | None = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(conn, self.address)
        event.container.declare_transaction(conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        self._send()

    def on_sendable(self, event: Any) -> None:
        self._send()

    def _send(self) -> None:
        if self.txn is None or self.sent >= N:
            return
        while self.sender.credit and self.sent < N:
            self.txn.send(self.sender, Message(body=self.sent))
            self.sent += 1
        if self.sent == N:
            if self.commit:
                self.txn.commit()
            else:
                self.txn.abort()

    def _done(self, event: Any, outcome: str) -> None:
        self.outcome = outcome
        event.connection.close()

    def on_transaction_committed(self, event: Any) -> None:
        self._done(event, "committed")

    def on_transaction_aborted(self, event: Any) -> None:
        self._done(event, "aborted")

    def on_transaction_commit_failed(self, event: Any) -> None:
        self._done(event, "commit failed")

    def on_transaction_declare_failed(self, event: Any) -> None:
        self._done(event, "declare failed")


class _TxnConsumer(MessagingHandler, TransactionHandler):  # type: ignore[misc]
    """Receives ``n`` messages, accepts them in one transaction, then commits or aborts."""

    def __init__(self, url: str, address: str, n: int, commit: bool) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url = url
        self.address = address
        self.n = n
        self.commit = commit
        self.txn: Any = None
        self.receiver: Any = None
        self.bodies: list[Any] = []
        self.outcome: str | None = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.receiver = event.container.create_receiver(conn, self.address)
        event.container.declare_transaction(conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        self.receiver.flow(self.n)

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        self.txn.accept(event.delivery)
        if len(self.bodies) == self.n:
            if self.commit:
                self.txn.commit()
            else:
                self.txn.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.outcome = "committed"
        event.connection.close()

    def on_transaction_aborted(self, event: Any) -> None:
        self.outcome = "aborted"
        event.connection.close()


def _run(handler: Any) -> None:
    c = Container(handler)
    c.timeout = 0.5
    t = threading.Thread(target=c.run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the Proton container did not finish"


def _drain(url: str, address: str) -> list[Any]:
    """Everything in ``address`` now (accepted), with a Proton blocking receiver."""
    conn = BlockingConnection(url, timeout=T)
    try:
        rcv = conn.create_receiver(address, credit=100)
        bodies = []
        while True:
            try:
                m = rcv.receive(timeout=1.0)
            except Exception:  # proton.utils raises its Timeout: nothing more is queued
                break
            bodies.append(m.body)
            rcv.accept()
        return bodies
    finally:
        conn.close()


def test_proton_transactional_posting(running_broker: RunningBroker) -> None:
    committed = _TxnProducer(running_broker.url, "proton-txn", commit=True)
    _run(committed)
    assert committed.outcome == "committed"
    aborted = _TxnProducer(running_broker.url, "proton-txn", commit=False)
    _run(aborted)
    assert aborted.outcome == "aborted"
    assert aborted.sent == N
    assert _drain(running_broker.url, "proton-txn") == list(range(N))


def test_proton_transactional_retirement(running_broker: RunningBroker) -> None:
    producer = _TxnProducer(running_broker.url, "proton-retire", commit=True)
    _run(producer)
    assert producer.outcome == "committed"
    undo = _TxnConsumer(running_broker.url, "proton-retire", 4, commit=False)
    _run(undo)
    assert undo.outcome == "aborted" and undo.bodies == [0, 1, 2, 3]
    take = _TxnConsumer(running_broker.url, "proton-retire", 4, commit=True)
    _run(take)
    assert take.outcome == "committed" and take.bodies == [0, 1, 2, 3]
    # what the committed consumer accepted is gone; the rest is still queued
    assert _drain(running_broker.url, "proton-retire") == list(range(4, N))
