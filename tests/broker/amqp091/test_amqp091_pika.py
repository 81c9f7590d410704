"""pika (blocking and select connections) against the broker's 0-9-1 front end, on the 1.0 port.

Each test starts a broker on a free port of 127.0.0.1 and checks what RabbitMQ
would do: the handshake and logins, the AMQ model methods with RabbitMQ's
reply texts, consuming with prefetch and acknowledgements, publisher confirms,
transactions, and messages crossing between 0-9-1 and 1.0 clients.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.select_connection import SelectConnection
from pika.credentials import ExternalCredentials

import amqp10.sync
from amqp10.amqp091 import AMQP_0_8, AMQP_0_9, MethodReceived
from amqp10.amqp091 import ChannelState as ChannelState091
from amqp10.amqp091 import Connection as Connection091
from amqp10.amqp091 import ConnectionState as ConnectionState091
from amqp10.amqp091 import methods as m091
from amqp10.broker.config import Listener
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import RunningBroker, broker_with, with_certificate_user
from tests.client.helpers import Certs, have_openssl, make_certs

T = 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def params(b: RunningBroker, **kw: Any) -> pika.ConnectionParameters:
    kw.setdefault("blocked_connection_timeout", T)
    return pika.ConnectionParameters("127.0.0.1", b.port, **kw)


@pytest.fixture
def conn(broker: RunningBroker) -> Iterator[pika.BlockingConnection]:
    c = pika.BlockingConnection(params(broker))
    yield c
    if c.is_open:
        c.close()


def wait_until(conn: pika.BlockingConnection, done: Any) -> None:
    """Run ``conn``'s I/O until ``done()``, at most T seconds."""
    deadline = time.monotonic() + T
    while not done():
        assert time.monotonic() < deadline, "timed out"
        conn.process_data_events(time_limit=0.05)


def drain(ch: Any, queue: str, n: int, *, ack: bool = True) -> list[tuple[Any, Any, bytes]]:
    got = []
    for method, props, body in ch.consume(queue, inactivity_timeout=T):
        assert method is not None, f"only {len(got)} of {n} messages arrived"
        got.append((method, props, body))
        if ack:
            ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    ch.cancel()
    return got


# -- connection -------------------------------------------------------------------------------------
def test_handshake_properties_and_heartbeat(broker: RunningBroker) -> None:
    c = pika.BlockingConnection(params(broker, heartbeat=5))
    try:
        props = c._impl.server_properties
        caps = props["capabilities"]
        for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify", "exchange_exchange_bindings"):
            assert caps[cap] is True
        assert props["product"] == b"amqp10" or props["product"] == "amqp10"
        assert c._impl.params.heartbeat == 5
        c.process_data_events(time_limit=0.2)
        assert c.is_open
    finally:
        c.close()


def test_unknown_vhost_is_not_allowed(broker: RunningBroker) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params(broker, virtual_host="nowhere"))
    assert "NOT_ALLOWED" in str(info.value)


def test_logins_against_the_users_file(tmp_path: Path, users_file: Path) -> None:
    with broker_with(tmp_path, sasl={"users_file": users_file, "allow_anonymous": False}) as b:
        ok = pika.BlockingConnection(params(b, credentials=pika.PlainCredentials("alice", "secret")))
        assert ok.is_open
        assert [c.handler.user for c in b.service.clients] == ["alice"]
        ok.close()
        for user, password in (("alice", "wrong"), ("guest", "guest"), ("nobody", "x")):
            with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
                pika.BlockingConnection(params(b, credentials=pika.PlainCredentials(user, password)))
            assert "ACCESS_REFUSED" in str(info.value)


def test_password_logins_follow_the_sasl_mechanisms(tmp_path: Path, users_file: Path) -> None:
    # PLAIN not among [sasl] mechanisms: no password login over 0-9-1 either
    sasl = {"users_file": users_file, "allow_anonymous": True, "mechanisms": ["ANONYMOUS"]}
    with broker_with(tmp_path, sasl=sasl) as b:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(params(b, credentials=pika.PlainCredentials("alice", "secret")))
        c = pika.BlockingConnection(params(b))  # guest/guest stays the anonymous login
        assert [cl.handler.user for cl in b.service.clients] == [None]
        c.close()


