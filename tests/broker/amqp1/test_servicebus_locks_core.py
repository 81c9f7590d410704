"""Peek-locks on a fake clock, in memory (the broker's front end and core, no sockets): a
lock that runs out gives the message back, and the late settlement is refused lock-lost."""

from __future__ import annotations

from typing import Any

from amqp10.broker.amqp1.servicebus.consumer import MESSAGE_LOCK_LOST
from amqp10.broker.amqp1.servicebus.entities import declare_entities
from amqp10.broker.amqp1.servicebus.tokens import Grant
from amqp10.broker.config import BrokerConfig
from amqp10.message import Message
from amqp10.types import Accepted, ReceiverSettleMode, Rejected
from tests.broker.core.test_leases import Clock
from tests.broker.harness import Client, Net

LOCK = 30.0


def _setup() -> tuple[Clock, Net, Client, Any]:
    clock = Clock()
    config = BrokerConfig.model_validate(
        {"servicebus": {"enabled": True, "queues": [{"name": "q", "lock_duration": LOCK, "max_delivery_count": 3}]}}
    )
    net = Net(config, now=clock)
    declare_entities(net.broker.default, config.servicebus)
    c = net.client()
    c.handler.use_claims(config.servicebus)  # as for a connection without a user
    assert c.handler.gate is not None
    c.handler.gate.grants["q"] = Grant("sb://host/q", frozenset({"Listen", "Send"}), clock.t + 10 * LOCK)
    return clock, net, c, net.broker.default.nodes["q"]


def test_a_lock_runs_out_on_time_and_its_late_settlement_is_lock_lost() -> None:
    clock, net, c, q = _setup()
    c.send(c.sender("q"), Message(body="m"))
    r = c.receiver("q", credit=1, rcv_settle_mode=ReceiverSettleMode.SECOND)
    (d,) = c.received(r)
    assert len(net.broker.leases) == 1 and net.broker.leases.next_deadline() == clock.t + LOCK
    clock.t += LOCK - 0.001
    assert net.broker.leases.expire_due() == 0 and q.stats.unacked == 1  # not yet
    clock.t += 0.001
    assert net.broker.leases.expire_due() == 1
    net.pump()
    assert q.stats.unacked == 0 and q.count == 1  # back in the queue (no credit left to resend it)
    d.accept()  # too late
    net.pump()
    assert isinstance(d.remote_state, Rejected) and str(d.remote_state.error.condition) == MESSAGE_LOCK_LOST
    assert q.count == 1  # the late accept did not take it
    r.flow(1)
    net.pump()
    (again,) = c.received(r)
    assert Message.decode(again.payload).header.delivery_count == 1
    again.accept()
    net.pump()
    assert isinstance(again.remote_state, Accepted) and q.count == 0 and q.stats.unacked == 0
    assert len(net.broker.leases) == 0  # settled: its lease is dropped


def test_settling_in_time_drops_the_lease_and_a_lost_link_drops_its_leases() -> None:
    clock, net, c, q = _setup()
    snd = c.sender("q")
    for body in ("a", "b"):
        c.send(snd, Message(body=body))
    r = c.receiver("q", credit=2)
    first, second = c.received(r)
    first.accept()
    net.pump()
    assert len(net.broker.leases) == 1 and q.stats.unacked == 1
    r.detach(closed=True)
    net.pump()
    assert len(net.broker.leases) == 0 and q.count == 1  # "b" back, a failed delivery
    clock.t += 2 * LOCK
    assert net.broker.leases.expire_due() == 0 and q.count == 1
