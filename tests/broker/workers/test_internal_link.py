"""The internal link between two workers, as one building block: two broker cores in one
event loop, joined by a Unix socketpair, each end run by our own engine.

Worker A holds :class:`RemoteNode` stand-ins for nodes worker B owns; the tests publish
and consume on both sides and check order, credit, outcomes (B's queue semantics:
redelivery count, dead-lettering), durability and the link's failure on bad input.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import (
    Broker,
    Node,
    PublishResult,
    Queue,
    QueuedMessage,
    register_format,
    store,
)
from amqp10.broker.workers import link
from amqp10.broker.workers.link import (
    BATCH_FORMAT,
    CONTROL_FORMAT,
    OUTCOME,
    RECORD_FORMAT,
    InternalLink,
    RecordError,
    by_exclusive_consumer,
    decode_batch,
    decode_control,
    decode_record,
    encode_batch,
    encode_record,
    listening,
    records_of,
    run_link,
)
from amqp10.broker.workers.owner import NodeServer
from amqp10.broker.workers.remote import CREDIT_BATCH, RemoteNode, RemoteNodes
from amqp10.transport import DeliveryReceived

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Taker:
    """A consumer with explicit credit (1.0 link credit, 0-9-1 prefetch room)."""

    _ids = iter(range(10_000, 20_000))

    def __init__(self, credit: int = 1000, *, priority: int = 0) -> None:
        self.id = next(self._ids)
        self.browse = False
        self.priority = priority
        self._credit = credit
        self.got: list[QueuedMessage] = []
        self.was_cancelled = False

    def credit(self) -> int:
        return self._credit

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        assert self._credit > 0, "delivered beyond the consumer's credit"
        self._credit -= 1
        self.got.append(msg)

    def cancelled(self) -> None:
        self.was_cancelled = True

    def grant(self, node: Node, n: int) -> None:
        self._credit += n
        node.consumer_ready(self)

    def bodies(self) -> list[bytes]:
        return [m.data for m in self.got]


class HeldJournal:
    """A store journal whose commits happen when the test says so."""

    stalled: str | None = None

    def __init__(self) -> None:
        self.waiting: list[Callable[[], None]] = []
        self.ops: list[tuple[Any, ...]] = []

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None:
        self.ops.append(op)
        if on_commit is not None:
            self.waiting.append(on_commit)

    @property
    def idle(self) -> bool:
        return not self.waiting

    def commit(self) -> None:
        waiting, self.waiting = self.waiting, []
        for f in waiting:
            f()


async def until(cond: Callable[[], bool], turns: int = 2000) -> None:
    """Let the loop run until ``cond`` holds (bounded by turns, not time)."""
    for _ in range(turns):
        if cond():
            return
        await asyncio.sleep(0)
    assert cond(), "the condition never held"


async def settle_down(turns: int = 50) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


class Pair:
    """Worker A (remote nodes) and worker B (the owner), joined by an internal link."""

    def __init__(self, journal: Any = None) -> None:
        self.b = Broker(BrokerConfig(), journal=journal)
        self.a = Broker(BrokerConfig())
        self.remote = RemoteNodes("worker-a")
        self.server = NodeServer(self.b)
        self.link_a: InternalLink
        self.link_b: InternalLink

    async def start(self) -> None:
        sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.link_b = await run_link(sb, self.server, "worker-b")
        self.link_a = await run_link(sa, self.remote, "worker-a")

    def node(self, name: str) -> RemoteNode:
        return self.remote.node("/", name)

    def queue(self, name: str, **kw: Any) -> Queue:
        q = self.b.default.declare_queue(name, **kw)
        assert isinstance(q, Queue)
        return q

    async def close(self) -> None:
        self.link_a.fail("test over")
        self.link_b.fail("test over")
        await settle_down(5)  # the transports close


async def pair(journal: Any = None) -> Pair:
    p = Pair(journal)
    await p.start()
    return p


def publish(node: RemoteNode, body: bytes, seen: list[str] | None = None, **kw: Any) -> PublishResult:
    done = seen if seen is not None else []
    tag = body.decode()
    return node.publish_refusable(
        QueuedMessage(body, **kw),
        lambda: done.append(f"{tag}:stored"),
        lambda r: done.append(f"{tag}:{'unavailable' if r is None else r.value}"),
    )


# -- the record -----------------------------------------------------------------------------
def test_a_record_carries_the_message_bytes_and_its_queue_fields() -> None:
    msg = QueuedMessage(b"\x00payload\xff", priority=7, durable=True, expiry=12.5, message_id="m-1", delivery_count=3, arrival=9.0, seq=42)
    back = decode_record(encode_record(msg))
    assert type(back) is QueuedMessage
    assert (back.data, back.priority, back.durable, back.expiry, back.message_id, back.delivery_count, back.arrival, back.seq) == (
        b"\x00payload\xff", 7, True, 12.5, "m-1", 3, 9.0, 42
    )
    assert back.group is None and back.due is None
    from amqp10.broker.amqp1.message import Amqp1Message

    grouped = Amqp1Message(b"raw bytes, never parsed on the way")
    grouped.read_already("g-1", 1234.5)
    back = decode_record(encode_record(grouped))
    assert type(back) is Amqp1Message and (back.group, back.due) == ("g-1", 1234.5)
    bare = decode_record(encode_record(QueuedMessage(b"")))
    assert (bare.data, bare.expiry, bare.message_id, bare.durable) == (b"", None, None, False)


class _Uncoded(QueuedMessage):
    """A format outside the link's coded ones (:data:`link._CODED_FORMATS`): its record
    carries its name."""

    format = "a-format-by-name"


register_format(_Uncoded)
_RECORD_FORMATS = ("amqp1", "amqp091", "amqp010", QueuedMessage.format, _Uncoded.format)


def test_the_broker_formats_cross_as_one_byte_and_others_by_name() -> None:
    import amqp10.broker.amqp010.message  # (each registers its format)
    import amqp10.broker.amqp091.message
    import amqp10.broker.amqp1.message  # noqa: F401

    assert ("amqp1", "amqp091", "amqp010", QueuedMessage.format) == link._CODED_FORMATS
    for code, name in enumerate(link._CODED_FORMATS):
        assert link._format_bytes(name) == bytes((link._CODED | code,))
    assert link._format_bytes(_Uncoded.format) == b"\x10a-format-by-name"
    with pytest.raises(ValueError):
        link._format_bytes("x" * 128)  # (a length byte with the coded bit)
    record = bytearray(encode_record(QueuedMessage(b"x")))
    record[link._SHORT_SIZE] = link._CODED | len(link._CODED_FORMATS)  # a code no format has
    with pytest.raises(RecordError):
        decode_record(bytes(record))


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from(_RECORD_FORMATS),
    data=st.binary(max_size=40),
    priority=st.integers(0, 9),
    durable=st.booleans(),
    expiry=st.none() | st.floats(0, 2e9),
    message_id=st.none() | st.text(max_size=8),
    delivery_count=st.integers(0, 2**32 - 1),
    arrival=st.floats(0, 2e9),
    seq=st.integers(0, 2**63),
    group=st.none() | st.text(max_size=8),
    due=st.none() | st.floats(0, 2e9),
    by_exclusive=st.booleans(),
)
def test_every_record_comes_back_as_it_went_in_either_head(
    fmt: str, data: bytes, priority: int, durable: bool, expiry: float | None, message_id: str | None,
    delivery_count: int, arrival: float, seq: int, group: str | None, due: float | None, by_exclusive: bool,
) -> None:  # fmt: skip
    """A message without expiry, group or due time crosses in the short head (24 bytes), any
    other in the whole one; either way every field comes back, an empty message-id as empty
    (not none), and a publish marked by an exclusive consumer's connection as marked; its
    format, coded (one byte) or by name, comes back as its class."""
    import amqp10.broker.amqp010.message  # (each registers its format)
    import amqp10.broker.amqp091.message
    import amqp10.broker.amqp1.message  # noqa: F401
    from amqp10.broker.core.message import FORMATS

    cls = FORMATS[fmt]
    msg = cls(data, priority=priority, durable=durable, expiry=expiry, message_id=message_id,
                        delivery_count=delivery_count, arrival=arrival, seq=seq)  # fmt: skip
    msg.read_already(group, due)
    record = encode_record(msg)
    short = expiry is None and group is None and due is None
    mid = b"" if message_id is None else message_id.encode()
    head = link._SHORT_SIZE if short else link._HEAD_SIZE
    name = 0 if fmt in link._CODED_FORMATS else len(fmt)
    assert len(record) == head + 1 + name + len(mid) + (0 if group is None else len(group.encode())) + len(data)
    if by_exclusive:
        record = by_exclusive_consumer(record)
    back = decode_record(record)
    assert type(back) is cls
    assert (back.data, back.priority, back.durable, back.expiry, back.message_id, back.delivery_count,
            back.arrival, back.seq, back.group, back.due) == (
        data, priority, durable, expiry, message_id, delivery_count, arrival, seq, group, due)  # fmt: skip
    assert (back.origin is link.BY_AN_EXCLUSIVE_CONSUMER) is by_exclusive
    for cut in range(len(record)):
        if cut < len(record) - len(data) or not data:
            with pytest.raises(RecordError):
                decode_record(record[:cut])


def test_a_record_carries_the_number_a_scheduled_message_keeps() -> None:
    """A scheduled message queued when due has a new seq and keeps its number (Service Bus's
    sequence number for life): a consumer on another worker reads that number too."""
    for group in (None, "g"):
        due = QueuedMessage(b"soon", seq=9)
        due.read_already(group, 100.0)
        due.keep_number(3)
        back = decode_record(encode_record(due))
        assert (back.seq, back.number, back.due, back.group, back.data) == (9, 3, 100.0, group, b"soon")
    plain = decode_record(encode_record(QueuedMessage(b"now", seq=5)))
    assert (plain.seq, plain.number) == (5, 5)


def test_every_formats_record_comes_back_as_its_class_through_its_maker() -> None:
    """A record is made back by its format's registered maker (a compiled call, not a call of
    the class): each gives its own class, with the fields the record carries, and a
    format no front end registered is a record that does not decode."""
    import amqp10.broker.amqp010.message  # noqa: F401  (each registers its format)
    from amqp10.broker.amqp091.message import Amqp091Message
    from amqp10.broker.amqp1.message import Amqp1Message
    from amqp10.broker.core.message import FORMATS, MAKERS, maker_named

    assert set(MAKERS) == set(FORMATS) >= {"amqp1", "amqp091", "amqp010", QueuedMessage.format}
    for name, cls in FORMATS.items():
        made = maker_named(name)(b"bytes as they came")
        assert type(made) is cls and made.data == b"bytes as they came" and made.size == 18
        back = decode_record(encode_record(cls(b"data", priority=40, delivery_count=2, seq=7, arrival=1.5)))
        assert type(back) is cls
        assert (back.data, back.priority, back.delivery_count, back.seq, back.arrival) == (b"data", 31, 2, 7, 1.5)
    for compiled_format in (Amqp1Message, Amqp091Message):  # (their own compiled functions)
        assert MAKERS[compiled_format.format] is not compiled_format
    with pytest.raises(LookupError):
        maker_named("no-such-format")
    unknown = bytearray(encode_record(_Uncoded(b"x")))  # (a format by name)
    at = link._SHORT_SIZE  # (a message without expiry, group or due time: the short head)
    unknown[at + 1 : at + 1 + unknown[at]] = b"?" * unknown[at]
    with pytest.raises(RecordError, match="no front end has registered the message format"):
        decode_record(bytes(unknown))


@pytest.mark.parametrize("cut", [0, 1, 10, 24, 33])
def test_a_record_cut_short_does_not_decode(cut: int) -> None:
    whole = encode_record(QueuedMessage(b"body", message_id="a-long-message-id"))
    with pytest.raises(RecordError):
        decode_record(whole[:cut])


def test_a_transfer_that_is_not_a_record_does_not_decode() -> None:
    with pytest.raises(RecordError):
        decode_record(encode_record(QueuedMessage(b"body")), 0)  # an ordinary 1.0 message's format


# -- publish and consume across ---------------------------------------------------------------
async def test_publish_on_a_consume_on_b() -> None:
    p = await pair()
    q = p.queue("work")
    seen: list[str] = []
    for i in range(5):
        assert publish(p.node("work"), f"m{i}".encode(), seen) is PublishResult.TAKEN
    await until(lambda: len(seen) == 5)
    assert seen == [f"m{i}:stored" for i in range(5)]
    c = Taker()
    q.add_consumer(c)
    assert c.bodies() == [f"m{i}".encode() for i in range(5)]
    await p.close()


async def test_publish_on_b_consume_on_a_in_order() -> None:
    p = await pair()
    q = p.queue("work")
    for i in range(300):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    c = Taker()
    p.node("work").add_consumer(c)
    await until(lambda: len(c.got) == 300)
    assert c.bodies() == [f"m{i}".encode() for i in range(300)]  # per-queue order across the link
    for m in c.got:
        p.node("work").ack(m)
    await until(lambda: q.stats.acked == 300)
    assert q.count == 0
    await p.close()


async def test_competing_consumers_on_both_workers_share_the_queue() -> None:
    p = await pair()
    q = p.queue("work")
    local, remote = Taker(), Taker()
    q.add_consumer(local)
    p.node("work").add_consumer(remote)
    await until(lambda: len(q.consumers) == 2)
    await settle_down()  # the remote consumer's credit has reached the owner
    seen: list[str] = []
    for i in range(100):
        publish(p.node("work"), f"m{i}".encode(), seen)
    await until(lambda: len(local.got) + len(remote.got) == 100)
    everyone = sorted(local.bodies() + remote.bodies())
    assert everyone == sorted(f"m{i}".encode() for i in range(100))  # each once
    assert local.got and remote.got  # both competed
    assert local.bodies() == sorted(local.bodies(), key=lambda b: int(b[1:]))  # each in queue order
    assert remote.bodies() == sorted(remote.bodies(), key=lambda b: int(b[1:]))
    await p.close()


async def test_the_consumers_credit_bounds_what_crosses() -> None:
    p = await pair()
    q = p.queue("work")
    for i in range(50):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    c = Taker(credit=3)
    node = p.node("work")
    node.add_consumer(c)
    await until(lambda: len(c.got) == 3)
    await settle_down()
    assert len(c.got) == 3
    assert q.stats.delivered == 3  # no more left the owner than the consumer granted
    c.grant(node, 4)
    await until(lambda: len(c.got) == 7)
    await settle_down()
    assert q.stats.delivered == 7
    # a big prefetch crosses a batch at a time
    c.grant(node, 10_000)
    await until(lambda: len(c.got) == 50)
    assert CREDIT_BATCH < 10_000
    await p.close()


def work_of(p: Pair, n: int) -> tuple[Queue, RemoteNode]:
    """Queue "work" on B with messages m0 .. m<n-1>, and A's stand-in for it."""
    q = p.queue("work")
    for i in range(n):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    return q, p.node("work")


