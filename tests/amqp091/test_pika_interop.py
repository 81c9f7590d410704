"""pika's blocking client against the engine over a real socket (127.0.0.1).

``MiniBroker`` is test glue, not a broker: one thread, one queue table, just
enough of ``queue``/``basic``/``confirm`` to show that a real 0-9-1 client and
the server-role engine agree on the wire (handshake, tuning, heartbeats,
channels, content over several frames, publisher confirms, get, consume, ack,
channel and connection exceptions, closing).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from typing import Any

import pika
import pika.exceptions
import pytest

from amqp10.amqp091 import (
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionLost,
    ConnectionTuned,
    ContentReceived,
    LoginRequested,
    MethodReceived,
    ReplyCode,
    VirtualHostRequested,
    not_found,
)
from amqp10.amqp091 import methods as m


class MiniBroker:
    """Serves one connection at a time with the server-role engine."""

    def __init__(self, **engine: Any) -> None:
        self.engine_args = engine
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.05)  # accept() wakes up to see ``stop``
        self.queues: dict[str, deque[tuple[bytes, bytes]]] = {}
        self.events: list[Any] = []
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop = True
        self.thread.join(5)
        self.sock.close()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                self._run(conn)

    def _run(self, sock: socket.socket) -> None:
        engine = Connection("server", **self.engine_args)
        sock.settimeout(0.05)
        consumers: dict[str, tuple[int, str]] = {}
        confirms: dict[int, int] = {}
        tags = 0
        while True:
            now = time.monotonic()
            engine.tick(now)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                data = None
            except OSError:
                data = b""
            events = engine.poll_events() if data is None else engine.receive_data(data)
            for e in events:
                self.events.append(e)
                if isinstance(e, LoginRequested):
                    if e.password == "guest":
                        engine.accept_login()
                    else:
                        engine.reject_login()
                elif isinstance(e, VirtualHostRequested):
                    if e.virtual_host == "/":
                        engine.accept_open()
                    else:
                        engine.refuse_open(ReplyCode.NOT_ALLOWED)
                elif isinstance(e, MethodReceived):
                    ch, meth = e.channel, e.method
                    if isinstance(meth, m.QueueDeclare):
                        if meth.passive and meth.queue not in self.queues:
                            engine.close_channel(
                                ch, 404, not_found("queue", meth.queue, "/"), 50, 10
                            )
                            continue
                        self.queues.setdefault(meth.queue, deque())
                        engine.send_method(
                            ch,
                            m.QueueDeclareOk(
                                queue=meth.queue, message_count=len(self.queues[meth.queue])
                            ),
                        )
                    elif isinstance(meth, m.ConfirmSelect):
                        confirms[ch] = 0
                        engine.send_method(ch, m.ConfirmSelectOk())
                    elif isinstance(meth, m.BasicQos):
                        engine.send_method(ch, m.BasicQosOk())
                    elif isinstance(meth, m.BasicGet):
                        q = self.queues.get(meth.queue)
                        if q:
                            props, body = q.popleft()
                            tags += 1
                            engine.send_content(
                                ch,
                                m.BasicGetOk(
                                    delivery_tag=tags, routing_key=meth.queue, message_count=len(q)
                                ),
                                props,
                                body,
                            )
                        else:
                            engine.send_method(ch, m.BasicGetEmpty())
                    elif isinstance(meth, m.BasicConsume):
                        tag = meth.consumer_tag or f"ctag-{len(consumers) + 1}"
                        consumers[tag] = (ch, meth.queue)
                        engine.send_method(ch, m.BasicConsumeOk(consumer_tag=tag))
                    elif isinstance(meth, m.BasicCancel):
                        consumers.pop(meth.consumer_tag, None)
                        engine.send_method(ch, m.BasicCancelOk(consumer_tag=meth.consumer_tag))
                elif isinstance(e, ContentReceived):
                    assert isinstance(e.method, m.BasicPublish)
                    self.queues.setdefault(e.method.routing_key, deque()).append(
                        (e.raw_properties, e.body)
                    )
                    if e.channel in confirms:
                        confirms[e.channel] += 1
                        engine.send_method(e.channel, m.BasicAck(delivery_tag=confirms[e.channel]))
            # deliver to consumers
            if engine.state.name == "OPEN":
                for tag, (ch, queue) in list(consumers.items()):
                    q = self.queues.get(queue)
                    while q and ch in engine.channels:
                        props, body = q.popleft()
                        tags += 1
                        engine.send_content(
                            ch,
                            m.BasicDeliver(consumer_tag=tag, delivery_tag=tags, routing_key=queue),
                            props,
                            body,
                        )
            out = engine.data_to_send()
            if out:
                try:
                    sock.sendall(out)
                except OSError:
                    return
            if engine.state.name == "CLOSED" or data == b"":
                return


@pytest.fixture
def broker() -> Any:
    b = MiniBroker()
    yield b
    b.close()


def params(broker: MiniBroker, **kw: Any) -> pika.ConnectionParameters:
    kw.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
    return pika.ConnectionParameters(
        "127.0.0.1", broker.port, connection_attempts=1, socket_timeout=5, **kw
    )


def test_publish_confirm_get_consume_ack(broker: MiniBroker) -> None:
    conn = pika.BlockingConnection(params(broker, frame_max=4096))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("q")
    body = bytes(range(256)) * 50  # 12800 bytes: several body frames at frame-max 4096
    ch.basic_publish(
        "",
        "q",
        body,
        pika.BasicProperties(content_type="t/x", headers={"a": 1, "b": "s"}, delivery_mode=2),
    )
    method, props, got = ch.basic_get("q", auto_ack=False)
    assert got == body
    assert (props.content_type, props.headers, props.delivery_mode) == (
        "t/x",
        {"a": 1, "b": "s"},
        2,
    )
    ch.basic_ack(method.delivery_tag)
    assert ch.basic_get("q") == (None, None, None)
    for i in range(3):
        ch.basic_publish("", "q", f"m{i}".encode())
    received = []
    for method, _props, got in ch.consume("q", inactivity_timeout=2):
        if method is None:
            break
        received.append(got)
        ch.basic_ack(method.delivery_tag)
        if len(received) == 3:
            break
    assert received == [b"m0", b"m1", b"m2"]
    ch.cancel()
    conn.close()
    time.sleep(0.1)
    closed = [e for e in broker.events if isinstance(e, ConnectionClosed)]
    assert closed and closed[0].by_peer and closed[0].reply_code == 200
    server_side = [e for e in broker.events if isinstance(e, ConnectionFailed | ConnectionLost)]
    assert not server_side, server_side
    acks = [
        e
        for e in broker.events
        if isinstance(e, MethodReceived) and isinstance(e.method, m.BasicAck)
    ]
    assert len(acks) == 4


def test_channel_exception_reaches_pika_with_rabbitmq_text(broker: MiniBroker) -> None:
    conn = pika.BlockingConnection(params(broker))
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("missing", passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
    assert conn.is_open
    ch2 = conn.channel()
    ch2.queue_declare("exists")
    conn.close()


def test_bad_password_and_vhost(broker: MiniBroker) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params(broker, credentials=pika.PlainCredentials("guest", "nope")))
    assert "ACCESS_REFUSED" in str(info.value)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as denied:
        pika.BlockingConnection(params(broker, virtual_host="/nope"))
    assert "(530) 'NOT_ALLOWED - vhost /nope not found'" in str(denied.value)


def test_heartbeats_with_pika(broker: MiniBroker) -> None:
    conn = pika.BlockingConnection(params(broker, heartbeat=1))
    ch = conn.channel()
    for _ in range(6):  # 3 s of quiet from the application: heartbeats keep it open
        conn.process_data_events(time_limit=0.5)
    ch.queue_declare("hb")
    assert conn.is_open
    conn.close()
    assert not [e for e in broker.events if isinstance(e, ConnectionLost)]
    (tuned,) = [e for e in broker.events if isinstance(e, ConnectionTuned)]
    assert tuned.heartbeat == 1
