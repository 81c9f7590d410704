"""The broker at scale: work per message bounded by count, not by how much the broker holds.

Each bound is checked with a counter or a spy (nodes whose bytes are read per
publish, consumers asked for credit per delivery), with 1 and with 10,000 of
each, never with a stopwatch. Also: running byte totals that match the queues,
idle queues that cost little memory, and dynamic nodes that end with the link
that made them however it ends.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from amqp10.broker.config import BrokerConfig, QueuePolicy
from amqp10.broker.core import Broker, Node, Queue, QueuedMessage, Stream
from amqp10.message import Message
from amqp10.types import Source, Target
from tests.broker.harness import Net

# -- spies -------------------------------------------------------------------------------------


class SpyConsumer:
    """A consumer with a given credit that counts how often the queue asks for it."""

    asked = 0  # credit() calls, over every SpyConsumer

    def __init__(self, ident: int, credit: int = 0, *, browse: bool = False) -> None:
        self.id = ident
        self.browse = browse
        self.room = credit
        self.got: list[QueuedMessage] = []

    def credit(self) -> int:
        SpyConsumer.asked += 1
        return self.room

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        self.room -= 1
        self.got.append(msg)

    def cancelled(self) -> None:
        pass


def make_queue(name: str = "q", **policy: Any) -> Queue:
    return Queue(name, QueuePolicy(**policy), now=lambda: 1000.0)


def message(i: int = 0, *, size: int = 10, priority: int = 4, durable: bool = False) -> QueuedMessage:
    return QueuedMessage(bytes([i % 256]) * size, priority=priority, durable=durable)


@pytest.fixture
def bytes_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts reads of any node's ``bytes`` (what summing every queue's size would do)."""
    reads = [0]
    prop = Node.bytes
    if not isinstance(prop, property):  # the compiled build (setup.py): no spy can go in
        pytest.skip("Node is compiled: its bytes property cannot be replaced by a spy")
    assert prop.fget is not None and prop.fset is not None
    fget = prop.fget

    def counting(self: Node) -> int:
        reads[0] += 1
        value: int = fget(self)
        return value

    monkeypatch.setattr(Node, "bytes", property(counting, prop.fset))
    yield reads


# -- nodes visited per publish -----------------------------------------------------------------


def _reads_per_publish(idle_queues: int, reads: list[int]) -> int:
    net = Net()
    vhost = net.broker.default
    for i in range(idle_queues):
        vhost.declare_queue(f"idle-{i}", durable=False)
    c = net.client()
    s = c.sender("work")
    c.send(s, Message(body="warm-up"))
    reads[0] = 0
    for i in range(20):
        c.send(s, Message(body=i))  # each publish also tops up the publisher's credit
    assert net.broker.nodes["work"].count == 21
    return reads[0]


def test_nodes_visited_per_publish_do_not_grow_with_idle_queues(bytes_reads: list[int]) -> None:
    one = _reads_per_publish(1, bytes_reads)
    many = _reads_per_publish(10_000, bytes_reads)
    assert many == one
    assert one <= 20 * 2  # the target queue's own bookkeeping, not a sum over queues


def test_memory_check_reads_a_running_total(bytes_reads: list[int]) -> None:
    broker = Broker(BrokerConfig())
    for i in range(10_000):
        broker.default.declare_queue(f"idle-{i}", durable=False)
    bytes_reads[0] = 0
    assert broker.memory_ok()
    assert broker.total_bytes() == 0
    assert bytes_reads[0] == 0


class CountingDict(dict[str, Any]):
    """A node table that counts the entries it hands out (by lookup or by iteration)."""

    visits = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingDict.visits += 1
        return super().get(key, default)

    def __iter__(self) -> Iterator[str]:
        for k in super().__iter__():
            CountingDict.visits += 1
            yield k

    def items(self) -> Any:
        return [(k, self[k]) for k in self]

    def values(self) -> Any:
        return [self[k] for k in self]