async def test_a_consumers_lowered_credit_is_taken_back_from_the_owner() -> None:
    """A 1.0 receiver may lower its credit (python-qpid-proton does, to its prefetch window):
    what the owner was granted beyond it is taken back, so the owner's queue keeps the
    messages the consumer cannot take, for its other consumers, as on one worker."""
    p = await pair()
    q = p.queue("work")
    node = p.node("work")
    c = Taker(credit=5)
    node.add_consumer(c)
    await settle_down()  # the owner holds a grant of 5
    c._credit = 1  # lowered (the 1.0 front end calls consumer_ready on CreditLowered)
    node.consumer_ready(c)
    await settle_down()
    for i in range(6):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    await until(lambda: len(c.got) == 1)
    await settle_down()
    assert c.bodies() == [b"m0"]
    assert q.stats.delivered == 1 and q.count == 5  # not 5 sent, 4 of them waiting on A
    c.grant(node, 2)  # counted from what was taken back
    await until(lambda: len(c.got) == 3)
    await settle_down()
    assert c.bodies() == [b"m0", b"m1", b"m2"] and q.stats.delivered == 3
    await p.close()


async def test_credit_lowered_below_what_is_on_its_way_is_counted_from_there() -> None:
    """Taken back while messages are on their way: the owner's count goes below none, the
    messages wait on the consumer's worker, and later grants count from there (none lost,
    none sent twice, none beyond the credit)."""
    p = await pair()
    q, node = work_of(p, 20)
    c = Taker(credit=0)
    node.add_consumer(c)
    await settle_down()
    c.grant(node, 4)  # four cross...
    c._credit = 1  # ...and the credit is lowered before they arrive
    node.consumer_ready(c)
    await until(lambda: len(c.got) == 1)
    await settle_down()
    assert q.stats.delivered == 4  # (sent before the owner heard)
    c.grant(node, 5)  # 3 wait on A: they come first, then 2 more from the owner
    await until(lambda: len(c.got) == 6)
    await settle_down()
    assert c.bodies() == [f"m{i}".encode() for i in range(6)]
    assert q.stats.delivered == 6 and q.count == 14
    await p.close()


