"""Python-qpid-proton clients (BlockingConnection, reactor) against our broker over loopback."""

from __future__ import annotations

import threading

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from tests.broker.conftest import RunningBroker

pytestmark = pytest.mark.proton


def test_blocking_send_receive_accept(running_broker: RunningBroker) -> None:
    conn = BlockingConnection(running_broker.url, timeout=10)
    try:
        snd = conn.create_sender("pq1")
        for i in range(10):
            snd.send(Message(body={"n": i}, durable=True))
        rcv = conn.create_receiver("pq1", credit=10)
        got = []
        for _ in range(10):
            m = rcv.receive(timeout=5)
            got.append(m.body["n"])
            rcv.accept()
        assert got == list(range(10))
    finally:
        conn.close()
    q = running_broker.broker.nodes["pq1"]
    assert q.count == 0 and q.stats.acked == 10


def test_blocking_release_and_reject(running_broker: RunningBroker) -> None:
    conn = BlockingConnection(running_broker.url, timeout=10)
    try:
        snd = conn.create_sender("pq2")
        snd.send(Message(body="one"))
        snd.send(Message(body="two"))
        rcv = conn.create_receiver("pq2", credit=1)
        m = rcv.receive(timeout=5)
        assert m.body == "one"
        rcv.release()  # Proton re-grants credit on receive, so "two" is already on its way
        m = rcv.receive(timeout=5)
        assert m.body == "two"
        rcv.accept()
        m = rcv.receive(timeout=5)
        assert m.body == "one"  # the released message went back to the queue
        rcv.reject()
    finally:
        conn.close()
    assert running_broker.broker.nodes["pq2"].stats.rejected == 1


def test_dynamic_reply_to_request_response(running_broker: RunningBroker) -> None:
    from proton.utils import SyncRequestResponse

    server = BlockingConnection(running_broker.url, timeout=10)
    client = BlockingConnection(running_broker.url, timeout=10)
    stop = threading.Event()

    def serve() -> None:
        rcv = server.create_receiver("requests", credit=5)
        replies = {}
        while not stop.is_set():
            try:
                m = rcv.receive(timeout=0.2)
            except Exception:
                continue
            addr = m.reply_to
            if addr not in replies:
                replies[addr] = server.create_sender(addr)
            replies[addr].send(Message(body=str(m.body).upper(), correlation_id=m.correlation_id))
            rcv.accept()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rr = SyncRequestResponse(client, "requests")
        reply = rr.call(Message(body="ping", id="r1"))
        assert reply.body == "PING"
    finally:
        stop.set()
        t.join(5)
        client.close()
        server.close()


class _ReactorSendThenReceive(MessagingHandler):  # type: ignore[misc]
    def __init__(self, url: str, count: int) -> None:
        super().__init__()
        self.url = url
        self.count = count
        self.sent = 0
        self.confirmed = 0
        self.received: list[int] = []

    def on_start(self, event) -> None:  # type: ignore[no-untyped-def]
        conn = event.container.connect(self.url)
        event.container.create_sender(conn, "reactor-q")
        event.container.create_receiver(conn, "reactor-q")

    def on_sendable(self, event) -> None:  # type: ignore[no-untyped-def]
        while event.sender.credit and self.sent < self.count:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_accepted(self, event) -> None:  # type: ignore[no-untyped-def]
        self.confirmed += 1
        self._maybe_close(event)

    def on_message(self, event) -> None:  # type: ignore[no-untyped-def]
        self.received.append(event.message.body)
        self._maybe_close(event)

    def _maybe_close(self, event) -> None:  # type: ignore[no-untyped-def]
        # both directions share the connection: close once every send is confirmed too
        if len(self.received) == self.count and self.confirmed == self.count:
            event.connection.close()


def test_reactor_client_round_trip(running_broker: RunningBroker) -> None:
    h = _ReactorSendThenReceive(running_broker.url, 200)
    c = Container(h)
    c.timeout = 0.5
    t = threading.Thread(target=c.run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert h.received == list(range(200))
    assert h.confirmed == 200


def test_proton_anonymous_sender_routes_by_address(running_broker: RunningBroker) -> None:
    """What Proton's server.py relies on: ANONYMOUS-RELAY offered, a sender with no
    target, each message sent where its address (``to``) says."""
    from proton import Delivery
    from proton.utils import SendException

    conn = BlockingConnection(running_broker.url, timeout=10)
    try:
        assert "ANONYMOUS-RELAY" in (conn.conn.remote_offered_capabilities or [])
        conn.create_receiver("pq-relay", credit=0).close()  # the queue exists
        relay = conn.create_sender(None)
        relay.send(Message(address="pq-relay", body="routed"))  # raises unless accepted
        with pytest.raises(SendException) as info:
            relay.send(Message(address="pq-relay-absent", body="lost"))
        assert info.value.state == Delivery.REJECTED
        relay.send(Message(address="/queues/pq-relay", body="still up"))
        rcv = conn.create_receiver("pq-relay", credit=5)
        got = [rcv.receive(timeout=5).body for _ in range(2)]
        rcv.accept()
        assert got == ["routed", "still up"]
    finally:
        conn.close()