def _visits_per_tick(idle_queues: int) -> int:
    broker = Broker(BrokerConfig())
    vhost = broker.default
    vhost.declare_queue("short-lived", durable=False, arguments={"x-expires": 60_000})
    for i in range(idle_queues):
        vhost.declare_queue(f"idle-{i}", durable=False)
    vhost.nodes = CountingDict(vhost.nodes)
    CountingDict.visits = 0
    broker.tick()
    return CountingDict.visits


def test_the_tick_visits_only_queues_that_can_expire() -> None:
    assert _visits_per_tick(10_000) == _visits_per_tick(1) <= 2


# -- consumers visited per delivery -----------------------------------------------------------


def _asks_per_delivery(without_credit: int) -> float:
    q = make_queue()
    idle = [SpyConsumer(i + 1) for i in range(without_credit)]
    for c in idle:
        q.add_consumer(c)
    worker = SpyConsumer(without_credit + 1, credit=1000)
    q.add_consumer(worker)
    q.publish(message(), lambda: None)  # the first dispatch meets each idle consumer once
    SpyConsumer.asked = 0
    for i in range(500):
        q.publish(message(i), lambda: None)
    assert len(worker.got) == 501 and q.count == 0
    return SpyConsumer.asked / 500


def test_consumers_visited_per_delivery_do_not_grow_with_consumers_without_credit() -> None:
    one = _asks_per_delivery(1)
    many = _asks_per_delivery(10_000)
    assert many == one
    assert one <= 2


def test_flow_frames_do_not_visit_every_consumer() -> None:
    q = make_queue()
    consumers = [SpyConsumer(i + 1) for i in range(10_000)]
    for c in consumers:
        q.add_consumer(c)
    for i in range(100):
        q.publish(message(i), lambda: None)  # a backlog: nobody has credit
    SpyConsumer.asked = 0
    for c in consumers[:50]:
        c.room = 2
        q.consumer_ready(c)
    assert sum(len(c.got) for c in consumers) == 100
    assert SpyConsumer.asked <= 3 * 100  # about one ask per delivery and per ring exit


def _stream_asks_per_publish(consumers: int) -> float:
    """Credit asks per publish on a stream whose ``consumers`` all read to the end and ran
    out of credit, but one that waits at the tail with credit."""
    st = Stream("st", QueuePolicy(), now=lambda: 1000.0)
    parked = [SpyConsumer(i + 1, credit=1) for i in range(consumers - 1)]
    for c in parked:
        st.add_consumer(c)
    st.publish(message(), lambda: None)  # each parked one takes it and is out of credit
    st.publish(message(), lambda: None)  # ... which this dispatch finds: they leave the ready set
    reader = SpyConsumer(consumers, credit=1000)
    st.add_consumer(reader)  # from the end: waits at the tail
    SpyConsumer.asked = 0
    for i in range(500):
        st.publish(message(i), lambda: None)
    assert len(reader.got) == 500
    assert all(len(c.got) == 1 for c in parked)
    return SpyConsumer.asked / 500


def test_stream_dispatch_visits_only_readers_with_credit() -> None:
    one = _stream_asks_per_publish(1)
    many = _stream_asks_per_publish(10_000)
    assert many == one
    assert one <= 1


def test_stream_reader_parked_without_credit_comes_back_through_consumer_ready() -> None:
    st = Stream("st", QueuePolicy(), now=lambda: 1000.0)
    a, b = SpyConsumer(1, credit=2), SpyConsumer(2, credit=10)
    st.add_consumer_at(a, 0)
    st.add_consumer_at(b, 0)
    for i in range(5):
        st.publish(message(i), lambda: None)
    assert [m.data[0] for m in a.got] == [0, 1]  # out of credit: parked at offset 2
    assert [m.data[0] for m in b.got] == [0, 1, 2, 3, 4]  # at the tail, waiting
    SpyConsumer.asked = 0
    st.publish(message(5), lambda: None)
    assert SpyConsumer.asked <= 2 and a.got[2:] == []  # a is not asked again until ready
    a.room = 10
    st.consumer_ready(a)  # its credit went up: it reads on from where it stopped
    assert [m.data[0] for m in a.got] == [0, 1, 2, 3, 4, 5]
    st.remove_consumer(b)
    st.consumer_ready(b)  # a late call for a consumer that left: ignored
    st.publish(message(6), lambda: None)
    assert len(b.got) == 6 and [m.data[0] for m in a.got][-1] == 6


