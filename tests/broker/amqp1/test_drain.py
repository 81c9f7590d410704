"""Drain (Part 2 §2.6.7) against the broker, in memory: every case of what the node
holds against the credit, and rhea's drain.js pattern (batches of credit, draining)."""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.message import Message
from amqp10.transport import FlowReceived, Receiver
from amqp10.types import Source, symbol
from tests.broker.harness import Client, Net


def fill(c: Client, address: str, n: int) -> None:
    s = c.sender(address)
    for i in range(n):
        c.send(s, Message(body=i), settled=True)


def drained_flows(c: Client, r: Receiver) -> list[Any]:
    return [e for e in c.events if isinstance(e, FlowReceived) and e.link is r and e.drained]


@pytest.mark.parametrize(("held", "credit"), [(0, 5), (3, 5), (5, 5), (8, 5)])
def test_drain_sends_what_the_node_has_then_gives_the_rest_back(held: int, credit: int) -> None:
    net = Net()
    c = net.client()
    fill(c, "dq", held)
    r = c.receiver("dq")
    r.flow(credit, drain=True)
    net.pump()
    got = c.received(r)
    assert len(got) == min(held, credit)
    if held <= credit:
        # all there was, then delivery-count advanced over the rest, credit 0, drain echoed
        assert len(drained_flows(c, r)) == 1
        assert r.delivery_count == credit and r.credit == 0
    else:
        # the credit went on transfers and more wait: the receiver is not told "empty"
        assert not drained_flows(c, r)
        assert r.credit == 0


def test_drain_on_an_empty_node_after_earlier_credit() -> None:
    net = Net()
    c = net.client()
    fill(c, "dq2", 2)
    r = c.receiver("dq2", credit=10)
    assert len(c.received(r)) == 2
    r.drain_credit()
    net.pump()
    assert len(drained_flows(c, r)) == 1 and r.credit == 0 and r.delivery_count == 10


@pytest.mark.parametrize("held", [0, 7, 10, 20, 25])
def test_rhea_drain_example_pattern_gets_everything_then_stops(held: int) -> None:
    """rhea's examples/drain.js: credit 10 with drain set, 10 more each time 10 arrived,
    stop at the first flow that says drain."""
    net = Net()
    c = net.client()
    fill(c, "dq3", held)
    r = c.receiver("dq3")
    r.flow(10, drain=True)
    net.pump()
    total = 0
    for _ in range(held // 10 + 2):
        total += len(c.received(r))
        if drained_flows(c, r):
            break
        assert total % 10 == 0
        r.flow(10, drain=True)  # rhea's add_credit(10) with drain still set
        net.pump()
    assert total == held and drained_flows(c, r)


def test_drain_on_a_browser_and_a_stream() -> None:
    net = Net()
    c = net.client()
    fill(c, "browsed", 3)
    b = c.receiver(None, source=Source(address="browsed", distribution_mode="copy"))
    b.flow(3, drain=True)
    net.pump()
    assert len(c.received(b)) == 3 and len(drained_flows(c, b)) == 1
    b2 = c.receiver(None, source=Source(address="browsed", distribution_mode="copy"))
    b2.flow(2, drain=True)
    net.pump()
    assert len(c.received(b2)) == 2 and not drained_flows(c, b2)  # one more to browse
    net.broker.default.create_node("st", "stream")
    fill(c, "st", 3)
    s1 = c.receiver(None, source=Source(address="st", filter={symbol("amqp10:stream-offset"): "first"}))
    s1.flow(2, drain=True)
    net.pump()
    assert len(c.received(s1)) == 2 and not drained_flows(c, s1)
    s1.flow(5, drain=True)
    net.pump()
    assert len(c.received(s1)) == 1 and len(drained_flows(c, s1)) == 1
