"""Fuzzing the engine: random and mutated byte streams from a hostile client.

One invariant (as for the 1.0 engine): whatever the peer sends, ``receive_data``
returns events and, if the input is bad, closes cleanly — a ``connection.close``
with a hard-error reply code (never INTERNAL_ERROR, the engine's catch-all for its
own bugs) reported as ``ConnectionFailed``, or a channel close with a soft one.
Never a Python exception, never a wedged engine (after a failure it is closing or
closed, and the end of the stream ends it), and everything it writes is
well-formed frames.
"""

from __future__ import annotations

import random

import hypothesis.strategies as st
from hypothesis import given

from amqp10.amqp091 import (
    AMQP_0_9_1,
    BasicProperties,
    ChannelClosed,
    Connection,
    ConnectionFailed,
    ConnectionState,
    Event,
    ReplyCode,
)
from amqp10.amqp091 import methods as m
from amqp10.amqp091.methods import HARD_ERRORS, SOFT_ERRORS

from .pair import Pair, frames, method_frame


def _client_stream() -> bytes:
    """A valid client's bytes: handshake, channels, methods, multi-frame content, closes."""
    pair = Pair(client={"frame_max": 4096}).open()
    a = pair.open_channel()
    b = pair.open_channel()
    pair.client.send_method(
        a, m.QueueDeclare(queue="q", arguments={"x-max-length": 10, "k": [1, "s"]})
    )
    pair.client.send_method(a, m.BasicQos(prefetch_count=10))
    pair.client.send_content(
        a,
        m.BasicPublish(routing_key="q"),
        BasicProperties(headers={"h": True}, priority=1),
        b"x" * 9000,
    )
    pair.client.send_content(b, m.BasicPublish(routing_key="q"), BasicProperties(), b"")
    pair.client.send_method(b, m.BasicAck(delivery_tag=3, multiple=True))
    pair.client.flow(b, active=True)  # (active=False: a server refuses it, as RabbitMQ)
    pair.client.close_channel(b)
    pair.client.send_method(a, m.ConfirmSelect())
    pair.pump()
    pair.client.close()
    pair.pump()
    return b"".join(d for way, d in pair.wire if way == "c>s")


STREAM = _client_stream()
# its frame sizes: fed piece by piece at these boundaries, the engine is answered between
# the handshake's steps as a broker answers (a real client waits for them)
PIECES = [8] + [len(f.payload) + 8 for f in frames(STREAM)]


def _feed(data: bytes, chunks: list[int], server: Connection | None = None) -> Connection:
    server = server or Connection("server")
    events: list[Event] = []
    pos = 0
    for n in [*chunks, len(data)]:
        piece = data[pos : pos + max(n, 1)]
        pos += len(piece)
        events += server.receive_data(piece)
        # answer the handshake as a broker would
        for e in events:
            if (
                type(e).__name__ == "LoginRequested"
                and server.state is ConnectionState.AUTHENTICATING
            ):
                server.accept_login()
            if (
                type(e).__name__ == "VirtualHostRequested"
                and server.state is ConnectionState.OPEN_RCVD
            ):
                server.accept_open()
        if pos >= len(data):
            break
    _check(server, events)
    return server


def _check(server: Connection, events: list[Event]) -> None:
    """The invariant, for either role (``server`` names the engine under test)."""
    failed = False
    for e in events:
        assert isinstance(e, Event)
        if isinstance(e, ConnectionFailed):
            failed = True
            assert e.reply_code in HARD_ERRORS, e
            assert e.reply_code != ReplyCode.INTERNAL_ERROR, e
            assert e.reply_text.startswith(ReplyCode(e.reply_code).name + " - "), e
        if isinstance(e, ChannelClosed) and not e.by_peer:
            assert e.reply_code in SOFT_ERRORS, e
    if failed:
        assert server.state in (
            ConnectionState.CLOSE_SENT,
            ConnectionState.CLOSED,
            ConnectionState.CLOSE_RCVD,
        )
    out = server.data_to_send()
    if out:
        frames(out[8:] if server.state is ConnectionState.CLOSED and out[:4] == b"AMQP" else out)
    server.receive_data(b"")
    assert server.state is ConnectionState.CLOSED


def test_the_valid_stream_is_valid() -> None:
    server = Connection("server")
    _feed(STREAM, PIECES, server)
    assert server.close_received is not None
    assert server.close_received.reply_code == 200


@given(st.binary(max_size=400), st.lists(st.integers(1, 50), max_size=10))
def test_random_bytes_after_the_header(data: bytes, chunks: list[int]) -> None:
    _feed(AMQP_0_9_1.header + data, chunks)


@given(st.integers(0, len(STREAM)), st.binary(max_size=200))
def test_random_bytes_mid_session(cut: int, data: bytes) -> None:
    _feed(STREAM[:cut] + data, PIECES)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(STREAM)
    rnd = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 6))):
        op = rnd.choice(("flip", "insert", "delete", "byte"))
        pos = rnd.randrange(8, len(data))
        if op == "flip":
            data[pos] ^= 1 << rnd.randrange(8)
        elif op == "insert":
            data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 9)))
        elif op == "delete":
            del data[pos : pos + rnd.randrange(1, 9)]
        else:
            data[pos] = rnd.choice((0, 0xCE, 0xFF, 1, 2, 3, 8))
    return bytes(data)


@given(mutated())
def test_mutated_valid_streams(data: bytes) -> None:
    _feed(data, PIECES)


def _open_client() -> Connection:
    client = Connection("client")
    client.receive_data(
        b"".join(
            f
            for f in (
                method_frame(0, m.ConnectionStart(mechanisms=b"PLAIN")),
                method_frame(0, m.ConnectionTune(frame_max=4096)),
                method_frame(0, m.ConnectionOpenOk()),
            )
        )
    )
    client.open_channel()
    client.receive_data(method_frame(1, m.ChannelOpenOk()))
    client.data_to_send()
    return client


@given(st.binary(max_size=400))
def test_random_bytes_into_an_open_client(data: bytes) -> None:
    """The client role holds the same invariant against a hostile server."""
    client = _open_client()
    _check(client, client.receive_data(data))


@given(st.binary(max_size=400))
def test_random_bytes_into_a_client_waiting_for_start(data: bytes) -> None:
    client = Connection("client")
    client.data_to_send()
    _check(client, client.receive_data(data))