def test_round_robin_and_credit_back_through_consumer_ready() -> None:
    q = make_queue()
    a, b, c = SpyConsumer(1, 10), SpyConsumer(2, 10), SpyConsumer(3, 0)
    for x in (a, b, c):
        q.add_consumer(x)
    for i in range(4):
        q.publish(message(i), lambda: None)
    assert [m.data[0] for m in a.got] == [0, 2] and [m.data[0] for m in b.got] == [1, 3]
    a.room = b.room = 0
    q.publish(message(4), lambda: None)
    assert q.count == 1  # nobody with credit: it waits
    c.room = 1
    q.consumer_ready(c)  # c's credit went from 0 to 1
    assert [m.data[0] for m in c.got] == [4]
    q.remove_consumer(b)
    b.room = 5
    q.consumer_ready(b)  # a stale call for a consumer that left: ignored
    q.publish(message(5), lambda: None)
    assert not b.got[2:] and q.count == 1


def test_priority_levels_and_single_active_consumer_with_the_ring() -> None:
    q = make_queue(single_active_consumer=True)
    a, b = SpyConsumer(1, 0), SpyConsumer(2, 10)
    q.add_consumer(a)
    q.add_consumer(b)
    for i, prio in enumerate([1, 9, 4]):
        q.publish(message(i, priority=prio), lambda: None)
    assert not b.got and q.count == 3  # only the active consumer (a) may take them
    a.room = 3
    q.consumer_ready(a)
    assert [m.data[0] for m in a.got] == [1, 2, 0]  # highest priority first


def test_priority_levels_are_made_on_first_use() -> None:
    q = make_queue()
    assert q._levels == []
    q.publish(message(priority=2), lambda: None)
    assert len(q._levels) == 3
    q.publish(message(priority=9), lambda: None)
    assert len(q._levels) == 10
    assert [m.priority for m in q] == [9, 2]


# -- running totals ---------------------------------------------------------------------------


def test_running_totals_follow_enqueue_dequeue_expiry_purge_and_delete() -> None:
    clock = [1000.0]
    broker = Broker(BrokerConfig(), now=lambda: clock[0])
    vhost = broker.default
    q = vhost.declare_queue("a", durable=False)
    ttl = vhost.declare_queue("t", durable=False, arguments={"x-message-ttl": 1000})
    stats = broker.stats

    def total() -> int:
        return sum(x.bytes for x in vhost.queues())

    for i in range(5):
        q.publish(message(i, size=100), lambda: None)
        ttl.publish(message(i, size=10), lambda: None)
    assert stats.memory_bytes == total() == 550
    taker = SpyConsumer(1, 2)
    q.add_consumer(taker)
    assert stats.memory_bytes == total() == 350  # two handed out
    q.release(taker.got[0])
    assert stats.memory_bytes == total() == 450
    clock[0] += 2
    assert ttl.get() is None  # all expired
    assert stats.memory_bytes == total() == 400
    q.purge()
    assert stats.memory_bytes == 0
    q.publish(message(size=7), lambda: None)
    vhost.delete_node("a")
    assert stats.memory_bytes == 0 and broker.memory_ok()


