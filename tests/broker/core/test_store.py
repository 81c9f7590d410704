"""The store and its group committer, on each backend: SQLite (a file in a temp directory)
and PostgreSQL (a real server, a database of its own per test)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue
from amqp10.broker.core import store as st
from amqp10.broker.core.committer import GroupCommitter
from amqp10.message import Message
from tests.broker.harness import Net, SyncJournal


def put(node: str, seq: int, data: bytes = b"x", priority: int = 4) -> tuple[object, ...]:
    return (st.PUT, node, seq, priority, 0, None, 1.0, None, "amqp1", data)


def test_put_load_delete_roundtrip(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([(st.NODE, "/", "q", "queue", "{}"), put("q", 1, b"a"), put("q", 2, b"b"), put("q", 3, b"c")])
    s.apply([(st.DELETE, "q", 2)])
    s.close()
    s2 = open_store()
    loaded = s2.load()
    nodes, msgs = loaded.nodes, loaded.messages
    assert [(n.name, n.kind) for n in nodes] == [("q", "queue")]
    assert [(m.seq, m.data) for m in msgs] == [(1, b"a"), (3, b"c")]


def test_in_flight_messages_recover_with_delivery_count_raised(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([put("q", 1), put("q", 2), (st.UPDATE, "q", 1, 0, 1)])
    msgs = s.load().messages
    assert [(m.seq, m.delivery_count) for m in msgs] == [(1, 1), (2, 0)]
    again = s.load().messages  # the raised count was written back, and counted only once
    assert [(m.seq, m.delivery_count) for m in again] == [(1, 1), (2, 0)]


def test_put_then_delete_in_one_batch_leaves_nothing(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([put("q", 1), (st.UPDATE, "q", 1, 2, 1), (st.DELETE, "q", 1), put("q", 2)])
    assert [m.seq for m in s.load().messages] == [2]


def test_a_put_settled_in_its_own_batch_is_never_written(open_store: Callable[[], st.SqlStore]) -> None:
    """A message consumed before its put was committed: the put and the delete meet in one
    batch and neither row is written (counted); a row of the key from an earlier batch still goes."""
    s = open_store()
    s.apply([put("q", 1), (st.UPDATE, "q", 1, 0, 1), put("q", 2), (st.DELETE, "q", 1), put("q", 3)])
    assert s.puts_skipped == 1
    assert [m.seq for m in s.load().messages] == [2, 3]
    s.apply([put("q", 3, b"again"), (st.UPDATE, "q", 3, 1, 1), (st.DELETE, "q", 3), (st.DELETE, "q", 2)])
    assert s.puts_skipped == 2  # the re-put of 3; 2's put was an earlier batch's
    assert s.load().messages == []
    s.apply([(st.DELETE, "q", 4), put("q", 4), (st.DELETE, "q", 4), put("q", 4, b"kept")])  # a key used again
    assert s.puts_skipped == 3
    assert [(m.seq, m.data) for m in s.load().messages] == [(4, b"kept")]


def test_a_batch_with_repeated_keys_keeps_the_last_write(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    full = (st.PUT, "q", 3, 9, 2, 12.5, 1.25, "'id-3'", "amqp091", bytes(range(256)))
    s.apply([put("q", 1, b"a"), put("q", 2, b"b"), put("q", 1, b"a2"), full])
    s.apply([(st.UPDATE, "q", 2, 1, 1), (st.UPDATE, "q", 2, 3, 0), (st.DELETE, "q", 9), (st.DELETE, "q", 9)])
    msgs = s.load().messages
    assert [(m.seq, m.data, m.delivery_count) for m in msgs[:2]] == [(1, b"a2", 0), (2, b"b", 3)]
    assert msgs[2] == st.StoredMessage("q", 3, 9, 2, 12.5, 1.25, "'id-3'", "amqp091", bytes(range(256)))


def test_runs_of_updates_and_deletes_change_exactly_their_rows(open_store: Callable[[], st.SqlStore]) -> None:
    # consecutive seqs of one node with the same values go as one `seq BETWEEN` statement
    s = open_store()
    s.apply([put(n, i, b"%d" % i) for n in ("q", "r") for i in range(1, 21)])
    updates = [(st.UPDATE, "q", i, 1, 1) for i in range(2, 7)] + [(st.UPDATE, "q", 7, 2, 1), (st.UPDATE, "q", 9, 1, 1)]
    deletes = [(st.DELETE, "q", i) for i in (*range(10, 16), 17)] + [(st.DELETE, "r", i) for i in (1, 2, 3, 5)]
    s.apply([*updates, *deletes, (st.DELETE, "q", 25), (st.DELETE, "q", 26)])
    rows = {(m.node, m.seq): m.delivery_count for m in s.load().messages}  # in flight: recovered with +1
    expected = {("q", i): 0 for i in (1, 8, 16, *range(18, 21))}
    expected |= {("q", i): 2 for i in (*range(2, 7), 9)} | {("q", 7): 3}
    expected |= {("r", i): 0 for i in (4, *range(6, 21))}
    assert rows == expected


_KEYS = st_.tuples(st_.sampled_from(["a", "b"]), st_.integers(1, 4))
_OPS = st_.one_of(
    st_.tuples(st_.just(st.PUT), _KEYS, st_.integers(0, 3), st_.binary(max_size=3)),
    st_.tuples(st_.just(st.UPDATE), _KEYS, st_.integers(0, 3), st_.integers(0, 1)),
    st_.tuples(st_.just(st.DELETE), _KEYS),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st_.lists(st_.lists(_OPS, max_size=8), max_size=5))
def test_batches_of_message_writes_match_applying_them_one_by_one(
    open_store: Callable[[], st.SqlStore], batches: list[list[tuple[Any, ...]]]
) -> None:
    """Each backend may send a batch its own way (PostgreSQL: one statement a kind);
    the store must end as if each operation were applied alone, in order."""
    s = open_store()  # one per example (closed below), on the test's one file or database
    try:
        _check_batches(s, batches)
    finally:
        s.close()


def _check_batches(s: st.SqlStore, batches: list[list[tuple[Any, ...]]]) -> None:
    s.apply([(st.DROP_NODE, "/", "a"), (st.DROP_NODE, "/", "b")])
    model: dict[tuple[str, int], list[Any]] = {}
    for batch in batches:
        ops: list[tuple[Any, ...]] = []
        for op in batch:
            (node, seq) = op[1]
            if op[0] == st.PUT:
                ops.append((st.PUT, node, seq, 4, op[2], None, 1.0, None, "amqp1", op[3]))
                model[node, seq] = [op[2], 0, op[3]]
            elif op[0] == st.UPDATE:
                ops.append((st.UPDATE, node, seq, op[2], op[3]))
                if (node, seq) in model:
                    model[node, seq][:2] = [op[2], op[3]]
            else:
                ops.append((st.DELETE, node, seq))
                model.pop((node, seq), None)
        s.apply(ops)
    expected = [(n, q, dc + flight, data) for (n, q), (dc, flight, data) in sorted(model.items())]
    assert [(m.node, m.seq, m.delivery_count, m.data) for m in s.load().messages] == expected


def test_every_definition_change_is_kept(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply(
        [
            (st.VHOST, "shop", '{"description": "d"}'),
            (st.VHOST, "shop", '{"description": "e"}'),  # replaces
            (st.NODE, "shop", "q", "queue", "{}"),
            (st.NODE, "shop", "q", "queue", '{"x": 1}'),
            (st.NODE, "shop", "gone", "queue", "{}"),
            (st.EXCHANGE, "shop", "x", "topic", "{}"),
            (st.EXCHANGE, "shop", "y", "fanout", "{}"),
            (st.EXCHANGE, "shop", "y", "direct", "{}"),
            (st.BIND, "shop", "x", "queue", "q", "a.#", ""),
            (st.BIND, "shop", "x", "queue", "q", "a.#", ""),  # once
            (st.BIND, "shop", "x", "queue", "q", "b.#", ""),
            (st.BIND, "shop", "x", "queue", "gone", "c", ""),
            (st.BIND, "shop", "x", "exchange", "y", "d", '{"k": 1}'),
            (st.BIND, "shop", "y", "queue", "q", "e", ""),
            (st.UNBIND, "shop", "x", "queue", "q", "b.#", ""),
            (st.DROP_NODE, "shop", "gone"),  # and the bindings to it
            (st.POLICY, "shop", "p", "^q", "queues", '{"max-length": 4}', 2),
            (st.POLICY, "shop", "old", ".*", "all", "{}", 0),
            (st.DROP_POLICY, "shop", "old"),
            put(st.message_key("shop", "q"), 1, b"m1"),
            put(st.message_key("shop", "q"), 2, b"m2"),
            (st.MOVE, st.message_key("shop", "q"), 1, 5, 99.5),  # a scheduled message now due
        ]
    )
    loaded = s.load()
    assert loaded.vhosts == [st.VhostRecord("shop", '{"description": "e"}')]
    assert loaded.nodes == [st.NodeRecord("shop", "q", "queue", '{"x": 1}')]
    assert sorted(loaded.exchanges, key=lambda x: x.name) == [
        st.ExchangeRecord("shop", "x", "topic", "{}"), st.ExchangeRecord("shop", "y", "direct", "{}")]  # fmt: skip
    assert sorted((b.source, b.destination, b.routing_key) for b in loaded.bindings) == [
        ("x", "q", "a.#"), ("x", "y", "d"), ("y", "q", "e")]  # fmt: skip
    assert loaded.policies == [st.PolicyRecord("shop", "p", "^q", "queues", '{"max-length": 4}', 2)]
    assert [(m.node, m.seq, m.expiry, m.data) for m in loaded.messages] == [
        ("shop\x1fq", 2, None, b"m2"), ("shop\x1fq", 5, 99.5, b"m1")]  # fmt: skip
    s.apply([(st.DROP_EXCHANGE, "shop", "y")])  # with every binding from or to it
    after = s.load()
    assert [x.name for x in after.exchanges] == ["x"]
    assert [(b.source, b.destination) for b in after.bindings] == [("x", "q")]


def test_drop_node_removes_its_messages(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([(st.NODE, "/", "t", "queue", "{}"), put("t", 1), (st.DROP_NODE, "/", "t")])
    assert s.load() == st.Loaded([], [], [], [])


@pytest.mark.anyio
async def test_group_commit_batches_and_calls_back_after_commit(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    gc = GroupCommitter(s, interval=0.01)
    done: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        for i in range(500):
            gc.submit(put("q", i + 1), lambda i=i: done.append(i))
        assert done == []  # nothing is acknowledged before it is committed
        await gc.flush()
        tg.cancel_scope.cancel()
    assert done == list(range(500))
    assert gc.commits < 50  # grouped: far fewer commits than messages
    assert len(s.load().messages) == 500


def test_broker_recovers_queues_in_order(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()

    net = Net()
    net.broker = Broker(BrokerConfig(), journal=SyncJournal(s))
    c = net.client()
    snd = c.sender("durable-q")
    for i in range(5):
        c.send(snd, Message(body=i, durable=True))
    r = c.receiver("durable-q", credit=2)
    got = c.received(r)
    got[0].accept()  # the first is consumed; the second stays in flight
    net.pump()

    fresh = Broker(BrokerConfig())
    assert fresh.recover(s) == 4
    q = fresh.nodes["durable-q"]
    assert isinstance(q, Queue)
    msgs = list(q)
    assert [Message.decode(m.data).body for m in msgs] == [1, 2, 3, 4]
    assert [m.delivery_count for m in msgs] == [1, 0, 0, 0]  # message 1 was in flight


def test_stream_recovers_offsets_and_dedup_window(open_store: Callable[[], st.SqlStore]) -> None:
    from amqp10.broker.config import AddressRule, QueuePolicy
    from amqp10.broker.core import Stream

    s = open_store()

    cfg = BrokerConfig(
        addresses=[AddressRule(pattern="ev", kind="stream", policy=QueuePolicy(duplicate_window=10))]
    )
    net = Net()
    net.broker = Broker(cfg, journal=SyncJournal(s))
    c = net.client()
    snd = c.sender("ev")
    for i in range(4):
        c.send(snd, Message(body=i, id=f"id-{i}"))
    fresh = Broker(cfg)
    assert fresh.recover(s) == 4
    node = fresh.nodes["ev"]
    assert isinstance(node, Stream)
    assert node.info()["first"] == 0 and node.info()["next"] == 4
    called: list[int] = []
    from amqp10.broker.amqp1 import Amqp1Message

    node.publish(Amqp1Message(b"\x00Su\xa0\x01x", message_id=repr("id-2")), lambda: called.append(1))
    assert called == [1] and node.next == 4  # a replay after restart is stored once


ARGUMENTS = {
    "x-custom-decimal": Decimal("1.50"),
    "x-custom-array": [datetime(2024, 5, 1, 12, 0, tzinfo=UTC), b"\xff", None, 2.5, True],
    "x-stream-filter-size-bytes": {"nested": {"at": datetime(2024, 5, 1, 12, 0, 30), "n": 1 << 40}},
}
"""Arguments of every field-table type JSON has none for (each in an argument the core keeps
whatever its value: one it gives no meaning to, which RabbitMQ checks not; a Decimal or an
array in x-quorum-initial-group-size or x-stream-max-segment-size-bytes is refused as RabbitMQ
refuses it)."""


def test_a_queues_and_a_streams_arguments_are_recovered_with_their_types(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    broker = Broker(BrokerConfig(), journal=SyncJournal(s))
    broker.default.declare_queue("s", arguments={"x-queue-type": "stream", **ARGUMENTS})
    broker.default.declare_queue("q", arguments={"x-queue-type": "quorum", **ARGUMENTS})
    fresh = Broker(BrokerConfig())
    fresh.recover(s)
    q = fresh.default.nodes["q"]
    assert isinstance(q, Queue)
    for recovered, declared in (
        (fresh.default.stream_arguments["s"], broker.default.stream_arguments["s"]),
        (q.arguments, {"x-queue-type": "quorum", **ARGUMENTS}),
    ):
        assert recovered == declared
        assert sorted(map(repr, recovered.items())) == sorted(map(repr, declared.items()))  # (a Decimal, not its text)


def test_a_queues_arguments_are_stored_as_a_broker_before_typed_arguments_reads_them(
    open_store: Callable[[], st.SqlStore],
) -> None:
    """A record keeps ``arguments`` as the version before ``typed_arguments`` wrote it (JSON,
    any other value as its repr) beside them: a broker that reads ``arguments`` alone (same
    schema) recovered every queue without its arguments from a store this one wrote."""
    s = open_store()
    broker = Broker(BrokerConfig(), journal=SyncJournal(s))
    declared = {"x-queue-type": "quorum", "x-max-length": 5, **ARGUMENTS}
    broker.default.declare_queue("q", arguments=declared)
    (rec,) = [r for r in s.load(messages=False).nodes if r.name == "q"]
    props = json.loads(rec.properties)
    assert sorted(props) == ["arguments", "typed_arguments"]
    assert props["arguments"] == json.loads(json.dumps({"arguments": declared}, sort_keys=True, default=repr))["arguments"]
    older = Broker(BrokerConfig())  # (the read path before typed_arguments: the record without them)
    older.default.restore_node(st.NodeRecord(rec.vhost, rec.name, rec.kind, json.dumps({"arguments": props["arguments"]})))
    q = older.default.nodes["q"]
    assert isinstance(q, Queue) and q.arguments == props["arguments"] and q.policy.max_length == 5
    # keys JSON cannot sort (a 1.0 map's): stored typed alone, as before, not refused
    broker.default.declare_queue("mixed", arguments={"x-queue-type": "quorum", "x-custom": {1: 2, "a": 3}})
    (rec,) = [r for r in s.load(messages=False).nodes if r.name == "mixed"]
    assert sorted(json.loads(rec.properties)) == ["typed_arguments"]


@pytest.mark.parametrize(
    "malformed",
    [{"table": {"x-max-length": {"decimal": "one"}}}, {"table": {"x-max-length": {"bytes": "%%"}}},
     {"table": {"x-max-length": {"table": 3}}}, {"table": {"x-max-length": {"no-such-tag": 1}}},
     {"table": 3}, {"no-such-tag": {}}, ["x-max-length"]],
)  # fmt: skip
def test_a_malformed_typed_record_is_that_queues_alone(
    open_store: Callable[[], st.SqlStore], malformed: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A record whose typed_arguments do not read recovers its queue with its arguments as
    stored without their types, said in a warning, and the other queues as they were (the
    ValueError stopped the whole recovery)."""
    s = open_store()
    broker = Broker(BrokerConfig(), journal=SyncJournal(s))
    broker.default.declare_queue("good", arguments={"x-queue-type": "quorum", "x-custom": Decimal("1.5")})
    props = json.dumps({"typed_arguments": malformed, "arguments": {"x-max-length": 5}})
    broker.default.journal.submit((st.NODE, "/", "bad", "queue", props))
    fresh = Broker(BrokerConfig())
    fresh.recover(s)
    good, bad = fresh.default.nodes["good"], fresh.default.nodes["bad"]
    assert isinstance(good, Queue) and good.arguments == {"x-queue-type": "quorum", "x-custom": Decimal("1.5")}
    assert isinstance(bad, Queue) and bad.arguments == {"x-max-length": 5}
    assert "queue 'bad' in vhost '/': its stored typed_arguments do not read" in caplog.text


