"""End to end over loopback: python-qpid-proton clients against our broker.

Both Proton APIs are used: ``BlockingConnection`` (one thread, each call
processes the connection until its condition holds) and the reactor
(``MessagingHandler`` in a ``Container`` run in a thread, joined with a bound).
Every wait is bounded; the only sleep lets a message's TTL run out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, Delivery, Link, Message, SSLDomain, Timeout
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, Copy, DurableSubscription, LinkOption
from proton.utils import BlockingConnection, LinkDetached, SyncRequestResponse

from amqp10.broker.config import Listener
from amqp10.broker.core import Queue, Topic
from tests.broker.amqp1.e2e import ADDRESS_RULES
from tests.broker.conftest import RunningBroker, broker_process, broker_with, with_certificate_user
from tests.client.helpers import Certs, have_openssl, make_certs

pytestmark = pytest.mark.proton

T = 10  # seconds any single Proton wait may take
QUIET = 0.5  # how long "nothing arrives" is watched for


@contextmanager
def blocking(url: str, **kwargs: Any) -> Iterator[BlockingConnection]:
    conn = BlockingConnection(url, timeout=T, **kwargs)
    try:
        yield conn
    finally:
        conn.close()


def run_container(handler: MessagingHandler, timeout: float = 30) -> None:
    """Run a reactor with ``handler`` in a thread; fail if it is still running after ``timeout``."""
    container = Container(handler)
    container.timeout = 0.5
    errors: list[BaseException] = []

    def run() -> None:
        try:
            container.run()
        except BaseException as exc:  # surfaced in the test's thread
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        container.stop()
        t.join(5)
        raise AssertionError(f"the reactor did not finish within {timeout}s")
    if errors:
        raise errors[0]


def nothing_arrives(rcv: Any) -> bool:
    try:
        rcv.receive(timeout=QUIET)
    except Timeout:
        return True
    return False


def in_broker(b: RunningBroker, fn: Callable[[], Any]) -> Any:
    """Evaluate ``fn`` in the broker's event loop (no race with its thread)."""
    return b.portal.call(fn)


def queue(b: RunningBroker, name: str) -> Queue:
    node = b.broker.nodes[name]
    assert isinstance(node, Queue)
    return node


class RcvSecond(LinkOption):  # type: ignore[misc]
    """rcv-settle-mode second: the receiver settles only after the sender has."""

    def apply(self, link: Link) -> None:
        link.rcv_settle_mode = Link.RCV_SECOND


class Unsettled(LinkOption):  # type: ignore[misc]
    def apply(self, link: Link) -> None:
        link.snd_settle_mode = Link.SND_UNSETTLED


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, addresses=ADDRESS_RULES) as b:
        yield b


# -- queues -----------------------------------------------------------------------------------
def test_competing_consumers_round_robin(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        receivers = [conn.create_receiver("work", credit=20, name=f"worker-{i}") for i in range(3)]
        snd = conn.create_sender("work")
        for i in range(12):
            snd.send(Message(body=i))
        got = []
        for r in receivers:
            mine = []
            for _ in range(4):
                mine.append(r.receive(timeout=T).body)
                r.accept()
            got.append(mine)
        # credit-driven round robin: one each in turn, FIFO for each consumer
        assert got == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
        assert nothing_arrives(receivers[0])
    q = queue(broker, "work")
    assert in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 12)


def test_competing_consumers_on_two_reactor_connections(broker: RunningBroker) -> None:
    class Work(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=5)
            self.got: dict[str, list[int]] = {"a": [], "b": []}
            self.sent = 0
            self.conns: list[Any] = []
            self.ready = 0

        def on_start(self, event: Any) -> None:
            for name in ("a", "b"):
                c = event.container.connect(broker.url, reconnect=False)
                self.conns.append(c)
                event.container.create_receiver(c, "shared-work", name=f"consumer-{name}")

        def on_link_opened(self, event: Any) -> None:
            if event.receiver:
                self.ready += 1
                if self.ready == 2:  # both consumers are attached: start producing
                    event.container.create_sender(self.conns[0], "shared-work")

        def on_sendable(self, event: Any) -> None:
            while event.sender.credit and self.sent < 40:
                event.sender.send(Message(body=self.sent))
                self.sent += 1

        def on_message(self, event: Any) -> None:
            self.got[event.receiver.name[-1]].append(event.message.body)
            if sum(map(len, self.got.values())) == 40:
                for c in self.conns:
                    c.close()

    h = Work()
    run_container(h)
    a, b = h.got["a"], h.got["b"]
    assert sorted(a + b) == list(range(40))
    assert a == sorted(a) and b == sorted(b)
    assert len(a) >= 5 and len(b) >= 5, (len(a), len(b))  # both took part