def test_disk_total_counts_persistent_messages_until_deleted() -> None:
    broker = Broker(BrokerConfig())
    q = broker.default.declare_queue("d")  # durable
    q.publish(message(size=50, durable=True), lambda: None)
    q.publish(message(size=30), lambda: None)  # transient: memory only
    assert broker.stats.memory_bytes == 80 and broker.stats.disk_bytes == 50
    taker = SpyConsumer(1, 5)
    q.add_consumer(taker)
    assert broker.stats.memory_bytes == 0 and broker.stats.disk_bytes == 50  # unacked: still stored
    for m in taker.got:
        q.ack(m)
    assert broker.stats.disk_bytes == 0
    s = broker.default.create_node("log", "stream")
    s.publish(message(size=20), lambda: None)
    assert broker.stats.disk_bytes == s.bytes > 0
    broker.default.delete_node("log")
    assert broker.stats.as_dict() == {"memory_bytes": 0, "disk_bytes": 0, "paged_bytes": 0}


# -- idle queues are cheap ------------------------------------------------------------------------


def test_an_idle_queue_costs_at_most_4_kb() -> None:
    broker = Broker(BrokerConfig())
    vhost = broker.default
    vhost.lookup("warm-up", create=True)
    n = 1000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(n):
            vhost.lookup(f"idle-{i}", create=True)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    per_queue = sum(s.size_diff for s in after.compare_to(before, "filename")) / n
    assert per_queue <= 4096, per_queue


# -- dynamic nodes end with their link ----------------------------------------------------------


def _dynamic_sender(c: Any) -> str:
    s = c.session.sender(f"dyn-{len(c.session.links)}", target=Target(dynamic=True), source=Source())
    s.attach()
    c.net.pump()
    assert s.remote_target is not None and s.remote_target.address
    address: str = s.remote_target.address
    return address


def test_a_senders_dynamic_target_goes_when_its_session_ends() -> None:
    net = Net()
    c = net.client()
    address = _dynamic_sender(c)
    assert address in net.broker.nodes
    c.session.end()
    net.pump()
    assert address not in net.broker.nodes


def test_a_senders_dynamic_target_goes_when_its_connection_is_lost() -> None:
    net = Net()
    c = net.client()
    address = _dynamic_sender(c)
    c.handler.cleanup()  # the socket dropped: no detach, no end, no close
    assert address not in net.broker.nodes
    assert net.broker.counts()["nodes"] == 0


def test_a_dynamic_target_that_asks_to_outlive_its_link_stays() -> None:
    net = Net()
    c = net.client()
    s = c.session.sender("keep", target=Target(dynamic=True, expiry_policy="never"), source=Source())
    s.attach()
    net.pump()
    address = s.remote_target.address
    s.detach(closed=True)
    net.pump()
    assert address in net.broker.nodes


def test_another_links_end_leaves_a_dynamic_node_alone() -> None:
    net = Net()
    owner, other = net.client("owner"), net.client("other")
    r = owner.receiver(None, source=Source(dynamic=True), credit=5)
    address = r.remote_source.address
    s = other.sender(address)  # a reply to it, say
    other.send(s, Message(body="reply"))
    s.detach(closed=True)
    other.session.end()
    net.pump()
    assert address in net.broker.nodes
    assert [Message.decode(d.payload).body for d in owner.received(r)] == ["reply"]
    r.detach(closed=True)
    net.pump()
    assert address not in net.broker.nodes


def test_counts_of_connections_sessions_links_and_nodes() -> None:
    net = Net()
    c = net.client()
    c.sender("a")
    c.receiver("b", credit=1)
    counts = net.broker.counts()
    assert {k: counts[k] for k in ("connections", "sessions", "links", "nodes")} == {
        "connections": 1,
        "sessions": 1,
        "links": 2,
        "nodes": 2,
    }
    c.handler.cleanup()
    assert net.broker.counts()["connections"] == 0


# -- churn: nothing held grows over rounds of connect/attach/abort/transaction -------------------


def _raw_client(port: int, work: Any) -> None:
    """A 1.0 connection over a plain socket driven by the engine: ``work(conn, session, pump)``
    attaches what it likes; then the socket is dropped without detach, end or close."""
    import socket

    from amqp10.transport import Connection

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        conn = Connection("churn")
        conn.open()
        session = conn.session()
        session.begin()

        def pump(until: Any) -> None:
            while not until():
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                data = sock.recv(65536)
                assert data, "the broker closed the connection"
                conn.receive_data(data)
            out = conn.data_to_send()
            if out:
                sock.sendall(out)

        pump(lambda: session.state.name == "MAPPED")
        work(conn, session, pump)
    finally:
        sock.close()  # abrupt: the broker sees the connection lost


