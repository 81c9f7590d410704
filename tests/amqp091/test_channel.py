"""Channels: lifecycle, content assembly over frames, channel and connection exceptions."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from amqp10.amqp091 import (
    BasicProperties,
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ChannelState,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionState,
    ContentReceived,
    IllegalStateError,
    MethodReceived,
    ReplyCode,
    events,
    not_found,
)
from amqp10.amqp091 import methods as m
from amqp10.amqp091.errors import reply_text
from amqp10.amqp091.framing import FRAME_BODY, FRAME_HEADER

from .pair import Pair, frames, method_frame, raw_frame


def of(events: list[Any], tp: type) -> list[Any]:
    return [e for e in events if isinstance(e, tp)]


def test_channel_lifecycle(pair: Pair) -> None:
    pair.open()
    n = pair.client.open_channel()
    s, c = pair.pump()
    assert of(s, ChannelOpened)[0].channel == n == 1
    assert of(c, ChannelOpened)[0].channel == 1
    assert pair.server.channels == {1: ChannelState.OPEN} == pair.client.channels
    assert pair.client.open_channel() == 2
    pair.pump()
    pair.client.close_channel(1)
    s, c = pair.pump()
    (closed,) = of(s, ChannelClosed)
    assert (closed.channel, closed.reply_code, closed.by_peer) == (1, 200, True)
    assert not of(c, ChannelClosed)[0].by_peer
    assert pair.server.channels == {2: ChannelState.OPEN}
    assert pair.client.open_channel() == 1  # the number is free again


def test_publish_over_several_frames(pair: Pair) -> None:
    pair = Pair(chunk=pair.chunk, client={"frame_max": 4096}).open()
    ch = pair.open_channel()
    body = bytes(range(256)) * 40  # 10240 bytes: three body frames at frame-max 4096
    props = BasicProperties(
        content_type="application/octet-stream", headers={"x": 1}, delivery_mode=2
    )
    pair.client.send_content(
        ch, m.BasicPublish(exchange="ex", routing_key="rk", mandatory=True), props, body
    )
    s, _ = pair.pump()
    (content,) = of(s, ContentReceived)
    assert content.channel == ch
    assert content.method == m.BasicPublish(exchange="ex", routing_key="rk", mandatory=True)
    assert content.properties == props
    assert content.body == body
    wire = [f for f in pair.sent("c>s") if f.type == FRAME_BODY]
    assert [len(f.payload) for f in wire] == [4088, 4088, 2064]
    # the raw properties pass on unchanged
    pair.server.send_content(
        ch, m.BasicDeliver(consumer_tag="c", delivery_tag=1), content.raw_properties, body
    )
    _, c = pair.pump()
    (delivered,) = of(c, ContentReceived)
    assert (delivered.properties, delivered.body) == (props, body)


def test_empty_body_and_interleaved_channels(pair: Pair) -> None:
    pair.open()
    a, b = pair.open_channel(), pair.open_channel()
    pair.client.send_content(a, m.BasicPublish(routing_key="a"), BasicProperties(), b"")
    pair.client.send_content(b, m.BasicPublish(routing_key="b"), BasicProperties(), b"x" * 10)
    s, _ = pair.pump()
    got = [(e.channel, e.method.routing_key, e.body) for e in of(s, ContentReceived)]
    assert got == [(a, "a", b""), (b, "b", b"x" * 10)]


def test_methods_both_ways(pair: Pair) -> None:
    pair.open()
    ch = pair.open_channel()
    pair.client.send_method(
        ch, m.QueueDeclare(queue="q", durable=True, arguments={"x-max-priority": 10})
    )
    s, _ = pair.pump()
    (req,) = of(s, MethodReceived)
    assert req.method == m.QueueDeclare(queue="q", durable=True, arguments={"x-max-priority": 10})
    pair.server.send_method(ch, m.QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    pair.server.send_method(ch, m.BasicAck(delivery_tag=5, multiple=True))  # a publisher confirm
    pair.server.send_method(ch, m.BasicNack(delivery_tag=6))
    _, c = pair.pump()
    assert [type(e.method) for e in of(c, MethodReceived)] == [
        m.QueueDeclareOk,
        m.BasicAck,
        m.BasicNack,
    ]


def test_channel_exception_closes_only_the_channel(pair: Pair) -> None:
    pair.open()
    ch = pair.open_channel()
    other = pair.open_channel()
    pair.client.send_method(ch, m.QueueDeclare(queue="x", passive=True))
    pair.pump()
    text = not_found("queue", "x", "/")
    assert text == "NOT_FOUND - no queue 'x' in vhost '/'"
    pair.server.close_channel(ch, ReplyCode.NOT_FOUND, text, 50, 10)
    # the client's frames on the closing channel are dropped until its close-ok
    pair.client.send_method(ch, m.BasicQos(prefetch_count=1))
    s, c = pair.pump()
    assert not of(s, MethodReceived)
    (closed,) = of(c, ChannelClosed)
    assert (closed.channel, closed.reply_code, closed.reply_text, closed.class_id, closed.method_id) == (
        ch, 404, text, 50, 10,
    )  # fmt: skip
    assert of(s, ChannelClosed)[0].reply_code == 404
    assert pair.server.state is ConnectionState.OPEN
    assert pair.server.channels == {other: ChannelState.OPEN}


def test_reply_text_forms() -> None:
    assert reply_text(ReplyCode.PRECONDITION_FAILED, "inequivalent arg 'durable'") == (
        "PRECONDITION_FAILED - inequivalent arg 'durable'"
    )
    assert reply_text(200, "") == "OK"


def test_flow(pair: Pair) -> None:
    pair.open()
    ch = pair.open_channel()
    pair.server.flow(ch, active=False)  # a server pauses a client's publishing
    s, c = pair.pump()
    assert c == [ChannelFlowChanged(channel=ch, active=False)]
    assert s == [MethodReceived(channel=ch, method=m.ChannelFlowOk(active=False))]
    events = pair.server.receive_data(method_frame(ch, m.ChannelFlow(active=True)))
    assert events == [ChannelFlowChanged(channel=ch, active=True)]
    assert pair.server.data_to_send() == method_frame(ch, m.ChannelFlowOk(active=True))


def test_server_refuses_a_clients_flow_false(pair: Pair) -> None:
    """As RabbitMQ 3.3 and later: the connection closes with 540, no flow-ok before it."""
    pair.open()
    ch = pair.open_channel()
    (failed,) = of(pair.server.receive_data(method_frame(ch, m.ChannelFlow(active=False))), ConnectionFailed)
    assert (failed.reply_code, failed.reply_text) == (ReplyCode.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - active=false")
    assert m.ChannelFlowOk.NAME not in repr(pair.client.receive_data(pair.server.data_to_send()))


def test_too_large_message_closes_the_channel() -> None:
    pair = Pair(server={"max_message_size": 100}).open()
    ch = pair.open_channel()
    pair.client.send_content(ch, m.BasicPublish(), BasicProperties(), b"x" * 101)
    s, c = pair.pump()
    (closed,) = of(c, ChannelClosed)
    assert closed.reply_code == ReplyCode.PRECONDITION_FAILED
    assert (
        closed.reply_text
        == "PRECONDITION_FAILED - message size 101 is larger than configured max size 100"
    )
    assert (closed.class_id, closed.method_id) == (60, 40)
    assert not of(s, ContentReceived)
    assert pair.server.state is ConnectionState.OPEN


def _header(body_size: int, class_id: int = 60, props: bytes = b"\x00\x00") -> bytes:
    return class_id.to_bytes(2, "big") + b"\x00\x00" + body_size.to_bytes(8, "big") + props


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        # a method in the middle of a content
        ([method_frame(1, m.BasicPublish()), method_frame(1, m.BasicQos())], ReplyCode.UNEXPECTED_FRAME),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_HEADER, 1, _header(5)), method_frame(1, m.BasicQos())],
         ReplyCode.UNEXPECTED_FRAME),
        # a header or body without its method, a header of another class
        ([raw_frame(FRAME_HEADER, 1, _header(0))], ReplyCode.UNEXPECTED_FRAME),
        ([raw_frame(FRAME_BODY, 1, b"x")], ReplyCode.UNEXPECTED_FRAME),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_HEADER, 1, _header(0, class_id=50))],
         ReplyCode.UNEXPECTED_FRAME),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_BODY, 1, b"x")], ReplyCode.UNEXPECTED_FRAME),
        # more body than announced; malformed properties; content on channel 0
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_HEADER, 1, _header(1)), raw_frame(FRAME_BODY, 1, b"xy")],
         ReplyCode.FRAME_ERROR),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_HEADER, 1, _header(0, props=b"\x00\x02"))],
         ReplyCode.SYNTAX_ERROR),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_HEADER, 1, b"\x00")], ReplyCode.FRAME_ERROR),
        ([raw_frame(FRAME_BODY, 0, b"x")], ReplyCode.UNEXPECTED_FRAME),
        # channels: unopened, opened twice
        ([method_frame(7, m.BasicQos())], ReplyCode.CHANNEL_ERROR),
        ([raw_frame(FRAME_HEADER, 7, _header(0))], ReplyCode.CHANNEL_ERROR),
        ([method_frame(1, m.ChannelOpen())], ReplyCode.CHANNEL_ERROR),
        ([method_frame(1, m.ChannelCloseOk())], ReplyCode.COMMAND_INVALID),
        # a method only a server sends
        ([method_frame(1, m.BasicDeliver())], ReplyCode.COMMAND_INVALID),
    ],
)  # fmt: skip
def test_connection_exceptions_on_channels(frames: list[bytes], code: int) -> None:
    pair = Pair().open()
    pair.open_channel()
    events = pair.server.receive_data(b"".join(frames))
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == code, failed
    _, c = pair.pump()
    assert of(c, ConnectionClosed)[0].reply_code == code
    assert pair.server.state is ConnectionState.CLOSED


def test_peer_closes_a_channel_we_are_closing() -> None:
    pair = Pair().open()
    ch = pair.open_channel()
    pair.server.close_channel(ch, 406, "PRECONDITION_FAILED - x")
    pair.client.close_channel(ch)
    s, c = pair.pump()
    assert of(s, ChannelClosed) and of(c, ChannelClosed)
    assert pair.server.channels == {} == pair.client.channels


def test_send_misuse() -> None:
    pair = Pair().open()
    ch = pair.open_channel()
    with pytest.raises(ValueError, match="send_content"):
        pair.server.send_method(ch, m.BasicDeliver())
    with pytest.raises(ValueError, match="send_method"):
        pair.server.send_content(ch, m.BasicAck(), BasicProperties(), b"")
    with pytest.raises(ValueError, match="own call"):
        pair.server.send_method(ch, m.ChannelFlow())
    with pytest.raises(ValueError, match="does not send"):
        pair.server.send_method(ch, m.BasicGet())
    with pytest.raises(IllegalStateError):
        pair.server.send_method(9, m.BasicQosOk())
    pair.server.close_channel(ch)
    with pytest.raises(IllegalStateError):
        pair.server.send_method(ch, m.BasicQosOk())
    with pytest.raises(ValueError):  # a frame beyond frame-max
        pair.client.send_method(ch, m.QueueDeclare(arguments={"x": "y" * 200_000}))
    assert pair.client.data_to_send() == b""


def test_0_8_consume_without_arguments() -> None:
    from amqp10.amqp091 import AMQP_0_8

    pair = Pair(server={"dialect": AMQP_0_8}, client={"dialect": AMQP_0_8}).open()
    ch = pair.open_channel()
    pair.client.send_method(ch, m.BasicConsume(queue="q", consumer_tag="t", no_ack=True))
    s, _ = pair.pump()
    (req,) = of(s, MethodReceived)
    assert req.method == m.BasicConsume(queue="q", consumer_tag="t", no_ack=True)
    with pytest.raises(ValueError, match="does not exist"):
        pair.client.send_method(ch, m.ConfirmSelect())


def test_content_header_beyond_frame_max_is_refused_whole() -> None:
    pair = Pair(client={"frame_max": 4096}).open()
    ch = pair.open_channel()
    with pytest.raises(ValueError, match="frame-max"):
        pair.client.send_content(
            ch, m.BasicPublish(), BasicProperties(headers={"x": "y" * 5000}), b"body"
        )
    assert pair.client.data_to_send() == b""  # nothing half-written


@pytest.mark.parametrize("body", [b"", b"x" * 100, b"y" * 20_000])
def test_encoded_content_is_the_same_bytes_as_content(body: bytes) -> None:
    pair = Pair(server={"frame_max": 4096}).open()
    ch = pair.open_channel()
    props = BasicProperties(content_type="text/plain", headers={"a": 1})
    raw = bytearray()
    props.encode(raw)
    deliver = m.BasicDeliver(
        consumer_tag="ctag", delivery_tag=7, redelivered=True, exchange="x", routing_key="rk"
    )
    pair.server.send_content(ch, deliver, bytes(raw), body)
    expected = pair.server.data_to_send()
    arguments = bytearray()
    deliver.encode(arguments)
    pair.server.send_encoded_content(ch, m.BasicDeliver, bytes(arguments), bytes(raw), body)
    assert pair.server.data_to_send() == expected


def test_encoded_content_misuse() -> None:
    from amqp10.amqp091 import AMQP_0_8

    pair = Pair().open()
    ch = pair.open_channel()
    with pytest.raises(ValueError, match="send_method"):
        pair.server.send_encoded_content(ch, m.BasicQosOk, b"", b"\x00\x00", b"")
    with pytest.raises(ValueError, match="does not send"):
        pair.server.send_encoded_content(ch, m.BasicPublish, b"\x00" * 5, b"\x00\x00", b"")
    with pytest.raises(ValueError, match="frame-max"):
        pair.server.send_encoded_content(ch, m.BasicDeliver, b"\x00" * 200_000, b"\x00\x00", b"")
    with pytest.raises(IllegalStateError):
        pair.server.send_encoded_content(9, m.BasicDeliver, b"", b"\x00\x00", b"")
    assert pair.server.data_to_send() == b""
    assert AMQP_0_8.plain_ids(m.BasicDeliver) is not None  # same layout: encoded works
    assert AMQP_0_8.plain_ids(m.ChannelOpenOk) is None  # 0-8 lays it out otherwise
    assert AMQP_0_8.plain_ids(m.ConfirmSelect) is None  # 0-8 lacks it


def test_encoded_content_checks_the_states_on_every_send() -> None:
    """The method's checks are made once a connection (send_encoded_content keeps its ids):
    the connection's and the channel's states are still checked on each send."""
    pair = Pair().open()
    ch = pair.open_channel()
    args = b"\x01c" + bytes(9) + b"\x00\x01q"  # consumer tag "c", tag 0, not redelivered, "", "q"
    pair.server.send_encoded_content(ch, m.BasicDeliver, args, b"\x00\x00", b"x")
    (got,) = of(pair.client.receive_data(pair.server.data_to_send()), ContentReceived)
    assert (got.method.consumer_tag, got.method.routing_key, got.body) == ("c", "q", b"x")
    with pytest.raises(ValueError, match="does not send"):  # the type's checks: per type
        pair.server.send_encoded_content(ch, m.BasicPublish, b"\x00" * 5, b"\x00\x00", b"")
    with pytest.raises(IllegalStateError, match="channel 9 is not open"):
        pair.server.send_encoded_content(9, m.BasicDeliver, args, b"\x00\x00", b"x")
    pair.server.close_channel(ch)
    sent = pair.server.data_to_send()
    with pytest.raises(IllegalStateError, match="CLOSING"):
        pair.server.send_encoded_content(ch, m.BasicDeliver, args, b"\x00\x00", b"x")
    pair.server.close()
    with pytest.raises(IllegalStateError, match="not OPEN"):
        pair.server.send_encoded_content(ch, m.BasicDeliver, args, b"\x00\x00", b"x")
    assert m.BasicDeliver.NAME not in repr(frames(sent + pair.server.data_to_send()))


@pytest.mark.parametrize(
    ("frames_after", "code"),
    [
        ([raw_frame(FRAME_BODY, 1, b"x")], ReplyCode.UNEXPECTED_FRAME),
        ([raw_frame(FRAME_HEADER, 1, _header(1))], ReplyCode.UNEXPECTED_FRAME),
        ([method_frame(1, m.BasicPublish()), method_frame(1, m.BasicPublish())], ReplyCode.UNEXPECTED_FRAME),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_BODY, 1, b"x")], ReplyCode.UNEXPECTED_FRAME),
        ([method_frame(1, m.BasicPublish()), raw_frame(FRAME_HEADER, 1, _header(1)),
          raw_frame(FRAME_HEADER, 1, _header(1))], ReplyCode.UNEXPECTED_FRAME),
        ([raw_frame(FRAME_HEADER, 0, _header(1))], ReplyCode.UNEXPECTED_FRAME),
        ([raw_frame(FRAME_BODY, 7, b"x")], ReplyCode.CHANNEL_ERROR),
    ],
)  # fmt: skip
def test_content_errors_after_a_whole_message(frames_after: list[bytes], code: int) -> None:
    """A content frame out of turn after a message assembled whole (the usual path) is the
    same connection exception as on a fresh channel."""
    pair = Pair().open()
    pair.open_channel()
    whole = [method_frame(1, m.BasicPublish(routing_key="q")), raw_frame(FRAME_HEADER, 1, _header(2)),
             raw_frame(FRAME_BODY, 1, b"a"), raw_frame(FRAME_BODY, 1, b"b")]  # fmt: skip
    events = pair.server.receive_data(b"".join(whole + frames_after))
    (got,) = of(events, ContentReceived)
    assert (got.method.routing_key, got.body) == ("q", b"ab")
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == code, failed
    assert pair.server.state is ConnectionState.CLOSE_SENT  # (its close waits for the close-ok)


def test_content_on_a_channel_we_close_is_discarded() -> None:
    pair = Pair().open()
    ch = pair.open_channel()
    pair.server.close_channel(ch, 406, "PRECONDITION_FAILED - x")
    content = [method_frame(ch, m.BasicPublish()), raw_frame(FRAME_HEADER, ch, _header(1)),
               raw_frame(FRAME_BODY, ch, b"x")]  # fmt: skip
    events = pair.server.receive_data(b"".join(content * 2))
    assert events == []
    assert pair.server.channels == {ch: ChannelState.CLOSING}
    assert pair.server.state is ConnectionState.OPEN


@pytest.mark.parametrize("tp", [MethodReceived, ContentReceived])
def test_per_message_events_init_is_written_out(tp: type) -> None:
    """A message's events (publish, deliver, ack) are built by events.py's own ``__init__``,
    not one ``dataclasses`` made by ``exec`` (``<string>``), which stays interpreted in
    the compiled build; taking the same keywords, it keeps the dataclass's behaviour."""
    names = [f.name for f in dataclasses.fields(tp)]
    code = getattr(tp.__init__, "__code__", None)
    if code is not None:  # (compiled: a native slot, without code or signature)
        assert code.co_filename == events.__file__
        assert list(inspect.signature(tp.__init__).parameters)[1:] == names
    sample = {
        "channel": 3,
        "method": m.BasicAck(delivery_tag=7),
        "properties": BasicProperties(content_type="text/plain"),
        "raw_properties": b"\x80\x00\x0atext/plain",
        "body": b"hello",
    }  # (typed: the compiled __init__ checks its arguments' types)
    values = {name: sample[name] for name in names}
    e = tp(**values)
    assert {name: getattr(e, name) for name in names} == values
    assert e == tp(**values) and e != tp(**{**values, "channel": 9})
    assert repr(e) == f"{tp.__name__}({', '.join(f'{k}={v!r}' for k, v in values.items())})"
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.channel = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        tp(*values.values())  # keyword-only
    with pytest.raises(TypeError):
        tp(**{k: v for k, v in values.items() if k != "channel"})