@pytest.mark.anyio
async def test_a_batch_taken_as_the_committer_is_cancelled_is_still_written(open_store: Callable[[], st.SqlStore]) -> None:
    """Stopping the broker cancels the committer; a batch it had taken (but not yet handed
    to its writer thread) when the cancellation came was dropped: the store got it never."""
    s = open_store()
    gc = GroupCommitter(s, interval=0)
    real_apply = s.apply
    first = [True]

    def apply(ops: Any) -> None:
        real_apply(ops)
        if first[0]:  # while the first batch is written: the next comes, and so does the stop
            first[0] = False
            anyio.from_thread.run_sync(gc.submit, put("q", 2))
            anyio.from_thread.run_sync(tg.cancel_scope.cancel)

    s.apply = apply  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        gc.submit(put("q", 1))
        await anyio.sleep_forever()
    assert [m.seq for m in s.load().messages] == [1, 2]


@pytest.mark.anyio
async def test_a_message_settled_before_its_commit_is_confirmed_by_the_commit_that_drops_it(
    open_store: Callable[[], st.SqlStore],
) -> None:
    """Published, delivered and settled before the committer took its batch: nothing of it is
    written, and its publisher is still answered only once a commit covers its delete."""
    s = open_store()
    gc = GroupCommitter(s, interval=0.01)
    commits_at_answer: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        gc.submit(put("q", 1), lambda: commits_at_answer.append(gc.commits))
        gc.submit((st.UPDATE, "q", 1, 0, 1))  # delivered
        gc.submit((st.DELETE, "q", 1))  # settled by its consumer
        assert commits_at_answer == []
        await gc.flush()
        tg.cancel_scope.cancel()
    assert commits_at_answer == [1]  # after the one commit, not before
    assert gc.commits == 1 and s.puts_skipped == 1
    assert s.load().messages == []


