"""RabbitMQ's queue arguments over 1.0 (in memory, with a fake clock), and their config form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.amqp1.message import X_OPT_DEATHS
from amqp10.broker.config import AddressRule, BrokerConfig, QueueConfig, QueuePolicy, VhostConfig
from amqp10.broker.core import (
    ArgumentError,
    Broker,
    PreconditionFailed,
    Queue,
    ResourceLocked,
    Stream,
    VirtualHost,
    arguments_of,
    policy_with_arguments,
)
from amqp10.broker.core import store as store_
from amqp10.broker.core.equivalence import check_redeclared
from amqp10.message import Message
from amqp10.types import Accepted, Rejected
from tests.broker.harness import Client, Net, SyncJournal


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def net_with(clock: Clock | None = None, **cfg: Any) -> tuple[Net, VirtualHost]:
    net = Net(BrokerConfig(**cfg), now=clock)
    return net, net.broker.vhosts["/"]


def bodies(c: Client, r: Any, accept: bool = True) -> list[Any]:
    out = []
    for d in c.received(r):
        out.append(Message.decode(d.payload).body)
        if accept:
            d.settle(Accepted())
    c.net.pump()
    return out


def deaths(d: Any) -> list[dict[str, Any]]:
    ann = Message.decode(d.payload).message_annotations or {}
    return [{str(k): v for k, v in rec.items()} for rec in ann.get(X_OPT_DEATHS, [])]


def test_message_ttl_expires_into_the_dead_letter_exchange_with_a_death_record() -> None:
    clock = Clock()
    net, v = net_with(clock)
    v.declare_queue("dead")
    v.bind("amq.direct", "dead", "expired-work")
    v.declare_queue(
        "work",
        arguments={
            "x-message-ttl": 5000,
            "x-dead-letter-exchange": "amq.direct",
            "x-dead-letter-routing-key": "expired-work",
        },
    )
    c = net.client()
    c.send(c.sender("/exchanges/amq.default/work"), Message(body="old"))
    clock.t += 6
    c.send(c.sender("/queues/work"), Message(body="new"))
    r = c.receiver("/queues/work", credit=5)
    assert bodies(c, r) == ["new"]  # the old one expired on the way to the consumer
    dr = c.receiver("/queues/dead", credit=5)
    (d,) = c.received(dr)
    assert Message.decode(d.payload).body == "old"
    (death,) = deaths(d)
    assert death["queue"] == "work" and death["reason"] == "expired" and death["count"] == 1
    assert death["exchange"] == "" and death["routing-keys"] == ["work"]


def test_rejected_twice_counts_up_one_death_record() -> None:
    net, v = net_with()
    v.declare_exchange("dlx", "fanout")
    v.declare_queue("retry", arguments={"x-dead-letter-exchange": "dlx"})
    v.declare_queue("parking")
    v.bind("dlx", "parking")
    c = net.client()
    c.send(c.sender("/queues/retry"), Message(body="poison"))
    r = c.receiver("/queues/retry", credit=1)
    (d,) = c.received(r)
    d.settle(Rejected())
    net.pump()
    # back into the same queue from the parking lot, and rejected again
    p = c.receiver("/queues/parking", credit=1)
    (d2,) = c.received(p)
    d2.settle(Accepted())
    c.send(c.sender("/queues/retry"), d2.payload)
    r.flow(1)
    net.pump()
    (d3,) = c.received(r)
    d3.settle(Rejected())
    net.pump()
    p.flow(1)
    net.pump()
    (d4,) = c.received(p)
    (death,) = deaths(d4)
    assert (death["queue"], death["reason"], death["count"]) == ("retry", "rejected", 2)


def test_max_length_drops_the_head_by_default_and_dead_letters_it() -> None:
    net, v = net_with()
    v.declare_queue("overflowed")
    v.declare_queue("bounded", arguments={"x-max-length": 2, "x-dead-letter-exchange": ""})
    v.declare_queue("plain-bounded", arguments={"x-max-length": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "overflowed"})
    c = net.client()
    s = c.sender("/queues/plain-bounded")
    for i in range(4):
        assert isinstance(c.send(s, Message(body=i)).remote_state, Accepted)
    assert bodies(c, c.receiver("/queues/plain-bounded", credit=5)) == [2, 3]
    o = c.receiver("/queues/overflowed", credit=5)
    got = c.received(o)
    assert [Message.decode(d.payload).body for d in got] == [0, 1]
    assert deaths(got[0])[0]["reason"] == "maxlen"


def test_max_length_bytes_counts_bytes() -> None:
    net, v = net_with()
    v.declare_queue("small", arguments={"x-max-length-bytes": 110})  # two of these 53-byte messages
    c = net.client()
    s = c.sender("/queues/small")
    for i in range(5):
        c.send(s, Message(body=b"x" * 40, body_type="data", id=i))
    q = v.nodes["small"]
    assert isinstance(q, Queue) and q.bytes <= 110 and q.count == 2


def test_reject_publish_refuses_and_reject_publish_dlx_also_dead_letters() -> None:
    net, v = net_with()
    v.declare_queue("spill")
    v.declare_queue("strict", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    v.declare_queue(
        "strict-dlx",
        arguments={"x-max-length": 1, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "spill"},
    )
    c = net.client()
    for q in ("strict", "strict-dlx"):
        s = c.sender(f"/queues/{q}")
        assert isinstance(c.send(s, Message(body="first")).remote_state, Accepted)
        assert isinstance(c.send(s, Message(body="second")).remote_state, Rejected)
    assert bodies(c, c.receiver("/queues/spill", credit=5)) == ["second"]


def test_max_priority_caps_priorities() -> None:
    net, v = net_with()
    v.declare_queue("prio", arguments={"x-max-priority": 2})
    c = net.client()
    s = c.sender("/queues/prio")
    for body, prio in (("low", 0), ("high", 9), ("mid", 2), ("top", 7)):
        c.send(s, Message(body=body, priority=prio))
    # 9 and 7 count as 2: FIFO among the three at the cap, then the low one
    assert bodies(c, c.receiver("/queues/prio", credit=10)) == ["high", "mid", "top", "low"]


def test_single_active_consumer_hands_over_on_detach() -> None:
    net, v = net_with()
    v.declare_queue("sac", arguments={"x-single-active-consumer": True})
    c = net.client()
    first = c.receiver("/queues/sac", name="first", credit=10)
    second = c.receiver("/queues/sac", name="second", credit=10)
    s = c.sender("/queues/sac")
    for i in range(3):
        c.send(s, Message(body=i))
    assert bodies(c, first) == [0, 1, 2] and bodies(c, second) == []
    first.detach(closed=True)
    net.pump()
    c.send(s, Message(body=3))
    assert bodies(c, second) == [3]


def test_queue_type_stream_and_bad_arguments() -> None:
    _, v = net_with()
    assert isinstance(v.declare_queue("log", arguments={"x-queue-type": "stream"}), Stream)
    for bad in ({"x-queue-type": "mirrored"}, {"x-max-age": "7 days"}, {"x-message-ttl": -1}, {"x-max-length": "ten"}, {"x-overflow": "block"}):
        with pytest.raises(PreconditionFailed):
            v.declare_queue("bad", arguments=bad)
    # an argument the core gives no meaning to is kept, as RabbitMQ keeps it (it was refused)
    assert v.declare_queue("kept", arguments={"x-nonsense": 1}).arguments == {"x-nonsense": 1}


def test_quorum_is_a_classic_core_queue_with_its_arguments_kept() -> None:
    _, v = net_with()
    args = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3, "x-queue-leader-locator": "balanced",
            "x-dead-letter-strategy": "at-least-once", "x-delivery-limit": 5}  # fmt: skip
    q = v.declare_queue("qq", arguments=args)
    # RabbitMQ's x-delivery-limit counts returns: 5 returns, so the 6th delivery's return is the last
    assert isinstance(q, Queue) and q.policy.delivery_limit == 6
    assert q.arguments["x-queue-type"] == "quorum" and q.arguments["x-queue-leader-locator"] == "balanced"
    s = v.declare_queue("s", arguments={"x-queue-type": "stream", "x-max-age": "2h", "x-stream-max-segment-size-bytes": 1000})
    assert isinstance(s, Stream) and s.policy.max_age_seconds == 7200


def test_expires_deletes_an_unused_queue() -> None:
    clock = Clock()
    net, v = net_with(clock)
    v.declare_queue("temp", arguments={"x-expires": 10_000})
    c = net.client()
    r = c.receiver("/queues/temp", credit=1)
    clock.t += 20
    net.broker.tick()
    assert "temp" in v.nodes  # a consumer keeps it in use
    r.detach(closed=True)
    net.pump()
    clock.t += 5
    net.broker.tick()
    assert "temp" in v.nodes
    clock.t += 6
    net.broker.tick()
    assert "temp" not in v.nodes


def test_exclusive_and_auto_delete_queues() -> None:
    net, v = net_with()
    owner, other = object(), object()
    v.declare_queue("mine", exclusive_owner=owner)
    with pytest.raises(ResourceLocked):
        v.declare_queue("mine", exclusive_owner=other)
    v.owner_gone(owner)
    assert "mine" not in v.nodes
    v.declare_queue("auto", auto_delete=True)
    c = net.client()
    r = c.receiver("/queues/auto", credit=1)
    assert "auto" in v.nodes
    r.detach(closed=True)
    net.pump()
    assert "auto" not in v.nodes


def test_arguments_map_onto_queue_policies() -> None:
    p = policy_with_arguments(QueuePolicy(), {"x-message-ttl": 1500, "x-max-length": 10, "x-dead-letter-exchange": "dlx"})
    assert (p.message_ttl, p.max_length, p.overflow, p.dead_letter_exchange) == (1.5, 10, "drop-head", "dlx")
    assert arguments_of(p) == {"x-message-ttl": 1500, "x-max-length": 10, "x-overflow": "drop-head", "x-dead-letter-exchange": "dlx"}
    # today's policy names mean the same as RabbitMQ's
    assert arguments_of(QueuePolicy(max_length=5, overflow="drop-oldest")) == {"x-max-length": 5, "x-overflow": "drop-head"}
    assert arguments_of(QueuePolicy(max_length=5, overflow="reject")) == {"x-max-length": 5, "x-overflow": "reject-publish"}
    with pytest.raises(ArgumentError):
        policy_with_arguments(QueuePolicy(), {"x-unknown": 1})


def test_address_rules_take_rabbitmq_arguments() -> None:
    cfg = BrokerConfig(addresses=[AddressRule(pattern="capped.*", arguments={"x-max-length": 1})])
    net = Net(cfg)
    c = net.client()
    s = c.sender("capped.one")
    c.send(s, Message(body=1))
    c.send(s, Message(body=2))
    assert bodies(c, c.receiver("capped.one", credit=5)) == [2]  # drop-head, as RabbitMQ
    with pytest.raises(ValueError, match="x-max-length"):
        AddressRule(pattern="x", arguments={"x-max-length": "many"})


def test_declared_arguments_survive_restart(tmp_path: Path) -> None:
    s = store_.Store(tmp_path / "db.sqlite3")
    cfg = BrokerConfig(vhosts=[VhostConfig(name="/", queues=[QueueConfig(name="capped", arguments={"x-max-length": 3})])])
    Broker(cfg, journal=SyncJournal(s))
    s.close()
    fresh = Broker(BrokerConfig())
    fresh.recover(store_.Store(tmp_path / "db.sqlite3"))
    q = fresh.vhosts["/"].nodes["capped"]
    assert isinstance(q, Queue)
    assert (q.policy.max_length, q.policy.overflow, q.arguments) == (3, "drop-head", {"x-max-length": 3})


def test_a_table_valued_argument_keeps_its_order_across_a_restart(tmp_path: Path) -> None:
    """A table argument RabbitMQ compares (in order) is the same table after a restart: a
    re-declaration as before is equivalent (the store sorted its keys: refused)."""
    table = {"b": 1, "a": 2}
    s = store_.Store(tmp_path / "db.sqlite3")
    Broker(BrokerConfig(), journal=SyncJournal(s)).default.declare_queue("t", arguments={"x-queue-master-locator": table})
    s.close()
    fresh = Broker(BrokerConfig())
    fresh.recover(store_.Store(tmp_path / "db.sqlite3"))
    q = fresh.vhosts["/"].nodes["t"]
    assert list(q.arguments["x-queue-master-locator"]) == ["b", "a"]
    check_redeclared(fresh.default, q, durable=True, auto_delete=False, exclusive=False, arguments={"x-queue-master-locator": table})


def test_management_declares_a_queue_with_arguments() -> None:
    net, v = net_with()
    c = net.client()
    r = c.receiver("replies", credit=2)
    s = c.sender("$management")
    req = Message(body={"name": "m", "arguments": {"x-max-length": 7}}, reply_to="replies")
    req.application_properties = {"operation": "declare-queue"}
    c.send(s, req)
    (d,) = c.received(r)
    assert Message.decode(d.payload).application_properties == {"status-code": 201}
    q = v.nodes["m"]
    assert isinstance(q, Queue) and q.policy.max_length == 7
    bad = Message(body={"name": "n", "arguments": {"x-max-length": "x"}}, reply_to="replies")
    bad.application_properties = {"operation": "declare-queue"}
    c.send(s, bad)
    (d,) = c.received(r)
    assert Message.decode(d.payload).application_properties == {"status-code": 409}



def test_deleting_a_queue_cancels_its_consumers() -> None:
    from amqp10.transport import LinkDetached
    from amqp10.types import ErrorCondition

    net, v = net_with()
    v.declare_queue("doomed")
    c = net.client()
    c.send(c.sender("/queues/doomed"), Message(body=1))
    r = c.receiver("/queues/doomed", credit=5)
    assert len(c.received(r)) == 1  # in flight when the queue goes
    v.delete_node("doomed")
    net.pump()
    (gone,) = [e for e in c.events if isinstance(e, LinkDetached)]
    assert gone.link is r and gone.error is not None
    assert gone.error.condition == ErrorCondition.RESOURCE_DELETED
    assert "doomed" not in v.nodes


def test_get_takes_one_message_without_a_consumer() -> None:
    net, v = net_with()
    q = v.declare_queue("pull")
    assert isinstance(q, Queue)
    c = net.client()
    s = c.sender("/queues/pull")
    for i in range(2):
        c.send(s, Message(body=i))
    first = q.get()
    assert first is not None and Message.decode(first.data).body == 0
    q.release(first, delivery_failed=True)  # basic.nack with requeue
    again = q.get()
    assert again is first and again.delivery_count == 1
    q.ack(again)
    last = q.get()
    assert last is not None and Message.decode(last.data).body == 1
    q.ack(last)
    assert q.get() is None and q.stats.acked == 2


def test_a_config_files_queue_arguments_are_checked_when_it_is_read(tmp_path: Path) -> None:
    """A queue the config file declares with an argument RabbitMQ refuses is an error of the
    file, naming the field (it stopped the broker's start with a declaration's 406)."""
    from amqp10.broker.config import ConfigError, load_config

    path = tmp_path / "broker.toml"
    for arguments, words in (
        ("{ x-max-length = -1 }", "x-max-length must not be negative (-1)"),
        ('{ x-single-active-consumer = "yes" }', "x-single-active-consumer must be true or false, not a longstr"),
        ('{ x-dead-letter-routing-key = "k" }', "x-dead-letter-routing-key needs x-dead-letter-exchange"),
        ("{ x-max-lenght = 5 }", "unknown queue argument 'x-max-lenght'"),  # (a typo: kept, unread, by a declaration)
        ('{ "qpid.max_cuont" = 5 }', "unknown queue argument 'qpid.max_cuont'"),
    ):
        path.write_text(f'[[vhosts]]\nname = "/"\n[[vhosts.queues]]\nname = "q"\narguments = {arguments}\n')
        with pytest.raises(ConfigError) as refused:
            load_config(path)
        assert "vhosts.0.queues.0.QueueConfig.arguments" in str(refused.value) and words in str(refused.value)
    path.write_text('[[vhosts]]\nname = "/"\n[[vhosts.queues]]\nname = "q"\narguments = { app-tag = "kept" }\n')
    assert load_config(path).vhosts[0].queues[0].arguments == {"app-tag": "kept"}  # (not RabbitMQ's nor Qpid's: kept)