# -- outcomes ---------------------------------------------------------------------------------
async def test_outcomes_reach_the_owners_queue() -> None:
    p = await pair()
    p.queue("dlq")
    q = p.queue("work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    for body in (b"acked", b"failed", b"released", b"rejected"):
        q.publish(QueuedMessage(body), lambda: None)
    node = p.node("work")
    c = Taker(credit=4)
    node.add_consumer(c)
    await until(lambda: len(c.got) == 4)
    by_body = {m.data: m for m in c.got}
    node.ack(by_body[b"acked"])
    node.release(by_body[b"failed"], delivery_failed=True)
    node.release(by_body[b"released"])
    node.reject(by_body[b"rejected"])
    await until(lambda: q.stats.acked == 1 and q.stats.released == 2 and q.stats.rejected == 1)
    dlq = p.b.default.queue("dlq")
    assert isinstance(dlq, Queue) and dlq.count == 1  # rejected: dead-lettered by the owner's queue
    assert [m.data for m in dlq] == [b"rejected"]
    c.grant(node, 2)
    await until(lambda: len(c.got) == 6)
    again = {m.data: m.delivery_count for m in c.got[4:]}
    assert again == {b"failed": 1, b"released": 0}  # the owner's redelivery count crosses back
    await p.close()


class ControlSpy:
    """The owner's side of the link (a :class:`NodeServer`), with the control records that
    reach it, one list a control transfer."""

    def __init__(self, server: NodeServer) -> None:
        self.server = server
        self.transfers: list[list[tuple[int, int, int, int, float, int]]] = []

    def started(self, link: InternalLink) -> None:
        self.server.started(link)

    def on_event(self, e: Any) -> None:
        d = getattr(e, "delivery", None)
        if type(e) is DeliveryReceived and d.message_format == CONTROL_FORMAT:
            self.transfers.append(decode_control(d.payload, d.message_format))
        self.server.on_event(e)

    def after_events(self) -> None:
        self.server.after_events()

    def before_write(self) -> None:
        self.server.before_write()

    def lost(self, reason: str) -> None:
        self.server.lost(reason)

    def outcomes(self) -> list[tuple[int, int, int, int]]:
        """The outcome records so far: (first reference, count, code) and the transfer's index."""
        return [
            (i, first, count, code)
            for i, records in enumerate(self.transfers)
            for what, _, first, code, _, count in records
            if what == OUTCOME
        ]


@pytest.mark.parametrize("split", [False, True], ids=["one-run", "split"])
async def test_outcomes_settled_in_order_cross_as_one_record_a_turn(split: bool) -> None:
    """N outcomes a consumer gives in order in one turn (references 1..N, one code) cross as
    one control record with a count, and the owner applies each; a different outcome in the
    middle ends the run: a record for the run before it, one for it, one for the rest."""
    p = Pair()
    spy = ControlSpy(p.server)
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    p.link_b = await run_link(sb, spy, "worker-b")
    p.link_a = await run_link(sa, p.remote, "worker-a")
    q = p.queue("work")
    n = 10
    for i in range(n):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    node = p.node("work")
    c = Taker(credit=n)
    node.add_consumer(c)
    await until(lambda: len(c.got) == n)
    await settle_down()
    before = len(spy.outcomes())
    assert before == 0
    for i, msg in enumerate(c.got):  # (one turn: no await between them)
        if split and i == 4:
            node.reject(msg)
        else:
            node.ack(msg)
    if split:
        await until(lambda: q.stats.acked == n - 1 and q.stats.rejected == 1)
    else:
        await until(lambda: q.stats.acked == n)
    assert q.count == 0
    (link_consumer,) = p.server.consumers.values()
    await until(lambda: not link_consumer.in_flight)
    outcomes = spy.outcomes()
    assert len({i for i, *_ in outcomes}) == 1  # one transfer
    runs = [(first, count) for _, first, count, _ in outcomes]
    if split:
        assert runs == [(1, 4), (5, 1), (6, 5)]
        assert outcomes[0][3] == outcomes[2][3] != outcomes[1][3]
    else:
        assert runs == [(1, n)]
    await p.close()


async def one_delivered(body: bytes) -> tuple[Pair, Queue, RemoteNode, Taker]:
    """Queue "work" on B, and its one message, ``body``, delivered to a consumer on A (credit 1)."""
    p = await pair()
    q = p.queue("work")
    node = p.node("work")
    c = Taker(credit=1)
    node.add_consumer(c)
    await settle_down()
    q.publish(QueuedMessage(body), lambda: None)
    await until(lambda: len(c.got) == 1)
    return p, q, node, c


async def test_a_delayed_retry_is_held_by_the_owner_until_it_is_due() -> None:
    p, q, node, c = await one_delivered(b"later")
    due = p.b.now() + 3600.0
    node.release(c.got[0], delivery_failed=True, due=due)
    await until(lambda: len(p.b.scheduler) == 1)  # the owner's scheduler holds it
    assert p.b.scheduler.next_deadline() == due and q.count == 0
    c.grant(node, 5)
    await settle_down()
    assert len(c.got) == 1  # not again before it is due
    await p.close()


async def test_modified_undeliverable_here_goes_to_another_consumer() -> None:
    p, q, node, c = await one_delivered(b"x")
    node.release(c.got[0], undeliverable_to=c.id)
    await until(lambda: q.stats.released == 1)
    c.grant(node, 5)
    await settle_down()
    assert len(c.got) == 1  # not to the consumer that could not take it
    other = Taker()
    q.add_consumer(other)
    assert other.bodies() == [b"x"]
    await p.close()


async def test_a_refused_publish_reports_the_owners_answer() -> None:
    p = await pair()
    p.queue("small", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    seen: list[str] = []
    publish(p.node("small"), b"one", seen)
    publish(p.node("small"), b"two", seen)
    await until(lambda: len(seen) == 2)
    assert seen == ["one:stored", "two:full"]
    await p.close()


async def test_a_node_the_owner_does_not_have_is_made_there_on_first_use() -> None:
    p = await pair()
    seen: list[str] = []
    publish(p.node("fresh"), b"m", seen)
    await until(lambda: seen == ["m:stored"])
    q = p.b.default.queue("fresh")
    assert q is not None and q.count == 1
    await p.close()


async def test_a_node_the_owner_refuses_answers_unavailable_and_can_be_tried_again() -> None:
    p = Pair()
    p.b = Broker(BrokerConfig(auto_create=False))
    p.server = NodeServer(p.b)
    await p.start()
    seen: list[str] = []
    publish(p.node("nowhere"), b"m", seen)
    c = Taker()
    p.node("nowhere").add_consumer(c)
    await until(lambda: len(seen) == 1 and c.was_cancelled)
    assert seen == ["m:unavailable"]
    p.b.default.declare_queue("nowhere")  # declared on the owner meanwhile
    publish(p.node("nowhere"), b"again", seen)
    await until(lambda: len(seen) == 2)
    assert seen[1] == "again:stored"
    await p.close()


async def test_a_consumer_that_goes_gives_back_what_it_held() -> None:
    p = await pair()
    q, node = work_of(p, 4)
    c = Taker(credit=4)
    node.add_consumer(c)
    await until(lambda: len(c.got) == 4)
    node.ack(c.got[0])
    node.remove_consumer(c)
    await until(lambda: not q.consumers)  # cancelled: it is sent nothing more...
    node.ack(c.got[1])  # ...and may still settle what it holds (0-9-1 after basic.cancel)
    await until(lambda: q.stats.acked == 2)
    assert q.count == 0
    for msg in c.got[2:]:  # its front end gives back the rest (a channel's close)
        node.release(msg)
    await until(lambda: q.count == 2)
    assert [m.data for m in q] == [b"m2", b"m3"]
    assert not p.server.consumers  # holding nothing, its link closed
    await p.close()


# -- durability -------------------------------------------------------------------------------
async def test_a_durable_message_is_answered_only_once_the_owner_stored_it() -> None:
    journal = HeldJournal()
    p = await pair(journal)
    q = p.queue("keep", durable=True)
    journal.commit()  # the declaration
    seen: list[str] = []
    publish(p.node("keep"), b"d", seen, durable=True)
    await until(lambda: q.stats.enqueued == 1)
    await settle_down()
    assert seen == []  # on the owner, not yet stored: no answer
    assert [op[0] for op in journal.ops][-1] == store.PUT  # the owner is writing it
    journal.commit()
    await until(lambda: seen == ["d:stored"])
    await p.close()


# -- the link's own robustness ----------------------------------------------------------------
@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\n\r\n",  # not even the protocol header
        b"AMQP\x00\x01\x00\x00" + b"\x00\x00\x00\x10\x02\x00\x00\x00" + b"\xff" * 8,  # a frame of nonsense
        b"AMQP\x00\x01\x00\x00" + b"\x00\x00\x00\x08\x01\x00\x00\x00",  # a data offset inside the frame header
    ],
)
async def test_garbage_from_the_owner_fails_the_link_not_the_broker(garbage: bytes) -> None:
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    remote = RemoteNodes("worker-a")
    link = await run_link(sa, remote, "worker-a")
    seen: list[str] = []
    publish(remote.node("/", "work"), b"m", seen)
    c = Taker()
    remote.node("/", "work").add_consumer(c)
    await settle_down()
    sb.setblocking(False)
    sb.send(garbage)
    await until(lambda: link.closed)
    assert seen == ["m:unavailable"]
    assert not c.was_cancelled  # kept: it gets nothing until the owner is back
    publish(remote.node("/", "work"), b"later", seen)  # a node of a failed link answers at once
    assert seen[-1] == "later:unavailable"
    sb.close()
    await settle_down(5)