def test_priority_ordering(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        snd = conn.create_sender("prio")
        for i, prio in enumerate([1, 9, 4, 9, 0, 4]):
            snd.send(Message(body=i, priority=prio))
        rcv = conn.create_receiver("prio", credit=10)
        got = []
        for _ in range(6):
            got.append(rcv.receive(timeout=T).body)
            rcv.accept()
    assert got == [1, 3, 2, 5, 0, 4]  # highest priority first, FIFO within a level


def test_release_returns_to_the_head_unchanged(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        snd = conn.create_sender("rel")
        snd.send(Message(body="first"))
        snd.send(Message(body="second"))
        rcv = conn.create_receiver("rel", credit=1)
        m = rcv.receive(timeout=T)
        assert m.body == "first" and m.delivery_count == 0
        rcv.release(delivered=False)  # released: not counted as a delivery attempt
        got = []
        for _ in range(2):
            m = rcv.receive(timeout=T)
            got.append((m.body, m.delivery_count))
            rcv.accept()
    assert sorted(got) == [("first", 0), ("second", 0)]


def test_modified_delivery_failed_increments_delivery_count(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        conn.create_sender("mod").send(Message(body="x"))
        rcv = conn.create_receiver("mod", credit=1)
        counts = []
        for _ in range(3):
            m = rcv.receive(timeout=T)
            counts.append((m.delivery_count, m.first_acquirer))
            rcv.fetcher.unsettled[0].local.failed = True
            rcv.release(delivered=True)  # modified(delivery-failed)
        m = rcv.receive(timeout=T)
        counts.append((m.delivery_count, m.first_acquirer))
        rcv.accept()
    assert [c for c, _ in counts] == [0, 1, 2, 3]
    assert [f for _, f in counts][1:] == [False, False, False]


def test_modified_undeliverable_here_is_not_redelivered_to_that_link(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        conn.create_sender("undeliv").send(Message(body="picky"))
        a = conn.create_receiver("undeliv", credit=5, name="picky-a")
        assert a.receive(timeout=T).body == "picky"
        d = a.fetcher.unsettled[0]
        d.local.undeliverable = True
        d.local.failed = True
        a.release(delivered=True)
        assert nothing_arrives(a)  # never again to this link ...
        b = conn.create_receiver("undeliv", credit=5, name="picky-b")
        m = b.receive(timeout=T)  # ... but to another consumer
        assert (m.body, m.delivery_count) == ("picky", 1)
        b.accept()
    q = queue(broker, "undeliv")
    assert in_broker(broker, lambda: q.count) == 0


def test_reject_goes_to_the_dead_letter_address(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        conn.create_sender("dl.orders").send(Message(body="bad order", subject="s1"))
        rcv = conn.create_receiver("dl.orders", credit=1)
        assert rcv.receive(timeout=T).body == "bad order"
        rcv.reject()
        dlq = conn.create_receiver("dlq", credit=5)
        m = dlq.receive(timeout=T)
        assert (m.body, m.subject) == ("bad order", "s1")
        dlq.accept()
        assert nothing_arrives(rcv)
    q = queue(broker, "dl.orders")
    assert in_broker(broker, lambda: (q.count, q.stats.rejected, q.stats.dead_lettered)) == (
        0,
        1,
        1,
    )


def test_delivery_limit_goes_to_the_dead_letter_address(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        conn.create_sender("limit.jobs").send(Message(body="poison"))
        rcv = conn.create_receiver("limit.jobs", credit=1)
        for _ in range(2):  # delivery_limit = 2 failed attempts
            assert rcv.receive(timeout=T).body == "poison"
            rcv.fetcher.unsettled[0].local.failed = True
            rcv.release(delivered=True)
        assert nothing_arrives(rcv)
        dlq = conn.create_receiver("dlq", credit=5)
        m = dlq.receive(timeout=T)
        dlq.accept()
    assert m.body == "poison" and m.delivery_count == 2


def test_ttl_expired_messages_are_never_delivered_and_dead_lettered(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        snd = conn.create_sender("ttl.q")
        snd.send(Message(body="short", ttl=0.2))
        snd.send(Message(body="past", expiry_time=time.time() - 60))  # absolute-expiry-time
        snd.send(Message(body="long", ttl=60))
        snd.send(Message(body="none"))
        time.sleep(0.4)  # let "short" expire: time itself is what is tested
        rcv = conn.create_receiver("ttl.q", credit=10)
        got = []
        for _ in range(2):
            got.append(rcv.receive(timeout=T).body)
            rcv.accept()
        assert got == ["long", "none"]
        assert nothing_arrives(rcv)
        dlq = conn.create_receiver("ttl-dlq", credit=10)
        dead = []
        for _ in range(2):
            dead.append(dlq.receive(timeout=T).body)
            dlq.accept()
        assert sorted(dead) == ["past", "short"]
    q = queue(broker, "ttl.q")
    assert in_broker(broker, lambda: q.stats.expired) == 2


def test_browse_with_copy_leaves_the_messages(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        snd = conn.create_sender("browsed")
        for i in range(3):
            snd.send(Message(body=i))
        browser = conn.create_receiver("browsed", credit=10, options=Copy(), name="browser")
        assert browser.link.remote_source.distribution_mode == browser.link.source.DIST_MODE_COPY
        seen = [browser.receive(timeout=T).body for _ in range(3)]
        assert seen == [0, 1, 2]
        snd.send(Message(body=3))  # new arrivals are browsed too
        assert browser.receive(timeout=T).body == 3
        assert nothing_arrives(browser)  # each message once per browser
        q = queue(broker, "browsed")
        assert in_broker(broker, lambda: q.count) == 4
        consumer = conn.create_receiver("browsed", credit=10, name="consumer")
        got = []
        for _ in range(4):
            got.append(consumer.receive(timeout=T).body)
            consumer.accept()
        assert got == [0, 1, 2, 3]
    assert in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 4)


# -- request/response --------------------------------------------------------------------------
class Responder(MessagingHandler):  # type: ignore[misc]
    """A reactor service on ``rpc``: answers each request on its reply-to address.

    It opens one sender per reply address (the broker has no anonymous relay)
    and closes its connection after ``count`` answers.
    """

    def __init__(self, url: str, count: int) -> None:
        super().__init__()
        self.url = url
        self.count = count
        self.answered = 0
        self.ready = threading.Event()
        self.senders: dict[str, Any] = {}

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self.conn, "rpc")

    def on_link_opened(self, event: Any) -> None:
        if event.receiver:
            self.ready.set()

    def on_message(self, event: Any) -> None:
        req = event.message
        s = self.senders.get(req.reply_to)
        if s is None:
            s = self.senders[req.reply_to] = self.container.create_sender(self.conn, req.reply_to)
        s.send(Message(body=str(req.body).upper(), correlation_id=req.correlation_id))
        self.answered += 1
        if self.answered == self.count:
            self.conn.close()


def test_dynamic_reply_to_request_response(broker: RunningBroker) -> None:
    responder = Responder(broker.url, 3)
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _run_into(responder, errors), daemon=True)
    t.start()
    assert responder.ready.wait(T)
    with blocking(broker.url) as conn:
        rr = SyncRequestResponse(
            conn, "rpc"
        )  # a dynamic receiver; sets reply_to and correlation_id
        reply_to = rr.reply_to
        assert reply_to.startswith("amqp10.dynamic.")
        assert in_broker(broker, lambda: reply_to in broker.broker.nodes)
        for word in ["ping", "pong", "done"]:
            assert rr.call(Message(body=word)).body == word.upper()
    t.join(T)
    assert not t.is_alive() and not errors
    # the temporary reply queue went away with its link
    assert in_broker(broker, lambda: reply_to in broker.broker.nodes) is False


def _run_into(handler: MessagingHandler, errors: list[BaseException]) -> None:
    try:
        run_container(handler)
    except BaseException as exc:
        errors.append(exc)


# -- topics -------------------------------------------------------------------------------------
def _wait_unconsumed(conn: BlockingConnection, b: RunningBroker, q: Queue) -> None:
    """Process ``conn`` until the broker has dropped the consumers of ``q`` (a detach, not a close:
    Proton changes no endpoint state for it)."""
    conn.wait(
        lambda: not in_broker(b, lambda: q.consumers), timeout=T, msg="waiting for the detach"
    )


def test_durable_subscription_across_detach_and_reattach(broker: RunningBroker) -> None:
    with blocking(broker.url) as pub_conn:
        pub = pub_conn.create_sender("news.sport")
        with blocking(broker.url, container_id="subscriber-1") as c1:
            sub = c1.create_receiver(
                "news.sport", credit=10, name="sport-sub", options=DurableSubscription()
            )
            assert sub.link.remote_source.durability == sub.link.source.DELIVERIES
            pub.send(Message(body="m0"))
            assert sub.receive(timeout=T).body == "m0"
            sub.accept()
            topic = broker.broker.nodes["news.sport"]
            assert isinstance(topic, Topic)
            sub.link.detach()  # detach, not close: the subscription stays
            _wait_unconsumed(c1, broker, topic.subscriptions["subscriber-1#sport-sub"])
        assert in_broker(broker, lambda: list(topic.subscriptions)) == ["subscriber-1#sport-sub"]
        for body in ("m1", "m2"):  # published while nobody is attached
            pub.send(Message(body=body))
        with blocking(broker.url, container_id="subscriber-1") as c2:
            sub = c2.create_receiver(
                "news.sport", credit=10, name="sport-sub", options=DurableSubscription()
            )
            got = []
            for _ in range(2):
                got.append(sub.receive(timeout=T).body)
                sub.accept()
            assert got == ["m1", "m2"]
            sub.close()  # closing ends the subscription
        assert in_broker(broker, lambda: list(topic.subscriptions)) == []
        pub.send(Message(body="m3"))  # nobody subscribed: dropped
        with blocking(broker.url, container_id="subscriber-1") as c3:
            sub = c3.create_receiver(
                "news.sport", credit=10, name="sport-sub", options=DurableSubscription()
            )
            assert nothing_arrives(sub)


def test_durable_subscription_survives_connection_loss(broker: RunningBroker) -> None:
    with blocking(broker.url) as pub_conn:
        pub = pub_conn.create_sender("news.weather")
        with blocking(broker.url, container_id="subscriber-2") as c1:
            sub = c1.create_receiver(
                "news.weather", credit=10, name="wx", options=DurableSubscription()
            )
            volatile = c1.create_receiver("news.weather", credit=10, name="wx-volatile")
            pub.send(Message(body="w0"))
            assert sub.receive(timeout=T).body == "w0"
            sub.accept()
            assert volatile.receive(timeout=T).body == "w0"  # a copy for each subscriber
            volatile.accept()
        # the connection closed without detaching: the durable subscription stays, the other goes
        topic = broker.broker.nodes["news.weather"]
        assert in_broker(broker, lambda: list(topic.subscriptions)) == ["subscriber-2#wx"]
        pub.send(Message(body="w1"))
        with blocking(broker.url, container_id="subscriber-2") as c2:
            sub = c2.create_receiver(
                "news.weather", credit=10, name="wx", options=DurableSubscription()
            )
            assert sub.receive(timeout=T).body == "w1"
            sub.accept()
            sub.close()


# -- flow control --------------------------------------------------------------------------------
def test_max_length_blocks_the_publisher_until_consumers_drain(broker: RunningBroker) -> None:
    with blocking(broker.url) as pconn, blocking(broker.url) as cconn:
        snd = pconn.create_sender("small.q")
        for i in range(5):
            snd.send(Message(body=i))
        assert snd.link.credit == 0  # the queue is full: no more credit
        late = snd.link.send(Message(body=5))  # queued by Proton, not sent
        with pytest.raises(Timeout):
            pconn.wait(lambda: late.settled, timeout=QUIET)
        q = queue(broker, "small.q")
        assert in_broker(broker, lambda: q.count) == 5
        rcv = cconn.create_receiver("small.q", credit=10)
        got = []
        for _ in range(5):
            got.append(rcv.receive(timeout=T).body)
            rcv.accept()
        pconn.wait(lambda: late.settled, timeout=T)  # credit came back: the sixth went through
        assert late.remote_state == Delivery.ACCEPTED
        late.settle()
        got.append(rcv.receive(timeout=T).body)
        rcv.accept()
    assert got == [0, 1, 2, 3, 4, 5]


def test_presettled_sends_and_receives(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        snd = conn.create_sender("presettled", options=AtMostOnce())
        assert snd.link.remote_snd_settle_mode == Link.SND_SETTLED
        for i in range(20):
            snd.send(Message(body=i))
        q = queue(broker, "presettled")
        rcv = conn.create_receiver("presettled", credit=50, options=AtMostOnce())
        got = [rcv.receive(timeout=T).body for _ in range(20)]
        assert got == list(range(20))
        assert not rcv.fetcher.unsettled  # arrived settled: nothing to settle
    assert in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 20)


def test_publisher_rcv_settle_mode_second(broker: RunningBroker) -> None:
    with blocking(broker.url) as conn:
        snd = conn.create_sender("second.pub", options=[Unsettled(), RcvSecond()])
        assert snd.link.remote_rcv_settle_mode == Link.RCV_SECOND
        d = snd.link.send(Message(body="two-phase"))
        conn.wait(lambda: d.remote_state == Delivery.ACCEPTED, timeout=T)
        assert not d.settled  # the broker keeps it unsettled until we settle
        d.settle()
        rcv = conn.create_receiver("second.pub", credit=1)
        assert rcv.receive(timeout=T).body == "two-phase"
        rcv.accept()

    def unsettled() -> int:
        return sum(
            len(link.unsettled)
            for c in broker.service.clients
            for link, _ in c.handler.publishers.links.values()
        )

    assert in_broker(broker, unsettled) == 0


def test_consumer_rcv_settle_mode_second(broker: RunningBroker) -> None:
    class TwoPhase(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=10, auto_accept=False, auto_settle=False)
            self.events: list[str] = []

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(broker.url, reconnect=False)
            event.container.create_receiver(self.conn, "second.con", options=[RcvSecond()])
            event.container.create_sender(self.conn, "second.con")

        def on_sendable(self, event: Any) -> None:
            if not self.events:
                event.sender.send(Message(body="x"))
                self.events.append("sent")

        def on_message(self, event: Any) -> None:
            assert event.receiver.remote_rcv_settle_mode == Link.RCV_SECOND
            event.delivery.update(Delivery.ACCEPTED)  # state only: the broker settles first
            self.events.append("accepted")

        def on_settled(self, event: Any) -> None:
            if event.receiver:
                self.events.append("broker settled")
                event.delivery.settle()
                self.conn.close()

    h = TwoPhase()
    run_container(h)
    assert h.events == ["sent", "accepted", "broker settled"]
    q = queue(broker, "second.con")
    assert in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 1)


def test_large_multi_frame_messages(broker: RunningBroker) -> None:
    big = bytes(range(256)) * (2 * 1024 * 1024 // 256)  # 2 MiB, many frames of 64 KiB
    with blocking(broker.url) as conn:
        snd = conn.create_sender("big")
        snd.send(Message(body=big, durable=True))
        snd.send(Message(body=b"small"))
        rcv = conn.create_receiver("big", credit=2)
        m = rcv.receive(timeout=T)
        rcv.accept()
        assert m.body == big
        assert rcv.receive(timeout=T).body == b"small"
        rcv.accept()


def test_large_messages_through_the_reactor(broker: RunningBroker) -> None:
    size = 600_000

    class Big(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=2)
            self.sent = 0
            self.got: list[int] = []

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(broker.url, reconnect=False)
            event.container.create_sender(self.conn, "big-reactor")
            event.container.create_receiver(self.conn, "big-reactor")

        def on_sendable(self, event: Any) -> None:
            while event.sender.credit and self.sent < 4:
                event.sender.send(Message(body=bytes([self.sent]) * size))
                self.sent += 1

        def on_message(self, event: Any) -> None:
            body = event.message.body
            assert len(body) == size and body == bytes([body[0]]) * size
            self.got.append(body[0])
            if len(self.got) == 4:
                self.conn.close()

    h = Big()
    run_container(h)
    assert h.got == [0, 1, 2, 3]


# -- authentication -------------------------------------------------------------------------------
@pytest.fixture
def secured(tmp_path: Path, users_file: Path) -> Iterator[RunningBroker]:
    sasl = {"users_file": users_file, "allow_anonymous": False}
    with broker_with(tmp_path, sasl=sasl) as b:
        yield b


def test_plain_login_with_the_users_file(secured: RunningBroker) -> None:
    with blocking(
        secured.url,
        user="alice",
        password="secret",
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    ) as conn:
        assert conn.conn.transport.authenticated
        snd = conn.create_sender("authed")
        snd.send(Message(body="hello"))
        rcv = conn.create_receiver("authed", credit=1)
        assert rcv.receive(timeout=T).body == "hello"
        rcv.accept()
    assert secured.broker.nodes["authed"].stats.acked == 1


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "secret")])
def test_plain_login_failure_is_clear(secured: RunningBroker, user: str, password: str) -> None:
    with pytest.raises(ConnectionException) as info:
        BlockingConnection(
            secured.url,
            timeout=T,
            user=user,
            password=password,
            allowed_mechs="PLAIN",
            allow_insecure_mechs=True,
        )
    text = str(info.value)
    assert "amqp:unauthorized-access" in text and "Authentication failed [mech=PLAIN]" in text, text


def test_anonymous_is_refused_with_no_anonymous(secured: RunningBroker) -> None:
    with pytest.raises(ConnectionException) as info:
        BlockingConnection(secured.url, timeout=T, allowed_mechs="ANONYMOUS")
    # the broker offers no mechanism this client may use
    assert "amqp:unauthorized-access" in str(info.value) and "[mech=none]" in str(info.value)


def test_command_line_users_file_and_no_anonymous(tmp_path: Path, users_file: Path) -> None:
    args = [
        "--port",
        "0",
        "--data-dir",
        str(tmp_path),
        "--users-file",
        str(users_file),
        "--no-anonymous",
    ]
    with broker_process(*args) as bp:
        with pytest.raises(ConnectionException, match="amqp:unauthorized-access"):
            BlockingConnection(bp.url, timeout=T, allowed_mechs="ANONYMOUS")
        with pytest.raises(ConnectionException, match="amqp:unauthorized-access"):
            BlockingConnection(
                bp.url, timeout=T, user="bob", password="nope", allowed_mechs="PLAIN"
            )
        with blocking(bp.url, user="bob", password="hunter2", allowed_mechs="PLAIN") as conn:
            conn.create_sender("cli-q").send(Message(body="ok"))
        assert bp.terminate() == 0
    assert "authenticated as bob with PLAIN" in bp.log


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_tls_and_external_with_a_client_certificate(
    tmp_path: Path, certs: Certs, users_file: Path
) -> None:
    listener = Listener(
        host="127.0.0.1",
        port=0,
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        tls_ca=certs.ca,
    )
    users = with_certificate_user(users_file, tmp_path)
    sasl = {"users_file": users, "allow_anonymous": False, "mechanisms": ["EXTERNAL", "PLAIN"]}
    with broker_with(tmp_path, listeners=[listener], sasl=sasl) as b:
        url = f"amqps://{b.url}"
        # server authentication only, then PLAIN inside TLS
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(str(certs.ca))
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        with blocking(
            url, ssl_domain=domain, virtual_host="localhost", user="alice", password="secret"
        ) as conn:
            assert conn.conn.transport.ssl().protocol_name().startswith("TLS")
            conn.create_sender("tls-q").send(Message(body="over TLS"))
        # a client certificate: Proton picks EXTERNAL, the identity is the certificate's subject
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(str(certs.ca))
        domain.set_credentials(str(certs.client_cert), str(certs.client_key), None)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        with blocking(url, ssl_domain=domain, virtual_host="localhost") as conn:
            assert conn.conn.transport.sasl().mech == "EXTERNAL"
            assert in_broker(b, lambda: [c.handler.user for c in b.service.clients]) == [
                "CN=amqp10-test-client"
            ]
            rcv = conn.create_receiver("tls-q", credit=1)
            assert rcv.receive(timeout=T).body == "over TLS"
            rcv.accept()


def test_a_link_error_reaches_the_proton_client(broker: RunningBroker) -> None:
    # the broker refuses a consumer of an exchange (only queues are consumed from by a
    # v2 address): Proton reports the condition
    with blocking(broker.url) as conn, pytest.raises(LinkDetached) as info:
        conn.create_receiver("/exchanges/amq.direct")
    assert info.value.condition == "amqp:invalid-field"
