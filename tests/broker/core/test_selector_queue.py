"""A selector on a queue is its consumer's view: the queue's take step, under random operations."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.amqp1 import parse_transfer
from amqp10.broker.config import QueuePolicy
from amqp10.broker.core import Node, Queue, QueuedMessage
from amqp10.broker.core.selector import compile_selector
from amqp10.message import Message


class FakeConsumer:
    def __init__(self, cid: int, selector: Any, queue: Queue, log: list[str]) -> None:
        self.id = cid
        self.browse = False
        self.selector = selector
        self.queue = queue
        self.room = 0
        self.held: list[QueuedMessage] = []
        self.log = log

    def credit(self) -> int:
        return self.room

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        self.room -= 1
        assert self.selector is None or self.selector(msg), "a message outside the consumer's view"
        assert all(m is not msg for m in self.held)
        for other in self.queue:  # nothing it could have taken comes before what it took
            if self.selector is None or self.selector(other):
                ahead = other.priority > msg.priority or (other.priority == msg.priority and other.seq < msg.seq)
                assert not ahead, f"{self.id} took seq {msg.seq} before seq {other.seq}"
        self.held.append(msg)

    def cancelled(self) -> None:  # pragma: no cover - queues are not deleted here
        pass


def make(i: int, color: str, priority: int) -> QueuedMessage:
    m = Message(body=i, priority=priority, application_properties={"color": color, "i": i})
    return parse_transfer(m.encode(), 0.0)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.sampled_from(["red", "blue", "green"]), st.sampled_from([0, 4, 9])),
        st.tuples(st.just("credit"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("release"), st.integers(0, 2), st.integers(0, 10)),
        st.tuples(st.just("ack"), st.integers(0, 2), st.integers(0, 10)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_selective_consumers_take_in_order_and_leave_the_rest(steps: list[tuple[str, Any, Any]]) -> None:
    q = Queue("q", QueuePolicy(), now=lambda: 0.0)
    log: list[str] = []
    consumers = [
        FakeConsumer(1, compile_selector("color = 'red'"), q, log),
        FakeConsumer(2, compile_selector("color <> 'red' AND i >= 0"), q, log),
        FakeConsumer(3, None, q, log),
    ]
    published = acked = 0
    for c in consumers:
        q.add_consumer(c)
    for op, a, b in steps:
        if op == "publish":
            q.publish(make(published, a, b), lambda: None)
            published += 1
        elif op == "credit":
            consumers[a].room += b
            q.consumer_ready(consumers[a])  # what a front end says when credit arrives
        else:
            held = consumers[a].held
            if held:
                m = held.pop(b % len(held))
                if op == "ack":
                    q.ack(m)
                    acked += 1
                else:
                    q.release(m)
        held_total = sum(len(c.held) for c in consumers)
        assert q.count + held_total + acked == published
    # the two selective consumers' views cover every message: with credit enough, they
    # take all that is left (released ones included)
    for c in consumers[:2]:
        c.room += published
        q.consumer_ready(c)
    assert q.count == 0
    seen = sorted(m.seq for c in consumers for m in c.held)
    assert len(seen) == len(set(seen))
