"""Moving an AMQP 0-9-1 connection (workers/handover.py, amqp091/frontend.py), in one
process: which method decides the move, and the replay of a recorded connection on a fresh
engine and handler (the other worker's side). Between real workers:
test_handover_amqp091_processes.py."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from amqp10.amqp091 import (
    ChannelOpened,
    ContentReceived,
    LoginRequested,
    MethodReceived,
    VirtualHostRequested,
)
from amqp10.amqp091 import Connection as Client
from amqp10.amqp091 import methods as m
from amqp10.amqp091.framing import split_frames
from amqp10.broker.amqp091.connection import BrokerConnection
from amqp10.broker.amqp091.frontend import (
    answered_first,
    as_compared,
    decides_move,
    frames,
    queue_named,
    replay_failed,
)
from amqp10.broker.amqp091.handler import Amqp091Handler
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, QueuedMessage
from amqp10.broker.workers.handover import MovedIn, replay
from amqp10.broker.workers.ownership import Ownership, Placement
from amqp10.broker.workers.remote import RemoteNodes


def _method(method: Any) -> MethodReceived:
    return MethodReceived(channel=1, method=method)


def _publish(exchange: str, key: str) -> ContentReceived:
    return ContentReceived(
        channel=1, method=m.BasicPublish(exchange=exchange, routing_key=key),
        properties=m.BasicProperties(),
        raw_properties=b"",
        body=b"",
    )


def test_the_first_method_a_replay_would_not_reproduce_decides_for_the_queue_it_names() -> None:
    table: list[tuple[Any, bool, str | None]] = [
        (LoginRequested(mechanism="PLAIN", response=b"", username="u", password="p", client_properties={}, locale="en_US"), False, None),
        (VirtualHostRequested(virtual_host="/"), False, None),
        (ChannelOpened(channel=1), False, None),
        (_method(m.BasicQos(prefetch_count=10)), False, None),
        (_method(m.ConfirmSelect()), False, None),
        (_method(m.TxSelect()), False, None),
        (_method(m.QueueDeclare(queue="q")), True, "q"),
        (_method(m.QueueDeclare(queue="")), True, None),  # server-named: not moved
        (_method(m.QueueBind(queue="q", exchange="amq.direct", routing_key="k")), True, "q"),
        (_method(m.QueuePurge(queue="q")), True, "q"),
        (_method(m.QueueDelete(queue="q")), True, "q"),
        (_method(m.BasicConsume(queue="q")), True, "q"),
        (_method(m.BasicConsume(queue="amq.rabbitmq.reply-to")), True, None),
        (_method(m.BasicGet(queue="q")), True, "q"),
        (_method(m.ExchangeDeclare(exchange="x", type="direct")), True, None),
        (_publish("", "q"), True, "q"),
        (_publish("amq.fanout", "q"), True, None),  # another exchange: not moved
    ]
    assert [(decides_move(e), queue_named(e)) for e, _, _ in table] == [(d, q) for _, d, q in table]


def test_with_publishers_apart_a_named_declaration_does_not_decide_the_publish_or_consume_after_it_does() -> None:
    """A declaration a replay answers from the metadata (named, not exclusive) no longer
    decides: what the connection does next says whether it publishes."""
    table: list[tuple[Any, bool]] = [
        (_method(m.QueueDeclare(queue="q")), False),
        (_method(m.QueueDeclare(queue="q", passive=True)), False),
        (_method(m.QueueDeclare(queue="q", durable=True, auto_delete=True)), False),
        (_method(m.QueueDeclare(queue="q", exclusive=True)), True),  # this connection's own: as before
        (_method(m.QueueDeclare(queue="q", no_wait=True)), True),  # nothing written to compare: as before
        (_method(m.QueueDeclare(queue="")), True),  # server-named
        (_method(m.QueueDeclare(queue="amq.gen-x", passive=True)), True),
        (_method(m.BasicQos(prefetch_count=10)), False),
        (_method(m.QueueBind(queue="q", exchange="amq.direct", routing_key="k")), True),
        (_method(m.BasicConsume(queue="q")), True),
        (_publish("", "q"), True),
    ]
    assert [decides_move(e, apart=True) for e, _ in table] == [d for _, d in table]
    assert [decides_move(e) for e, _ in table[:3]] == [True, True, True]  # (without it: each decides)
    assert [answered_first(e) for e, _ in table[:3]] == [True, True, True]
    assert not answered_first(table[7][0]) and not answered_first(_publish("", "q"))


HEADER = b"AMQP\x00\x00\x09\x01"


HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
CHANNEL_OPEN = b"\x01\x00\x01\x00\x00\x00\x05\x00\x14\x00\x0a\x00\xce"  # channel.open on 1: a frame


def test_frames_are_the_header_then_one_frame_at_a_time() -> None:
    data = HEADER + CHANNEL_OPEN + CHANNEL_OPEN.replace(b"\x00\x01", b"\x00\x02", 1)
    assert list(frames(data)) == [HEADER, CHANNEL_OPEN, data[-13:]]
    assert list(frames(data + CHANNEL_OPEN[:4])) == [HEADER, CHANNEL_OPEN, data[-13:], CHANNEL_OPEN[:4]]


class Recorded:
    """A client engine against the front end's engine and handler, every byte each wrote kept."""

    def __init__(self, broker: Broker | None = None) -> None:
        self.server = BrokerConnection("server")
        self.handler = Amqp091Handler(broker or Broker(BrokerConfig()), self.server)
        self.client = Client("client")
        self.sent = bytearray()
        self.written = bytearray()

    def pump(self) -> None:
        for _ in range(100):
            c2s = self.client.data_to_send()
            self.sent += c2s
            if c2s:
                self.handler.handle(self.server.receive_data(c2s))
            self.handler.handle(self.server.poll_events())
            s2c = self.server.data_to_send()
            self.written += s2c
            if s2c:
                self.client.receive_data(s2c)
            if not c2s and not s2c:
                return
        raise AssertionError("the pair did not settle")