async def test_garbage_from_the_publisher_fails_the_link_and_gives_back_what_it_held() -> None:
    b = Broker(BrokerConfig())
    q = b.default.declare_queue("work")
    assert isinstance(q, Queue)
    for i in range(3):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = NodeServer(b)
    link_b = await run_link(sb, server, "worker-b")
    remote = RemoteNodes("worker-a")
    link_a = await run_link(sa, remote, "worker-a")
    c = Taker()
    remote.node("/", "work").add_consumer(c)
    await until(lambda: len(c.got) == 3)
    assert q.count == 0
    # worker A's end now speaks garbage: a frame whose size is wider than the connection allows
    assert link_a.transport is not None
    link_a.transport.write(b"\xff\xff\xff\xff\x02\x00\x00\x00")
    await until(lambda: link_b.closed)
    assert server.reason is not None
    await settle_down(5)
    assert q.count == 3 and not q.consumers  # released back on the owner, its consumer gone
    assert b.default.queue("work") is q  # the broker carries on
    link_a.fail("test over")
    await settle_down(5)


async def test_a_truncated_frame_then_the_socket_closing_fails_the_link() -> None:
    b = Broker(BrokerConfig())
    b.default.declare_queue("work")
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = NodeServer(b)
    link_b = await run_link(sb, server, "worker-b")
    sa.sendall(b"AMQP\x00\x01\x00\x00" + b"\x00\x00\x01\x00\x02\x00\x00\x00" + b"\x00\x53")  # 256 bytes said, 2 sent
    sa.close()
    await until(lambda: link_b.closed)
    assert server.reason is not None
    await settle_down(5)