def _dynamic_links(conn: Any, session: Any, pump: Any) -> None:
    s = session.sender("dyn-out", target=Target(dynamic=True), source=Source())
    r = session.receiver("dyn-in", source=Source(dynamic=True), target=Target())
    s.attach()
    r.attach()
    pump(lambda: s.remote_target is not None and r.remote_source is not None)
    assert s.remote_target.address and r.remote_source.address


def _dynamic_sender_then_end(conn: Any, session: Any, pump: Any) -> None:
    s = session.sender("dyn-end", target=Target(dynamic=True), source=Source())
    s.attach()
    pump(lambda: s.remote_target is not None)
    session.end()  # no detach first
    pump(lambda: session.state.name == "UNMAPPED")


def test_churn_leaves_counts_tasks_and_files_flat(tmp_path: Any) -> None:
    import asyncio
    import os

    import anyio

    from amqp10.client import connect
    from tests.broker.conftest import broker_with

    with broker_with(tmp_path) as b:
        port = b.port

        async def client_round() -> None:
            async with await connect(f"amqp://127.0.0.1:{port}", timeout=10) as conn:
                for i in range(3):
                    s = await conn.open_sender("churn-q", name=f"s{i}")
                    r = await conn.open_receiver("churn-q", name=f"r{i}", credit=5)
                    await s.close()
                    await r.close()
                s = await conn.open_sender("churn-q")
                async with conn.transaction() as txn:
                    await s.send(Message(body="in-txn"), txn=txn)
                txn2 = await conn.transaction()
                await s.send(Message(body="rolled-back"), txn=txn2)
                await txn2.rollback()
                r = await conn.open_receiver("churn-q", credit=10)
                d = await r.receive(timeout=10)
                await d.accept()

        def snapshot() -> dict[str, int]:
            def in_loop() -> dict[str, int]:
                counts = b.broker.counts()
                counts["tasks"] = len(asyncio.all_tasks())
                counts["clients"] = len(b.service.clients)
                return counts

            counts: dict[str, int] = b.portal.call(in_loop)
            counts["fds"] = len(os.listdir("/proc/self/fd"))
            return counts

        def settled() -> dict[str, int]:
            # lost connections end on the broker's side a little after the socket closes
            import time

            deadline = time.monotonic() + 10
            while True:
                counts = snapshot()
                if (counts["connections"] == 0 and counts["clients"] == 0) or time.monotonic() > deadline:
                    return counts
                time.sleep(0.02)

        rounds = []
        for _ in range(4):
            for _ in range(5):
                _raw_client(port, _dynamic_links)
                _raw_client(port, _dynamic_sender_then_end)
            anyio.run(client_round)
            rounds.append(settled())
        first = rounds[1]  # after a warm-up round (lazily made things, the store's files)
        for later in rounds[2:]:
            assert later == first, rounds
        assert first["connections"] == first["sessions"] == first["links"] == 0


def test_dynamic_nodes_go_at_broker_shutdown(tmp_path: Any) -> None:
    import socket

    from amqp10.transport import Connection
    from tests.broker.conftest import broker_with

    with broker_with(tmp_path) as b:
        sock = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        conn = Connection("stays")
        conn.open()
        session = conn.session()
        session.begin()
        s = session.sender("dyn", target=Target(dynamic=True), source=Source())
        s.attach()
        sock.sendall(conn.data_to_send())
        while s.remote_target is None:
            conn.receive_data(sock.recv(65536))
        address = s.remote_target.address
        assert b.portal.call(lambda: address in b.broker.nodes)
        broker = b.broker
    # the broker stopped with the connection still open: no detach, end or close from us
    sock.close()
    assert address not in broker.nodes
    assert broker.counts()["connections"] == 0