def test_guest_is_anonymous_when_the_broker_allows_anonymous(broker: RunningBroker) -> None:
    c = pika.BlockingConnection(params(broker))  # guest/guest: pika's default
    assert c.is_open
    assert [cl.handler.user for cl in broker.service.clients] == [None]
    c.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params(broker, credentials=pika.PlainCredentials("guest", "nope")))


@pytest.mark.parametrize(
    "header,reply",
    [
        (b"AMQP\x00\x00\x09\x00", b"AMQP\x00\x00\x09\x01"),  # 0-9-0 (0-10 has a front end of its own now)
        (b"HTTP/1.1", b"AMQP\x00\x00\x09\x01"),
        (b"AMQP\x00\x01\x00\x01", b"AMQP\x00\x01\x00\x00"),  # 1.0 family, another version
    ],
)
def test_unsupported_headers_are_answered_with_ours(broker: RunningBroker, header: bytes, reply: bytes) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=T) as s:
        s.sendall(header)
        data = b""
        while True:
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    assert data == reply


def test_0_9_and_0_8_headers_get_their_own_start(broker: RunningBroker) -> None:
    for header, version in ((b"AMQP\x01\x01\x00\x09", (0, 9)), (b"AMQP\x01\x01\x08\x00", (8, 0))):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=T) as s:
            s.sendall(header)
            data = s.recv(7)
            assert data[0] == 1  # a method frame on channel 0: connection.start
            body = s.recv(8)
            assert (body[4], body[5]) == version