def test_deferred_messages_and_group_states_are_kept(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply(
        [
            (st.NODE, "/", "q", "queue", "{}"),
            put("q", 1), put("q", 2), put("q", 3),
            (st.UPDATE, "q", 1, 0, 1), (st.UPDATE, "q", 1, 0, st.DEFERRED),  # delivered, then deferred
            (st.UPDATE, "q", 2, 0, 1),  # delivered, unsettled
            (st.GROUP_STATE, "q", "a", b"state-a"),
            (st.GROUP_STATE, "q", "b", b"old"), (st.GROUP_STATE, "q", "b", b"state-b"),  # replaces
            (st.GROUP_STATE, "q", "c", b"gone"), (st.GROUP_STATE, "q", "c", None),  # cleared
            (st.GROUP_STATE, "other", "a", b"other's"),
        ]
    )  # fmt: skip
    s.close()
    s = open_store()
    for _ in range(2):  # a second recovery finds the same: the deferral is not a delivery attempt
        loaded = s.load()
        assert [(m.seq, bool(m.deferred), m.delivery_count) for m in loaded.messages] == [
            (1, True, 0), (2, False, 1), (3, False, 0)]  # fmt: skip
        assert sorted((g.node, g.group, g.state) for g in loaded.group_states) == [
            ("other", "a", b"other's"), ("q", "a", b"state-a"), ("q", "b", b"state-b")]  # fmt: skip
    s.apply([(st.DELETE, "q", 1), (st.GROUP_STATE, "q", "a", None)])  # settled; state cleared
    loaded = s.load()
    assert [m.seq for m in loaded.messages] == [2, 3]
    assert sorted(g.group for g in loaded.group_states if g.node == "q") == ["b"]
    s.apply([(st.DROP_NODE, "/", "q")])  # a deleted queue takes its group states along
    loaded = s.load()
    assert loaded.messages == [] and [g.node for g in loaded.group_states] == ["other"]


def _as_schema_3(s: st.SqlStore) -> None:
    """Turn a new store into one of schema version 3 (no group_states table)."""
    s._cur.execute("DROP TABLE group_states")
    if isinstance(s, st.Store):
        s._cur.execute("PRAGMA user_version = 3")
    else:
        s._cur.execute("UPDATE amqp10_store SET version = 3")


def test_a_schema_3_store_is_migrated(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([(st.NODE, "/", "q", "queue", "{}"), put("q", 1), put("q", 2), (st.UPDATE, "q", 1, 0, 1)])
    _as_schema_3(s)
    s.close()
    migrated = open_store()
    assert migrated.migrated_from == 3
    migrated.apply([(st.GROUP_STATE, "q", "g", b"s"), (st.UPDATE, "q", 2, 0, st.DEFERRED)])
    loaded = migrated.load()
    assert [(m.seq, m.delivery_count, bool(m.deferred)) for m in loaded.messages] == [(1, 1, False), (2, 0, True)]
    assert [(g.group, g.state) for g in loaded.group_states] == [("g", b"s")]
    migrated.close()
    assert open_store().migrated_from is None


def test_a_schema_4_store_is_migrated_and_a_moved_message_keeps_its_number(open_store: Callable[[], st.SqlStore]) -> None:
    """Version 4 has no messages.number: it is added; a scheduled message moved to a new
    seq when due (MOVE) keeps its first seq as its number, through a second move too."""
    s = open_store()
    s.apply([(st.NODE, "/", "q", "queue", "{}"), put("q", 1), put("q", 2)])
    s._cur.execute("ALTER TABLE messages DROP COLUMN number")
    if isinstance(s, st.Store):
        s._cur.execute("PRAGMA user_version = 4")
    else:
        s._cur.execute("UPDATE amqp10_store SET version = 4")
    s.close()
    migrated = open_store()
    assert migrated.migrated_from == 4
    migrated.apply([(st.MOVE, "q", 1, 3, None)])
    assert [(m.seq, m.number) for m in migrated.load().messages] == [(2, None), (3, 1)]
    migrated.apply([(st.MOVE, "q", 3, 4, None)])
    assert [(m.seq, m.number) for m in migrated.load().messages] == [(2, None), (4, 1)]
    migrated.close()


def test_broker_recovers_deferred_messages_and_group_states(open_store: Callable[[], st.SqlStore]) -> None:
    """A deferred message comes back set aside (acquired, with its seq), a group's state
    as it was; settling, clearing and deleting the queue remove them from the store."""
    s = open_store()
    net = Net()
    net.broker = Broker(BrokerConfig(), journal=SyncJournal(s))
    c = net.client()
    snd = c.sender("dq")
    for i in range(3):
        c.send(snd, Message(body=i, durable=True, group_id="g"))
    q = net.broker.nodes["dq"]
    assert isinstance(q, Queue)
    first = q.get()
    assert first is not None
    q.defer(first)
    q.set_group_state("g", b"checkpoint")
    q.set_group_state("h", b"cleared")
    q.set_group_state("h", None)

    fresh = Broker(BrokerConfig(), journal=SyncJournal(s))
    assert fresh.recover(s) == 3
    q2 = fresh.nodes["dq"]
    assert isinstance(q2, Queue)
    assert [Message.decode(m.data).body for m in q2] == [1, 2]  # the deferred one is not for consumers
    assert list(q2.deferred) == [first.seq] and q2.stats.unacked == 1
    assert q2.group_states == {"g": b"checkpoint"}
    back = q2.deferred.pop(first.seq)
    assert Message.decode(back.data).body == 0
    q2.ack(back)
    assert q2.stats.unacked == 0
    assert [m.seq for m in s.load().messages] == [2, 3]
    fresh.default.delete_node("dq")
    loaded = s.load()
    assert loaded.messages == [] and loaded.group_states == []


def test_a_schema_3_store_file_opens_and_takes_deferrals(tmp_path: Path) -> None:
    """``store-v3.sqlite3`` was written by the broker before deferred messages and group
    states (fixtures/make_store_v3.py): it opens, recovers, and takes both."""
    path = tmp_path / "v3.sqlite3"
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "store-v3.sqlite3", path)
    s = st.Store(path)
    assert s.migrated_from == 3
    b = Broker(BrokerConfig(), journal=SyncJournal(s))
    assert b.recover(s) == 3
    q = b.nodes["orders"]
    assert isinstance(q, Queue) and q.policy.max_length == 100
    assert [(Message.decode(m.data).body, m.delivery_count) for m in q] == [
        ("order-0", 1), ("order-1", 0), ("order-2", 0)]  # fmt: skip
    msg = q.get()
    assert msg is not None
    q.defer(msg)
    q.set_group_state("g", b"v4")
    s.close()
    s2 = st.Store(path)
    assert s2.migrated_from is None
    again = Broker(BrokerConfig())
    assert again.recover(s2) == 3
    q2 = again.nodes["orders"]
    assert isinstance(q2, Queue)
    assert list(q2.deferred) == [msg.seq] and q2.group_states == {"g": b"v4"} and q2.count == 2
    s2.close()


def _publish_row(data: bytes) -> tuple[object, ...]:
    return ("/", "", "q", 4, 1, None, 1.0, "id-1", "amqp1", data)


def test_prepared_transactions_are_kept_replaced_and_forgotten(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([(st.PREPARE, b"t1", "front", [_publish_row(b"a"), _publish_row(b"b")], [("q", 1), ("q", 2)])])
    s.apply([(st.PREPARE, b"t2", "other", [], [])])  # nothing held: kept all the same
    s.apply([(st.PREPARE, b"t1", "front", [_publish_row(b"c")], [("q", 3)])])  # replaces t1's record
    s.close()
    loaded = open_store().load()
    got = {r.txn: r for r in loaded.prepared}
    assert sorted(got) == [b"t1", b"t2"]
    t1 = got[b"t1"]
    assert t1.owner == "front" and t1.taken == [("q", 3)]
    assert [(p.vhost, p.exchange, p.routing_key, p.durable, p.message_id, p.format, p.data) for p in t1.publishes] == [
        ("/", "", "q", True, "id-1", "amqp1", b"c")]  # fmt: skip
    assert got[b"t2"].publishes == [] and got[b"t2"].taken == []
    s2 = open_store()
    s2.apply([(st.FORGET_PREPARED, b"t1")])
    assert [r.txn for r in s2.load().prepared] == [b"t2"]


def test_a_schema_5_store_is_migrated_and_keeps_prepared_transactions(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    s.apply([(st.NODE, "/", "q", "queue", "{}"), put("q", 1)])
    for table in ("prepared", "prepared_publishes", "prepared_taken"):
        s._cur.execute(f"DROP TABLE {table}")
    if isinstance(s, st.Store):
        s._cur.execute("PRAGMA user_version = 5")
    else:
        s._cur.execute("UPDATE amqp10_store SET version = 5")
    s.close()
    migrated = open_store()
    assert migrated.migrated_from == 5
    migrated.apply([(st.PREPARE, b"t", "front", [_publish_row(b"x")], [("q", 1)])])
    loaded = migrated.load()
    assert [m.seq for m in loaded.messages] == [1]
    assert [(r.txn, r.taken) for r in loaded.prepared] == [(b"t", [("q", 1)])]


def _prepared_after_restart(s: st.SqlStore) -> tuple[Broker, Queue, Any]:
    """A broker that took message 0 of queue ``pq`` and published ``held`` to it in a
    transaction it prepared, then a fresh broker recovered from the store."""
    from amqp10.broker.core import HeldWork

    net = Net()
    net.broker = Broker(BrokerConfig(), journal=SyncJournal(s))
    c = net.client()
    snd = c.sender("pq")
    for i in range(3):
        c.send(snd, Message(body=i, durable=True))
    q = net.broker.nodes["pq"]
    assert isinstance(q, Queue)
    first = q.get()
    assert first is not None
    work = HeldWork("test", b"txn-1", net.broker.journal)
    work.take(q, first)
    vh = net.broker.default
    work.publish(vh, "", "pq", type(first)(Message(body="held", durable=True).encode(), durable=True))
    prepared: list[bool] = []
    work.prepare(lambda: prepared.append(True))
    assert prepared == [True]

    fresh = Broker(BrokerConfig(), journal=SyncJournal(s))
    assert fresh.recover(s) == 3
    q2 = fresh.nodes["pq"]
    assert isinstance(q2, Queue)
    assert fresh.recovered_transactions("someone else") == []
    (back,) = fresh.recovered_transactions("test")
    assert fresh.recovered_transactions("test") == []  # taken once
    return fresh, q2, back


def test_broker_recovers_a_prepared_transaction_and_commits_it(open_store: Callable[[], st.SqlStore]) -> None:
    """The taken message comes back acquired (no consumer gets it); the commit routes the
    held publish and removes the taken message and the record from the store."""
    s = open_store()
    fresh, q, work = _prepared_after_restart(s)
    assert work.txn_id == b"txn-1" and work.prepared
    assert [Message.decode(m.data).body for m in q] == [1, 2]
    assert [Message.decode(m.data).body for _, m in work.taken] == [0]
    assert q.stats.unacked == 1
    done: list[bool] = []
    work.commit(lambda: done.append(True))
    assert done == [True]
    assert [Message.decode(m.data).body for m in q] == [1, 2, "held"]
    loaded = s.load()
    assert loaded.prepared == []
    assert len(loaded.messages) == 3 and q.stats.unacked == 0


def test_broker_recovers_a_prepared_transaction_and_rolls_it_back(open_store: Callable[[], st.SqlStore]) -> None:
    s = open_store()
    fresh, q, work = _prepared_after_restart(s)
    work.rollback()
    assert [Message.decode(m.data).body for m in q] == [0, 1, 2]  # back at the head, nothing published
    assert [m.delivery_count for m in q] == [2, 0, 0]  # in flight at the restart, then failed
    loaded = s.load()
    assert loaded.prepared == [] and len(loaded.messages) == 3
