"""Consumer priorities in the core's queue: higher-priority consumers with credit first,
round-robin among equals, lower ones only while no higher one can take (counted)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.amqp1 import parse_transfer
from amqp10.broker.config import QueuePolicy
from amqp10.broker.core import Node, Queue, QueuedMessage
from amqp10.message import Message


class PrioConsumer:
    def __init__(self, cid: int, priority: int, room: int, log: list[int], all_: list[PrioConsumer]) -> None:
        self.id = cid
        self.browse = False
        self.priority = priority
        self.room = room
        self.log = log
        self.all = all_
        self.held: list[QueuedMessage] = []

    def credit(self) -> int:
        return self.room

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        assert self.room > 0
        higher = [c.id for c in self.all if c.priority > self.priority and c.room > 0]
        assert not higher, f"{self.id} (priority {self.priority}) served while {higher} had room"
        self.room -= 1
        self.held.append(msg)
        self.log.append(self.id)

    def cancelled(self) -> None:  # pragma: no cover - queues are not deleted here
        pass


def msg(i: int) -> QueuedMessage:
    return parse_transfer(Message(body=i).encode(), 0.0)


def setup(*specs: tuple[int, int]) -> tuple[Queue, list[PrioConsumer], list[int]]:
    q = Queue("q", QueuePolicy(), now=lambda: 0.0)
    log: list[int] = []
    consumers: list[PrioConsumer] = []
    for i, (priority, room) in enumerate(specs, 1):
        c = PrioConsumer(i, priority, room, log, consumers)
        consumers.append(c)
        q.add_consumer(c)
    return q, consumers, log


def publish(q: Queue, n: int) -> None:
    for i in range(n):
        q.publish(msg(i), lambda: None)


def test_higher_priority_first_then_lower() -> None:
    q, _, log = setup((0, 100), (10, 3), (10, 3))
    publish(q, 10)
    assert log[:6] == [2, 3, 2, 3, 2, 3]  # the two priority-10 consumers, round-robin
    assert log[6:] == [1, 1, 1, 1]  # then the priority-0 one
    assert q.count == 0


def test_higher_consumer_with_room_again_takes_over() -> None:
    q, (low, high), log = setup((0, 100), (5, 2))
    publish(q, 4)
    assert Counter(log) == {2: 2, 1: 2}
    high.room = 3  # (an ack made prefetch room)
    q.consumer_ready(high)
    log.clear()
    publish(q, 5)
    assert log == [2, 2, 2, 1, 1]


def test_equal_priorities_round_robin_by_count() -> None:
    q, _, log = setup((3, 1000), (3, 1000), (3, 1000), (-1, 1000))
    publish(q, 300)
    assert Counter(log) == {1: 100, 2: 100, 3: 100}


def test_negative_priority_below_default() -> None:
    q, _, log = setup((-5, 10), (0, 3))
    publish(q, 5)
    assert log == [2, 2, 2, 1, 1]


def test_removed_consumer_leaves_its_ring() -> None:
    q, consumers, log = setup((7, 100), (7, 100), (0, 100))
    a, b, _ = consumers
    q.remove_consumer(a)
    consumers.remove(a)
    publish(q, 4)
    assert log == [2, 2, 2, 2]
    q.remove_consumer(b)
    consumers.remove(b)
    log.clear()
    publish(q, 2)
    assert log == [3, 3]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 5)),
        st.tuples(st.just("room"), st.integers(0, 3), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.integers(0, 3), st.integers(1, 4)),
        st.tuples(st.just("release"), st.integers(0, 3), st.integers(1, 4)),
    ),
    max_size=50,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2, 2), min_size=4, max_size=4), ops)
def test_never_lower_while_higher_has_room(priorities: list[int], script: list[tuple[int, ...]]) -> None:
    """Under random publishes, credit grants, acks and releases: each delivery goes to a
    consumer with no higher-priority one having room (checked in deliver), and the queue
    never holds messages while some consumer has room."""
    q, consumers, _ = setup(*[(p, 0) for p in priorities])
    for op in script:
        if op[0] == "publish":
            publish(q, op[1])
        else:
            c = consumers[op[1]]
            if op[0] == "room":
                c.room += op[2]
                q.consumer_ready(c)
            else:
                for m in c.held[: op[2]]:
                    if op[0] == "ack":
                        q.ack(m)
                    else:
                        q.release(m)
                del c.held[: op[2]]
        assert q.count == 0 or all(c.room == 0 for c in consumers)
