"""Core operations say why: ``node.admits`` returns a :class:`ConsumeResult` (admitted, or
why not: an exclusive consumer holds the node, or an exclusive consumer asked for a node
in use), which each front end maps to its protocol's answer; only ``ADMITTED`` is true."""

from __future__ import annotations

import pytest

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, ConsumeResult, Queue, Stream, VirtualHost
from tests.broker.harness import Taker


def vhost() -> VirtualHost:
    return Broker(BrokerConfig(), now=lambda: 1000.0).vhosts["/"]


class Exclusive(Taker):
    exclusive = True


def test_only_admitted_is_true() -> None:
    assert [bool(r) for r in ConsumeResult] == [r is ConsumeResult.ADMITTED for r in ConsumeResult]


@pytest.mark.parametrize("kind", ["classic", "stream"])
def test_a_node_admits_consumers_until_an_exclusive_one_holds_it(kind: str) -> None:
    q = vhost().declare_queue("q", durable=kind == "stream", arguments={"x-queue-type": kind})  # (a stream is durable)
    assert isinstance(q, Stream if kind == "stream" else Queue)
    assert q.admits() is ConsumeResult.ADMITTED
    assert q.admits(exclusive=True) is ConsumeResult.ADMITTED  # nobody consumes yet
    holder = Exclusive(0, cid=1)
    q.add_consumer(holder)
    assert q.admits() is ConsumeResult.EXCLUSIVE_HELD
    assert q.admits(exclusive=True) is ConsumeResult.EXCLUSIVE_HELD
    q.remove_consumer(holder)
    assert q.admits(exclusive=True) is ConsumeResult.ADMITTED  # it let go


def test_an_exclusive_consumer_is_refused_a_queue_in_use() -> None:
    q = vhost().declare_queue("q", durable=False)
    q.add_consumer(Taker(0, cid=1))
    assert q.admits() is ConsumeResult.ADMITTED  # sharing is fine
    assert q.admits(exclusive=True) is ConsumeResult.IN_USE