async def test_a_batch_that_does_not_decode_fails_the_link() -> None:
    p = await pair()
    p.queue("work")
    node = p.node("work")
    seen: list[str] = []
    publish(node, b"ok", seen)
    await until(lambda: seen == ["ok:stored"])
    sender = node._direct.sender
    assert sender is not None
    # a batch whose second record says it is longer than what follows
    good = encode_record(QueuedMessage(b"fine"))
    d = sender.send(encode_batch([good]) + struct.pack("<I", 500) + good, message_format=BATCH_FORMAT)
    d.context = [(lambda: seen.append("bad:stored"), lambda r: seen.append(f"bad:{r}"))] * 2
    p.remote.wrote()
    await until(lambda: p.link_b.closed and p.link_a.closed)
    assert seen == ["ok:stored", "bad:None", "bad:None"]  # neither is answered taken
    assert p.server.reason is not None and "cut short" in p.server.reason
    q = p.b.default.queue("work")
    assert q is not None and q.stats.enqueued == 1  # only the first publish
    await settle_down(5)


def test_a_batch_carries_records_in_order_and_refuses_a_cut() -> None:
    msgs = [QueuedMessage(f"m{i}".encode(), message_id=f"id{i}") for i in range(5)]
    records = [encode_record(m) for m in msgs]
    whole = encode_batch(records)
    back = decode_batch(whole, BATCH_FORMAT)
    assert [(m.data, m.message_id) for m in back] == [(m.data, m.message_id) for m in msgs]
    assert decode_batch(b"", BATCH_FORMAT) == []
    assert records_of(whole) == records and records_of(b"") == []
    ends = list(itertools.accumulate(4 + len(r) for r in records))
    for cut in range(1, len(whole)):  # (cut in a length, a record's head or its data)
        if cut in ends:  # (a batch of the records before the cut)
            assert [m.data for m in decode_batch(whole[:cut], BATCH_FORMAT)] == [
                m.data for m in msgs[: ends.index(cut) + 1]
            ]
            continue
        with pytest.raises(RecordError):
            decode_batch(whole[:cut], BATCH_FORMAT)
    with pytest.raises(RecordError):
        decode_batch(whole, RECORD_FORMAT)