def test_broker_closes_a_connection_on_a_hard_error(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.basic_qos(prefetch_size=10)
    assert (info.value.reply_code, info.value.reply_text) == (540, "NOT_IMPLEMENTED - prefetch_size!=0 (10)")


def test_unknown_exchange_type_closes_the_channel(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare("weird", "no-such-type")
    assert info.value.reply_code == 406  # as RabbitMQ 4 (3.x: 503 on the connection)
    assert conn.is_open


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_tls_listener_serves_0_9_1_with_plain_and_external(tmp_path: Path, certs: Certs, users_file: Path) -> None:
    listener = Listener(
        host="127.0.0.1", port=0, tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca
    )
    users = with_certificate_user(users_file, tmp_path)  # EXTERNAL names a user of the file
    sasl = {"users_file": users, "allow_anonymous": False, "mechanisms": ["EXTERNAL", "PLAIN"]}
    with broker_with(tmp_path, listeners=[listener], sasl=sasl) as b:
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        c = pika.BlockingConnection(
            params(b, ssl_options=pika.SSLOptions(ctx, "localhost"), credentials=pika.PlainCredentials("alice", "secret"))
        )
        c.channel().queue_declare("over-tls")
        c.close()
        ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        c = pika.BlockingConnection(
            params(b, ssl_options=pika.SSLOptions(ctx, "localhost"), credentials=ExternalCredentials())
        )
        assert [cl.handler.user for cl in b.service.clients] == ["CN=amqp10-test-client"]
        c.close()
        # the header is chosen after the TLS handshake: an unknown one gets ours back
        raw = ssl.create_default_context(cafile=str(certs.ca))
        with socket.create_connection(("127.0.0.1", b.port), timeout=T) as s, raw.wrap_socket(
            s, server_hostname="localhost"
        ) as tls:
            tls.sendall(b"AMQP\x00\x00\x09\x00")  # 0-9-0
            assert tls.recv(8) == b"AMQP\x00\x00\x09\x01"
        # and 0-10 is served over TLS too: its front end answers with its own header
        with socket.create_connection(("127.0.0.1", b.port), timeout=T) as s, raw.wrap_socket(
            s, server_hostname="localhost"
        ) as tls:
            tls.sendall(b"AMQP\x01\x01\x00\x0a")
            assert tls.recv(8) == b"AMQP\x01\x01\x00\x0a"


# -- exchanges and queues ---------------------------------------------------------------------------
def test_queue_declare_variants_and_errors(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method
    assert q.queue.startswith("amq.gen-") and q.message_count == 0 and q.consumer_count == 0
    ch.queue_declare("plain", durable=False)
    ch.basic_publish("", "plain", b"x")
    assert ch.queue_declare("plain", passive=True).method.message_count == 1
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("plain", durable=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'plain' in vhost '/': "
        "received 'true' but current is 'false'"
    )
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("missing", passive=True)
    assert (info.value.reply_code, info.value.reply_text) == (404, "NOT_FOUND - no queue 'missing' in vhost '/'")
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("amq.mine")
    assert info.value.reply_code == 403
    ch = conn.channel()
    assert ch.queue_purge("plain").method.message_count == 1
    ch.basic_publish("", "plain", b"y")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_delete("plain", if_empty=True)
    assert info.value.reply_text == "PRECONDITION_FAILED - queue 'plain' in vhost '/' not empty"
    ch = conn.channel()
    assert ch.queue_delete("plain").method.message_count == 1
    assert ch.queue_delete("plain").method.message_count == 0  # gone already: fine, as RabbitMQ


def test_consuming_an_absent_queue_is_refused_and_makes_none(conn: pika.BlockingConnection) -> None:
    """``basic.consume`` of a queue that does not exist closes the channel with 404 and makes
    no queue (at ``workers = 2`` some of these names are the other worker's: its owner
    answers that it has none, as RabbitMQ's pika acceptance suite checks)."""
    for k in range(8):
        name = f"absent-consumed-{k}"
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_consume(name, lambda *a: None)
        assert (info.value.reply_code, info.value.reply_text) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(name, passive=True)
        assert info.value.reply_code == 404


def test_exclusive_queue_is_locked_for_other_connections(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("mine", exclusive=True)
    other = pika.BlockingConnection(params(broker))
    try:
        och = other.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            och.basic_consume("mine", lambda *a: None)
        assert info.value.reply_code == 405
    finally:
        other.close()
    conn.close()
    assert broker.broker.default.queue("mine") is None  # gone with its connection


def test_exchanges_bindings_and_routing(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.exchange_declare("logs", "topic")
    ch.exchange_declare("logs", "topic")  # equivalent: fine
    ch.exchange_declare("all", "fanout", auto_delete=True)
    ch.exchange_bind("all", "logs", "#")
    q1 = ch.queue_declare("", exclusive=True).method.queue
    q2 = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q1, "logs", "app.*.error")
    ch.queue_bind(q2, "all")
    ch.basic_publish("logs", "app.db.error", b"e1")
    ch.basic_publish("logs", "app.db.info", b"i1")
    assert [b for _, _, b in drain(ch, q1, 1)] == [b"e1"]
    assert [b for _, _, b in drain(ch, q2, 2)] == [b"e1", b"i1"]
    ch.queue_unbind(q1, "logs", "app.*.error")
    ch.basic_publish("logs", "app.db.error", b"e2")
    assert ch.queue_declare(q1, passive=True).method.message_count == 0
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare("logs", "direct")
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'logs' in vhost '/': "
        "received 'direct' but current is 'topic'"
    )
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("nowhere", "k", b"x")
        ch.queue_declare("", exclusive=True)  # the error arrives with the next round trip
    assert info.value.reply_text == "NOT_FOUND - no exchange 'nowhere' in vhost '/'"
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare("amq.custom", "direct")
    assert info.value.reply_code == 403
    ch = conn.channel()
    ch.exchange_delete("logs")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.exchange_declare("logs", "topic", passive=True)


def test_headers_exchange(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.headers", arguments={"x-match": "all", "kind": "a"})
    ch.basic_publish("amq.headers", "", b"yes", pika.BasicProperties(headers={"kind": "a"}))
    ch.basic_publish("amq.headers", "", b"no", pika.BasicProperties(headers={"kind": "b"}))
    assert [b for _, _, b in drain(ch, q, 1)] == [b"yes"]


# -- consuming ---------------------------------------------------------------------------------------
def test_get_ack_nack_requeue_and_redelivered(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    method, _, _ = ch.basic_get(q)
    assert method is None  # get-empty
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i, pika.BasicProperties(message_id=f"id{i}", priority=1))
    m0, p0, b0 = ch.basic_get(q)
    assert (b0, p0.message_id, m0.redelivered, m0.message_count) == (b"m0", "id0", False, 2)
    ch.basic_nack(m0.delivery_tag, requeue=True)
    m0, _, b0 = ch.basic_get(q)
    assert (b0, m0.redelivered) == (b"m0", True)
    m1, _, _ = ch.basic_get(q)
    ch.basic_ack(m1.delivery_tag, multiple=True)  # m0 and m1
    m2, _, b2 = ch.basic_get(q)
    ch.basic_reject(m2.delivery_tag, requeue=False)  # dropped (no dead-letter exchange)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_ack(999)
        ch.queue_declare(q, passive=True)
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 999"


def test_prefetch_limits_unacked_deliveries(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=3)
    got: list[Any] = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(m))
    wait_until(conn, lambda: len(got) >= 3)
    conn.process_data_events(time_limit=0.2)  # no more come
    assert len(got) == 3
    ch.basic_ack(got[-1].delivery_tag, multiple=True)
    wait_until(conn, lambda: len(got) >= 6)
    conn.process_data_events(time_limit=0.2)
    assert len(got) == 6
    ch.close()  # the three unacked go back
    ch = conn.channel()
    assert ch.queue_declare(q, passive=True).method.message_count == 7


def test_channel_close_requeues_and_server_cancel_on_delete(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("doomed").method.queue
    cancelled: list[Any] = []
    ch.add_on_cancel_callback(cancelled.append)
    ch.basic_consume(q, lambda *a: None, consumer_tag="t1")
    other = conn.channel()
    other.queue_delete(q)
    wait_until(conn, lambda: cancelled)
    assert cancelled and cancelled[0].method.consumer_tag == "t1"


def test_exclusive_consumer_and_tag_reuse(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    tag = ch.basic_consume(q, lambda *a: None, exclusive=True)
    assert tag.startswith("amq.ctag-") or tag.startswith("ctag")
    other = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        other.basic_consume(q, lambda *a: None)
    assert info.value.reply_code == 403


def test_mandatory_publish_is_returned(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", "no-such-key", b"lost", mandatory=True)


class EngineClient:
    """The 0-9-1 engine in the client role over a socket (dialects pika does not speak)."""

    def __init__(self, port: int, **kw: Any) -> None:
        self.conn = Connection091("client", **kw)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=T)
        self.events: list[Any] = []
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def until(self, done: Any) -> None:
        deadline = time.monotonic() + T
        while not done():
            assert time.monotonic() < deadline, "timed out"
            data = self.sock.recv(65536)
            self.events += self.conn.receive_data(data)
            self.flush()
            if not data:
                return

    def open_channel(self) -> int:
        """Wait for the connection, open a channel, wait for its open-ok: its number."""
        self.until(lambda: self.conn.state is ConnectionState091.OPEN)
        ch = self.conn.open_channel()
        self.flush()
        self.until(lambda: self.conn.channels.get(ch) is ChannelState091.OPEN)
        return ch

    def close(self) -> None:
        self.sock.close()


def test_confirms_of_a_batch_are_one_multiple_ack(broker: RunningBroker) -> None:
    """50 publishes in one write (the engine as a client): fewer than 50 acks, one multiple."""
    c = EngineClient(broker.port)
    try:
        ch = c.open_channel()
        c.conn.send_method(ch, m091.ConfirmSelect())
        for i in range(50):
            c.conn.send_content(ch, m091.BasicPublish(routing_key="batch"), m091.BasicProperties(), b"%d" % i)
        c.flush()

        def acks() -> list[Any]:
            return [e.method for e in c.events if isinstance(e, MethodReceived) and isinstance(e.method, m091.BasicAck)]

        c.until(lambda: bool(acks()) and acks()[-1].delivery_tag == 50)
        assert any(a.multiple for a in acks()) and len(acks()) < 50
    finally:
        c.close()


def test_publisher_confirms_wait_for_the_store(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("durable-q", durable=True)
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", "durable-q", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    assert ch.queue_declare("durable-q", passive=True).method.message_count == 20
    store = broker.service.store
    assert store is not None
    assert sum(1 for m in store.load().messages if m.node.endswith("durable-q")) == 20


def test_transactions_commit_and_rollback(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.tx_select()
    ch.basic_publish("", q, b"t1")
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.tx_commit()
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    ch.basic_publish("", q, b"t2")
    ch.tx_rollback()
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    m, _, _ = ch.basic_get(q)
    ch.basic_ack(m.delivery_tag)
    ch.tx_rollback()  # the ack is undone: the message stays unacknowledged
    ch.basic_recover(requeue=True)
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_text == "PRECONDITION_FAILED - cannot switch from tx to confirm mode"


def test_select_connection(broker: RunningBroker) -> None:
    """pika's asynchronous adapter: declare, publish with confirms, consume, close."""
    got: list[bytes] = []
    acks: list[tuple[int, bool]] = []

    def on_open(c: SelectConnection) -> None:
        c.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        ch.confirm_delivery(lambda frame: acks.append((frame.method.delivery_tag, frame.method.multiple)))
        ch.queue_declare("sel", callback=lambda _f: on_declared(ch))

    def on_declared(ch: Any) -> None:
        for i in range(3):
            ch.basic_publish("", "sel", b"s%d" % i)
        ch.basic_consume("sel", lambda ch, m, p, b: on_message(ch, m, b))

    def on_message(ch: Any, method: Any, body: bytes) -> None:
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == 3:
            ch.connection.close()

    c = SelectConnection(params(broker), on_open_callback=on_open)
    c.ioloop.call_later(T, c.ioloop.stop)
    c.add_on_close_callback(lambda *a: c.ioloop.stop())
    try:
        c.ioloop.start()
    finally:
        c.ioloop.close()  # its wake-up socket pair
    assert got == [b"s0", b"s1", b"s2"]
    acked = set()
    for tag, multiple in acks:
        acked |= set(range(1, tag + 1)) if multiple else {tag}
    assert acked == {1, 2, 3}


# -- across protocols -----------------------------------------------------------------------------
def test_from_0_9_1_to_1_0(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("cross-a")
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers={"n": 7, "s": "str", "x-custom": "ann"},
        delivery_mode=2,
        priority=6,
        correlation_id="corr",
        reply_to="replies",
        expiration="60000",
        message_id="mid-1",
        timestamp=1700000000,
        type="order.created",
        user_id="guest",
        app_id="shop",
    )
    ch.basic_publish("", "cross-a", b'{"a": 1}', props)
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        r = c1.open_receiver("cross-a", credit=1)
        d = r.receive(timeout=T)
        msg = d.message
        d.accept()
    assert msg.body == [b'{"a": 1}'] or msg.body == b'{"a": 1}'
    assert msg.content_type == "application/json" and msg.content_encoding == "utf-8"
    assert msg.application_properties == {"n": 7, "s": "str"}
    assert msg.message_annotations is not None
    annotations = {str(k): v for k, v in msg.message_annotations.items()}
    assert annotations["x-custom"] == "ann"
    assert annotations["x-basic-type"] == "order.created" and annotations["x-basic-app-id"] == "shop"
    assert msg.durable and msg.priority == 6 and msg.ttl == 60
    assert (msg.correlation_id, msg.reply_to, msg.id) == ("corr", "replies", "mid-1")
    assert msg.user_id == b"guest" and msg.subject == "cross-a"
    assert msg.creation_time == 1700000000


def test_from_1_0_to_0_9_1(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("cross-b")
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        s = c1.open_sender("cross-b")
        m1 = Message(
            body=[b"binary"],
            body_type="data",
            application_properties={"k": "v", "n": 3},
            durable=True,
            priority=7,
            id="one",
            correlation_id="c1",
            reply_to="back",
            content_type="application/octet-stream",
            creation_time=1700000000.0,
            ttl=30,
        )
        assert isinstance(s.send(m1), Accepted)
        assert isinstance(s.send(Message(body="text body")), Accepted)
    (m, p, b), (_, p2, b2) = drain(ch, "cross-b", 2)
    assert b == b"binary" and (m.exchange, m.routing_key) == ("", "cross-b")
    assert p.headers == {"k": "v", "n": 3}
    assert (p.delivery_mode, p.priority, p.message_id, p.correlation_id, p.reply_to) == (2, 7, "one", "c1", "back")
    assert p.content_type == "application/octet-stream" and p.expiration == "30000"
    assert p.timestamp == 1700000000
    assert (b2, p2.content_type, p2.delivery_mode) == (b"text body", "text/plain", 1)


def test_0_9_1_messages_survive_a_restart(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        c = pika.BlockingConnection(params(b))
        ch = c.channel()
        ch.queue_declare("kept", durable=True)
        ch.confirm_delivery()
        ch.basic_publish(
            "", "kept", b"persisted", pika.BasicProperties(delivery_mode=2, headers={"when": dt.datetime(2024, 1, 1)})
        )
        c.close()
    with broker_with(tmp_path) as b:
        c = pika.BlockingConnection(params(b))
        ch = c.channel()
        [(m, p, body)] = drain(ch, "kept", 1)
        assert body == b"persisted" and p.delivery_mode == 2
        assert p.headers["when"] == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        c.close()


def test_direct_reply_to(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    """RabbitMQ's amq.rabbitmq.reply-to: an RPC reply goes straight to the caller's consumer."""
    server = pika.BlockingConnection(params(broker))
    try:
        sch = server.channel()
        sch.queue_declare("rpc")
        ch = conn.channel()
        replies: list[tuple[Any, bytes]] = []
        ch.basic_consume("amq.rabbitmq.reply-to", lambda c, m, p, b: replies.append((p, b)), auto_ack=True)
        ch.basic_publish("", "rpc", b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="c1"))
        [(m, p, body)] = drain(sch, "rpc", 1)
        assert p.reply_to.startswith("amq.rabbitmq.reply-to.") and body == b"ping"
        sch.basic_publish("", p.reply_to, b"pong", pika.BasicProperties(correlation_id=p.correlation_id))
        wait_until(conn, lambda: replies)
        assert replies[0][1] == b"pong" and replies[0][0].correlation_id == "c1"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:  # must not ack
            conn.channel().basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=False)
        assert info.value.reply_code == 406
    finally:
        server.close()


def test_stream_queue_read_from_an_offset(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    for i in range(5):
        ch.basic_publish("", "events", b"e%d" % i)
    ch.basic_qos(prefetch_count=10)
    got: list[tuple[int, bytes]] = []
    ch.basic_consume(
        "events", lambda c, m, p, b: got.append((p.headers["x-stream-offset"], b)), arguments={"x-stream-offset": 2}
    )
    wait_until(conn, lambda: len(got) >= 3)
    assert got == [(2, b"e2"), (3, b"e3"), (4, b"e4")]


def test_publishers_are_blocked_while_memory_is_over_the_limit(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits={"memory_limit_bytes": 4096}) as b:
        publisher = pika.BlockingConnection(params(b))
        consumer = pika.BlockingConnection(params(b))
        try:
            events: list[str] = []
            publisher.add_on_connection_blocked_callback(lambda c, f: events.append("blocked"))
            publisher.add_on_connection_unblocked_callback(lambda c, f: events.append("unblocked"))
            ch = publisher.channel()
            ch.queue_declare("big")
            for _ in range(3):
                ch.basic_publish("", "big", b"x" * 2000)
            wait_until(publisher, lambda: events == ["blocked"])
            drain(consumer.channel(), "big", 3)
            wait_until(publisher, lambda: events == ["blocked", "unblocked"])
            ch.basic_publish("", "big", b"after")  # reading resumed
            assert ch.queue_declare("big", passive=True).method.message_count == 1
        finally:
            publisher.close()
            consumer.close()


@pytest.mark.parametrize("dialect", [AMQP_0_8, AMQP_0_9])
def test_older_dialects_end_to_end(broker: RunningBroker, dialect: Any) -> None:
    c = EngineClient(broker.port, dialect=dialect)
    try:
        ch = c.open_channel()
        c.conn.send_method(ch, m091.QueueDeclare(queue=f"old-{dialect.name}"))
        c.conn.send_content(ch, m091.BasicPublish(routing_key=f"old-{dialect.name}"), m091.BasicProperties(), b"hi")
        c.conn.send_method(ch, m091.BasicGet(queue=f"old-{dialect.name}", no_ack=True))
        c.flush()
        c.until(lambda: any(type(e).__name__ == "ContentReceived" for e in c.events))
        [got] = [e for e in c.events if type(e).__name__ == "ContentReceived"]
        assert isinstance(got.method, m091.BasicGetOk) and got.body == b"hi"
    finally:
        c.close()


def test_a_silent_client_is_dropped_after_missed_heartbeats(broker: RunningBroker) -> None:
    c = EngineClient(broker.port, heartbeat=1)
    try:
        c.until(lambda: c.conn.state is ConnectionState091.OPEN)
        started = time.monotonic()
        # say nothing (no heartbeats): the broker gives up after two missed intervals
        data = b"x"
        while data:
            data = c.sock.recv(65536)  # heartbeats, then the end of the stream
        assert 1.5 < time.monotonic() - started < T
    finally:
        c.close()


def test_dead_lettering_adds_x_death(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare("dead")
    ch.queue_bind("dead", "dlx")
    ch.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    for _ in range(2):  # each a fresh message: one death each
        ch.basic_publish("", "work", b"job", pika.BasicProperties(headers={"kind": "a"}))
        m, _, _ = ch.basic_get("work")
        ch.basic_reject(m.delivery_tag, requeue=False)
        m, p, body = ch.basic_get("dead")
        ch.basic_ack(m.delivery_tag)
        assert body == b"job" and p.headers["kind"] == "a"
        [death] = p.headers["x-death"]
        assert (death["queue"], death["reason"], death["exchange"], death["routing-keys"]) == ("work", "rejected", "", ["work"])
        assert p.headers["x-first-death-reason"] == "rejected" and p.headers["x-first-death-queue"] == "work"
    # a message that died in the same queue for the same reason before: counted up
    ch.basic_publish("", "work", b"again", pika.BasicProperties(headers={"x-death": [dict(death, count=1)]}))
    m, _, _ = ch.basic_get("work")
    ch.basic_reject(m.delivery_tag, requeue=False)
    _, p, _ = ch.basic_get("dead", auto_ack=True)
    assert p.headers["x-death"][0]["count"] == 2


def test_a_stream_written_by_1_0_read_by_0_9_1(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("mixed-log", durable=True, arguments={"x-queue-type": "stream"})
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        s = c1.open_sender("mixed-log")
        for i in range(2):
            assert isinstance(s.send(Message(body=f"one-{i}")), Accepted)
    ch.basic_publish("", "mixed-log", b"nine")
    ch.basic_qos(prefetch_count=10)
    got: list[tuple[int, bytes]] = []
    ch.basic_consume(
        "mixed-log", lambda c, m, p, b: got.append((p.headers["x-stream-offset"], b)), arguments={"x-stream-offset": "first"}
    )
    wait_until(conn, lambda: len(got) >= 3)
    assert got == [(0, b"one-0"), (1, b"one-1"), (2, b"nine")]


def test_broker_shutdown_closes_0_9_1_connections_with_320(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        c = pika.BlockingConnection(params(b))
        c.channel().queue_declare("q")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        wait_until(c, lambda: False)
    assert info.value.reply_code == 320
