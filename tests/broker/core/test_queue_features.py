"""Qpid's queue features in the core (core/features.py): priority levels, fair share, ring
overflow by priority, groups keyed by a header (shared groups), last-value queues and
sequence numbers; and the arguments that ask for them, on every protocol."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.amqp1.message import parse_transfer
from amqp10.broker.config import BrokerConfig, QueueConfig, VhostConfig
from amqp10.broker.core import Broker, Queue, QueuedMessage, VirtualHost
from amqp10.broker.core import store as st
from amqp10.broker.core.arguments import ArgumentError, arguments_of, policy_with_arguments
from amqp10.broker.core.features import NO_GROUP
from amqp10.broker.core.nodes import Node
from amqp10.broker.core.queue_policy import QueuePolicy
from amqp10.message import Message
from amqp10.types import symbol
from tests.broker.core.test_queue_arguments import Clock
from tests.broker.harness import Net, SyncJournal


class Msg(QueuedMessage):
    """A message with application headers (what Qpid's features read), kept beside ``data``."""

    __slots__ = ("props",)

    def __init__(self, name: str, priority: int = 4, **props: Any) -> None:
        super().__init__(name.encode(), priority=priority)
        self.props = dict(props)

    def _read_headers(self) -> Mapping[str, Any]:
        return self.props

    def with_header(self, name: str, value: Any) -> bytes:
        self.props[name] = value
        return self.data + b"+"

    def copy(self) -> QueuedMessage:
        return self


class Sub:
    """A consumer that keeps what it is given (``credit`` of them at most)."""

    browse = False

    def __init__(self, cid: int, credit: int = 100) -> None:
        self.id = cid
        self.room = credit
        self.got: list[QueuedMessage] = []

    def credit(self) -> int:
        return self.room - len(self.got)

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        self.got.append(msg)

    def cancelled(self) -> None:
        pass


def queue(**arguments: Any) -> Queue:
    return Queue("q", policy_with_arguments(QueuePolicy(), arguments), now=lambda: 0.0)


def publish(q: Queue, *msgs: QueuedMessage) -> None:
    for m in msgs:
        q.publish(m, lambda: None)


def drain(q: Queue) -> list[str]:
    out = []
    while (m := q.get()) is not None:
        q.ack(m)
        out.append(m.data.decode())
    return out


def names(msgs: list[QueuedMessage]) -> list[str]:
    return [m.data.decode() for m in msgs]


# -- arguments ---------------------------------------------------------------------------------
def test_qpid_arguments_map_onto_the_policy_and_are_listed_back() -> None:
    p = policy_with_arguments(
        QueuePolicy(),
        {
            "qpid.max_count": "4",
            "qpid.policy_type": "ring",
            "x-qpid-priorities": 5,
            "qpid.group_header_key": "g",
            "qpid.shared_msg_group": 1,
            "qpid.last_value_queue_key": "k",
            "qpid.queue_msg_sequence": "qpid.seq",
            "qpid.fairshare": 3,
            "x-qpid-fairshare-2": 1,
        },
    )
    assert (p.max_length, p.overflow, p.priority_levels) == (4, "drop-head", 5)
    assert (p.group_key, p.shared_groups, p.last_value_key, p.sequence_header) == ("g", True, "k", "qpid.seq")
    assert p.fairshare[:4] == (3, 3, 1, 3)
    listed = arguments_of(p)
    assert listed["qpid.priorities"] == 5 and listed["qpid.fairshare-2"] == 1 and "x-qpid-priorities" not in listed
    assert policy_with_arguments(QueuePolicy(), {"qpid.max_count": 0}).max_length is None  # Qpid: no limit
    assert not QueuePolicy().has_features and p.has_features
    with pytest.raises(ArgumentError, match=r"qpid\.policy_type"):
        policy_with_arguments(QueuePolicy(), {"qpid.policy_type": "flow_to_disk"})
    with pytest.raises(ArgumentError, match=r"qpid\.priorities"):
        policy_with_arguments(QueuePolicy(), {"qpid.priorities": "many"})


def test_a_queue_without_qpid_arguments_has_no_features() -> None:
    assert queue().features is None and queue(**{"x-max-length": 3}).features is None


# -- priorities ----------------------------------------------------------------------------------
def test_qpid_priority_levels_spread_0_to_9_over_the_levels_centred_on_4_and_5() -> None:
    q = queue(**{"qpid.priorities": 5})  # 0-2, 3, 4, 5, 6-9
    publish(q, *[Msg(f"p{p}", p) for p in (0, 9, 2, 6, 3, 5, 4, 1)])
    assert drain(q) == ["p9", "p6", "p5", "p4", "p3", "p0", "p2", "p1"]
    q = queue(**{"qpid.priorities": 10})  # every priority its own level; above 9 is 9
    publish(q, *[Msg(f"p{p}", p) for p in (9, 15, 10, 8)])
    assert drain(q) == ["p9", "p15", "p10", "p8"]


def test_fair_share_lets_lower_levels_in_after_a_levels_share() -> None:
    q = queue(**{"qpid.priorities": 10, "qpid.fairshare": 2})
    publish(q, *[Msg(f"h{i}", 9) for i in range(5)], *[Msg(f"l{i}", 1) for i in range(3)])
    assert drain(q) == ["h0", "h1", "l0", "l1", "h2", "h3", "l2", "h4"]


def test_fair_share_per_level_limit_and_zero_for_none() -> None:
    q = queue(**{"qpid.priorities": 10, "qpid.fairshare-9": 0, "qpid.fairshare-5": 1})
    publish(q, *[Msg(f"m{i}", 5) for i in range(3)], *[Msg(f"h{i}", 9) for i in range(3)], Msg("l", 1))
    assert drain(q) == ["h0", "h1", "h2", "m0", "l", "m1", "m2"]


def test_a_full_ring_queue_with_levels_drops_the_lowest_level_oldest_first() -> None:
    q = queue(**{"qpid.priorities": 10, "qpid.policy_type": "ring", "qpid.max_count": 3})
    publish(q, Msg("a5", 5), Msg("b2", 2), Msg("c9", 9), Msg("d2", 2), Msg("e1", 1), Msg("f7", 7))
    # d2 pushed out b2 (both level 2: the older goes); e1 was the lowest itself; f7 pushed out d2
    assert drain(q) == ["c9", "f7", "a5"]
    assert q.stats.dropped == 3


def test_a_ring_queue_without_levels_still_drops_the_oldest() -> None:
    q = queue(**{"qpid.policy_type": "ring", "qpid.max_count": 2})
    publish(q, Msg("a", 9), Msg("b", 1), Msg("c", 1))
    assert drain(q) == ["b", "c"]


# -- groups keyed by a header ---------------------------------------------------------------------
def test_groups_by_header_with_the_default_group_for_messages_without_it() -> None:
    q = queue(**{"qpid.group_header_key": "g"})
    c1, c2 = Sub(1, credit=1), Sub(2, credit=10)
    q.add_consumer(c1)
    publish(q, Msg("A0", g="A"), Msg("n0"), Msg("B0", g="B"), Msg("n1"), Msg("A1", g="A"))
    q.add_consumer(c2)
    assert names(c1.got) == ["A0"] and names(c2.got) == ["n0", "B0", "n1"]  # A is c1's
    assert c2.got[0].group == NO_GROUP


def test_shared_groups_are_free_once_their_messages_are_settled() -> None:
    q = queue(**{"qpid.group_header_key": "g", "qpid.shared_msg_group": "1"})
    publish(q, Msg("A0", g="A"), Msg("A1", g="A"), Msg("B2", g="B"), Msg("B3", g="B"))
    c1, c2 = Sub(1, credit=1), Sub(2, credit=1)
    q.add_consumer(c1)
    q.add_consumer(c2)
    assert names(c1.got) == ["A0"] and names(c2.got) == ["B2"]
    q.ack(c1.got[0])  # A is free again: the next consumer to ask gets A1
    c2.room += 1
    q.consumer_ready(c2)
    assert names(c2.got) == ["B2", "A1"]
    c1.room += 1
    q.consumer_ready(c1)
    assert names(c1.got) == ["A0"]  # B3 is c2's (B2 still out), A1 too
    q.release(c2.got[0])  # B2 back: group B free, c1 takes it in order
    assert names(c1.got) == ["A0", "B2"]


def test_a_sticky_group_stays_with_its_owner_after_a_settle() -> None:
    q = queue(**{"qpid.group_header_key": "g"})
    publish(q, Msg("A0", g="A"), Msg("A1", g="A"))
    c1, c2 = Sub(1, credit=1), Sub(2, credit=1)
    q.add_consumer(c1)
    q.add_consumer(c2)
    q.ack(c1.got[0])
    q.consumer_ready(c2)
    assert not c2.got  # A is still c1's: it has not left


# -- last value ------------------------------------------------------------------------------------
def test_a_last_value_queue_keeps_the_newest_of_each_key_at_the_back() -> None:
    q = queue(**{"qpid.last_value_queue_key": "k"})
    publish(q, Msg("a1", k="a"), Msg("b1", k="b"), Msg("a2", k="a"), Msg("x"), Msg("a3", k="a"), Msg("c1", k="c"))
    assert q.count == 4 and q.stats.dropped == 2
    assert drain(q) == ["b1", "x", "a3", "c1"]


def test_a_last_value_does_not_replace_an_acquired_message() -> None:
    q = queue(**{"qpid.last_value_queue_key": "k"})
    publish(q, Msg("a1", k="a"))
    taken = q.get()
    assert taken is not None
    publish(q, Msg("a2", k="a"))
    assert q.count == 1 and drain(q) == ["a2"]
    q.ack(taken)


def test_a_ring_last_value_queue_replaces_before_it_drops() -> None:
    q = queue(**{"qpid.last_value_queue_key": "k", "qpid.policy_type": "ring", "qpid.max_count": 2})
    publish(q, Msg("a1", k="a"), Msg("b1", k="b"), Msg("a2", k="a"), Msg("c1", k="c"))
    assert drain(q) == ["a2", "c1"]


# -- sequence numbers -------------------------------------------------------------------------------
def test_sequence_numbers_count_every_enqueue_with_gaps_where_a_ring_dropped() -> None:
    q = queue(**{"qpid.queue_msg_sequence": "qpid.seq", "qpid.policy_type": "ring", "qpid.max_count": 2})
    msgs = [Msg(f"m{i}") for i in range(4)]
    publish(q, *msgs)
    got = []
    while (m := q.get()) is not None:
        got.append(m)
    assert [m.headers["qpid.seq"] for m in got] == [3, 4]
    assert got[0].data == b"m2+" and got[0].size == 3  # rewritten, and sized again


# -- Qpid's alternate exchange on delete ---------------------------------------------------------------
def with_alternate(on_delete: bool = False) -> tuple[VirtualHost, Queue, Queue]:
    """A virtual host, a queue ``doomed`` whose dead-letter exchange ``alt`` routes to ``kept``
    (``on_delete``: its alternate exchange too, Qpid's ``alternate-exchange`` argument)."""
    vh = Net().broker.vhosts["/"]
    vh.declare_exchange("alt", "fanout")
    kept = vh.declare_queue("kept", durable=False)
    vh.bind("alt", "kept")
    arguments = {"x-dead-letter-exchange": "alt"} | ({"alternate-exchange": "alt"} if on_delete else {})
    q = vh.declare_queue("doomed", durable=False, arguments=arguments)
    assert isinstance(q, Queue) and isinstance(kept, Queue)
    return vh, q, kept


def test_a_deleted_queue_with_an_alternate_exchange_hands_its_messages_to_it() -> None:
    vh, q, kept = with_alternate(on_delete=True)
    publish(q, Msg("held"), Msg("left-1"), Msg("left-2"))
    held = q.get()
    assert held is not None
    vh.delete_node("doomed")
    assert kept.count == 2  # what was left, at once
    q.release(held)  # what a consumer held, as it comes back
    assert drain(kept) == ["left-1", "left-2", "held"]


def test_a_deleted_queue_without_it_drops_its_messages_as_rabbitmq_does() -> None:
    vh, q, kept = with_alternate()
    publish(q, Msg("left"))
    vh.delete_node("doomed")
    assert kept.count == 0


# -- Qpid's auto-delete timeout ---------------------------------------------------------------------------
def test_an_auto_delete_timeout_keeps_the_queue_that_long_once_unused() -> None:
    clock = Clock()
    net = Net(now=clock)
    vh = net.broker.vhosts["/"]
    owner = object()
    vh.declare_queue("excl", durable=False, exclusive_owner=owner, arguments={"qpid.auto_delete_timeout": 3})
    vh.declare_queue("plain", durable=False, exclusive_owner=owner)
    shared = vh.declare_queue("shared", durable=False, auto_delete=True, arguments={"qpid.auto_delete_timeout": "3"})
    assert isinstance(shared, Queue)
    sub = Sub(1)
    shared.add_consumer(sub)
    shared.remove_consumer(sub)
    vh.owner_gone(owner)
    assert "plain" not in vh.nodes  # no timeout: at once, as before
    q = vh.queue("excl")
    assert isinstance(q, Queue) and q.owner is None  # kept, and no longer exclusive
    clock.t += 2
    net.broker.tick()
    assert "excl" in vh.nodes and "shared" in vh.nodes
    clock.t += 2
    net.broker.tick()
    assert "excl" not in vh.nodes and "shared" not in vh.nodes


# -- 1.0 messages, and a restart ---------------------------------------------------------------------------
def test_1_0_messages_on_a_durable_last_value_queue_with_groups_and_numbers_across_a_restart(tmp_path: Path) -> None:
    args = {
        "qpid.last_value_queue_key": "k",
        "qpid.group_header_key": "g",
        "qpid.queue_msg_sequence": "n",
    }
    cfg = BrokerConfig(vhosts=[VhostConfig(name="/", queues=[QueueConfig(name="lv", arguments=args)])])
    store = st.Store(tmp_path / "db.sqlite3")
    net = Net()
    net.broker = Broker(cfg, journal=SyncJournal(store))
    p = net.client("p")
    s = p.sender("lv")
    for body, k in (("a-1", "a"), ("b-1", "b"), ("a-2", "a")):
        p.send(s, Message(body=body, durable=True, application_properties={"k": k, "g": k}))
    fresh = Broker(BrokerConfig())
    assert fresh.recover(store) == 2
    q = fresh.nodes["lv"]
    assert isinstance(q, Queue) and q.features is not None
    assert [m.group for m in q] == ["b", "a"]
    replacing = parse_transfer(Message(body="b-2", application_properties={"k": "b"}).encode(), 0.0)
    q.publish(replacing, lambda: None)
    left = [Message.decode(m.data) for m in q]
    assert [m.body for m in left] == ["a-2", "b-2"]
    # a 1.0 message gets its number as a message annotation (its bare message is the sender's)
    assert [(m.message_annotations or {}).get(symbol("n")) for m in left] == [3, 4]


def test_a_new_policy_keeps_the_last_values_and_the_numbers() -> None:
    q = queue(**{"qpid.last_value_queue_key": "k", "qpid.queue_msg_sequence": "n"})
    publish(q, Msg("a1", k="a"))
    q.set_policy(q.policy.model_copy(update={"max_length": 10}))
    publish(q, Msg("a2", k="a"))
    got = q.get()
    assert got is not None and got.data == b"a2+" and got.headers["n"] == 2 and q.count == 0


def test_a_last_value_queue_forgets_keys_whose_message_left() -> None:
    q = queue(**{"qpid.last_value_queue_key": "k"})
    for i in range(3000):  # each its own key, each consumed at once
        publish(q, Msg(f"m{i}", k=i))
        taken = q.get()
        assert taken is not None
        q.ack(taken)
    publish(q, Msg("again", k=2999), Msg("list", k=[1]))  # (a list is no key)
    assert q.features is not None and q.features.keys_known <= 1025
    assert drain(q) == ["again", "list"]