async def test_a_batch_partly_refused_answers_each_publisher() -> None:
    p = await pair()
    p.queue("small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    seen: list[str] = []
    for body in (b"a", b"b", b"c", b"d"):  # one turn: one batch
        publish(p.node("small"), body, seen)
    await until(lambda: len(seen) == 4)
    assert seen == ["a:stored", "b:stored", "c:full", "d:full"]
    await p.close()


async def test_listening_replaces_a_stale_socket_serves_links_and_fails_them_on_leaving() -> None:
    """``listening`` (peers.py's and control.py's accept loop): a socket file left by a
    previous process is replaced, each connection is a link ``serve_one`` made, and on
    leaving every served link fails and the socket file is gone."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # (a short path: a Unix socket's is bounded)
        path = Path(d) / "sub" / "1.sock"
        path.parent.mkdir()
        path.write_bytes(b"left by a previous process")
        b = Broker(BrokerConfig())
        b.default.declare_queue("q")
        served: set[InternalLink] = set()

        def serve_one() -> InternalLink:
            link = InternalLink(NodeServer(b), "worker-b")
            served.add(link)
            return link

        remote = RemoteNodes("worker-a")
        async with listening(path, serve_one, served):
            assert path.is_socket()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(path))
            link_a = await run_link(sock, remote, "worker-a")
            seen: list[str] = []
            publish(remote.node("/", "q"), b"m", seen)
            await until(lambda: seen == ["m:stored"])
            assert len(served) == 1
        assert [link.reason for link in served] == ["the worker is stopping"]
        assert not path.exists()
        await until(lambda: link_a.closed)