def _recorded(heartbeats: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    """A client's connection up to its ``queue.declare``: all it sent (the header first)
    and all the broker wrote before that method was handled; ``heartbeats``: the sides
    ("server", "client") that sent a heartbeat frame after ``channel.open``."""
    pair = Recorded()
    pair.pump()
    pair.client.open_channel(1)
    pair.pump()
    for side in heartbeats:  # half the negotiated 60 s passed without a frame out
        engine = pair.server if side == "server" else pair.client
        engine.tick(0.0)
        engine.tick(31.0)
    pair.pump()
    pair.client.send_method(1, m.BasicQos(prefetch_count=10))
    pair.client.send_method(1, m.ConfirmSelect())
    pair.pump()
    pair.client.send_method(1, m.QueueDeclare(queue="q"))
    assert pair.sent.startswith(HEADER)
    return bytes(pair.sent + pair.client.data_to_send()), bytes(pair.written)


def _fresh() -> tuple[BrokerConnection, Amqp091Handler]:
    conn = BrokerConnection("server")
    return conn, Amqp091Handler(Broker(BrokerConfig()), conn)


def test_a_replay_fed_frame_by_frame_writes_what_the_first_worker_wrote_then_answers_the_method() -> None:
    inbound, written = _recorded()
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    rest = replay(moved, conn, handler.handle, decides_move, frames, fail=partial(replay_failed, handler))
    assert rest == b"" and moved.accepted  # (it had written all of the handshake's answers)
    assert handler.vhost.queue("q") is not None  # the deciding method, handled after the check
    # what the driver writes next: its answer (a method frame on channel 1: queue.declare-ok, 50/11)
    assert [f[:3] + f[7:11] for f in split_frames(conn.data_to_send())] == [b"\x01\x00\x01\x00\x32\x00\x0b"]


def test_a_replay_fed_at_once_is_refused() -> None:
    """0-9-1's handshake wants the handler's answer to ``start-ok`` before ``tune-ok``:
    the whole input fed in one piece fails the replay, which is then refused."""
    inbound, written = _recorded()
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    assert replay(moved, conn, handler.handle, decides_move, fail=partial(replay_failed, handler)) is None
    assert moved.decided.is_set() and not moved.accepted


@pytest.mark.parametrize("heartbeats", [("server",), ("client",), ("server", "client")])
def test_heartbeats_before_the_deciding_method_do_not_stop_the_move(heartbeats: tuple[str, ...]) -> None:
    """A heartbeat the first worker wrote (its timer) is not one a replay writes: it is left
    out of the comparison (the owner's engine sends its own); one the client sent is fed
    like any frame. Either way the replay is taken and answers the method."""
    inbound, written = _recorded(heartbeats)
    assert (HEARTBEAT in written) == ("server" in heartbeats)
    assert (HEARTBEAT in inbound) == ("client" in heartbeats)
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    rest = replay(moved, conn, handler.handle, decides_move, frames, as_compared, fail=partial(replay_failed, handler))
    assert rest == b"" and moved.accepted
    assert handler.vhost.queue("q") is not None
    assert [f[:3] + f[7:11] for f in split_frames(conn.data_to_send())] == [b"\x01\x00\x01\x00\x32\x00\x0b"]


def test_as_compared_leaves_out_heartbeat_frames_only() -> None:
    body = b"\x03\x00\x01\x00\x00\x00\x08" + HEARTBEAT + b"\xce"  # a body frame whose payload looks like one
    data = CHANNEL_OPEN + HEARTBEAT + body + HEARTBEAT + CHANNEL_OPEN
    assert as_compared(data) == CHANNEL_OPEN + body + CHANNEL_OPEN
    assert as_compared(b"") == b""


def _declare_ok(queue: bytes, messages: int, consumers: int) -> bytes:
    payload = b"\x00\x32\x00\x0b" + bytes((len(queue),)) + queue + messages.to_bytes(4, "big") + consumers.to_bytes(4, "big")
    return b"\x01\x00\x01" + len(payload).to_bytes(4, "big") + payload + b"\xce"


def test_as_compared_zeroes_a_declare_oks_counts_and_nothing_else() -> None:
    body = b"\x03\x00\x01\x00\x00\x00\x0e" + _declare_ok(b"q", 5, 1)[7:-1] + b"\xce"  # a body that looks like one
    counted = CHANNEL_OPEN + _declare_ok(b"q", 5, 1) + HEARTBEAT + body
    assert as_compared(counted) == CHANNEL_OPEN + _declare_ok(b"q", 0, 0) + body
    assert as_compared(counted) == as_compared(CHANNEL_OPEN + _declare_ok(b"q", 0, 2) + body)
    assert as_compared(_declare_ok(b"q", 5, 1)) != as_compared(_declare_ok(b"r", 5, 1))  # the name is compared


def _recorded_publisher(broker: Broker) -> tuple[bytes, bytes]:
    """A client that confirms, declares queue "q" and, once answered, publishes "m" to it
    through the default exchange, on ``broker``: all it sent and all the broker wrote
    before the publish (the deciding event with ``publishers_apart``) was handled."""
    pair = Recorded(broker)
    pair.pump()
    pair.client.open_channel(1)
    pair.pump()
    pair.client.send_method(1, m.ConfirmSelect())
    pair.client.send_method(1, m.QueueDeclare(queue="q", durable=True))
    pair.pump()
    pair.client.send_content(1, m.BasicPublish(exchange="", routing_key="q"), m.BasicProperties(), b"m")
    return bytes(pair.sent + pair.client.data_to_send()), bytes(pair.written)


@pytest.mark.parametrize("owner", ["here", "elsewhere"])
def test_with_publishers_apart_a_publisher_that_declared_first_is_replayed_with_the_declaration_answered_from_metadata(
    owner: str,
) -> None:
    """The first worker answered the declaration with the queue's counts then (2 messages).
    The worker that takes the connection has the queue in its metadata and answers the
    replayed declaration from it at once, not sent: compared without the counts, the
    replay is taken and the publish handled. That worker is the one after the owner
    ("elsewhere": asked as it is, the declaration would wait for the owner's answer and
    the replay would not be taken), or in a test of one broker the queue's own ("here":
    queued and confirmed at once)."""
    first = Broker(BrokerConfig())
    q = first.default.declare_queue("q", durable=True)
    for body in (b"1", b"2"):
        q.publish(QueuedMessage(body), lambda: None)
    inbound, written = _recorded_publisher(first)
    assert _declare_ok(b"q", 2, 0) in written
    conn, handler = _fresh()
    links = {0: RemoteNodes("to-0")}
    if owner == "elsewhere":  # this is worker 1; worker 0 owns "q"
        handler.broker.placement = Placement(Ownership(2, 1, {("/", "q"): 0}), links)
    there = handler.vhost.declare_queue("q", durable=True)  # (elsewhere: this worker's copy of the metadata)
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    handler.ctx.replaying = moved.replaying
    decides = partial(decides_move, apart=True)
    rest = replay(moved, conn, handler.handle, decides, frames, as_compared, fail=partial(replay_failed, handler))
    assert rest == b"" and moved.accepted  # (the declare-ok it wrote is the first worker's: not again)
    assert not moved.replaying() and not handler.ctx.replaying()
    out = [f[:3] + f[7:11] for f in split_frames(conn.data_to_send())]
    if owner == "here":  # what goes out next: the publish's confirm (basic.ack, 60/80), no second declare-ok
        assert there.count == 1 and out == [b"\x01\x00\x01\x00\x3c\x00\x50"]
    else:  # forwarded to the owner (one record in this turn's batch); confirmed once it answers
        remote = links[0].nodes[("/", "q")]
        assert there.count == 0 and out == [] and len(remote._routed.batch) == 1


@pytest.mark.parametrize("there", ["missing", "inequivalent"])
def test_with_publishers_apart_a_declaration_the_metadata_here_cannot_answer_is_not_taken(there: str) -> None:
    """The queue not in this worker's metadata (not yet), or not as declared: the replayed
    declaration closes its channel instead of answering, the comparison fails and the
    connection stays on the worker that accepted it."""
    first = Broker(BrokerConfig())
    first.default.declare_queue("q", durable=True)
    inbound, written = _recorded_publisher(first)
    conn, handler = _fresh()
    if there == "inequivalent":
        handler.vhost.declare_queue("q", durable=False)
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    handler.ctx.replaying = moved.replaying
    decides = partial(decides_move, apart=True)
    assert replay(moved, conn, handler.handle, decides, frames, as_compared, fail=partial(replay_failed, handler)) is None
    assert moved.decided.is_set() and not moved.accepted
    assert handler.vhost.queue("q") is None or handler.vhost.queue("q").count == 0  # the publish not handled


def test_a_replay_that_raises_once_taken_closes_the_connection_541() -> None:
    """The deciding method's handling raises on the worker that took the connection: it
    sends ``connection.close`` 541 (it served on before, the client waiting for its answer)."""
    inbound, written = _recorded()
    conn, handler = _fresh()

    def handle(events: list[Any]) -> None:
        if any(decides_move(e) for e in events):
            raise RuntimeError("injected")
        handler.handle(events)

    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    rest = replay(moved, conn, handle, decides_move, frames, as_compared, fail=partial(replay_failed, handler))
    assert rest == b"" and moved.accepted
    out = list(split_frames(conn.data_to_send()))
    # connection.close (10/50) on channel 0, reply code 541, then its text
    assert [f[:3] + f[7:13] for f in out] == [b"\x01\x00\x00\x00\x0a\x00\x32\x02\x1d"]
    text = b"INTERNAL_ERROR - the replay of this connection failed after it moved: RuntimeError: injected"
    assert out[0][13:14] == bytes((len(text),)) and out[0][14 : 14 + len(text)] == text
