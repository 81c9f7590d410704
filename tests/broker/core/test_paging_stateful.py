"""Hypothesis over a paged queue: publishes, plain and selective takes, releases, acks,
browses and PEEKs in any order, against a model list; the queue keeps arrival order,
every reader sees what the model holds, and memory stays within the budget."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqp10.broker.core.message import QueuedMessage
from amqp10.broker.core.paging import MESSAGE_OVERHEAD

from .test_paging import BUDGET, Taker, body, make, msg, queue
from .test_paging_browse import Browser

SLACK = 200 + MESSAGE_OVERHEAD  # a refill reads at least one message, whatever the room


class PagedQueue(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.broker, self.journal, self.store = make(Path(self.dir.name) / "s.db")
        self.q = queue(self.broker)
        self.model: list[int] = []  # bodies in the queue, in arrival order
        self.red: set[int] = set()  # those whose subject is "red"
        self.held: list[QueuedMessage] = []  # taken, not settled
        self.next = 0
        self.cid = 10
        self.released = 0  # a release goes back to memory whatever the budget (it was there)

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()

    def _consumer(self, consumer: Taker) -> list[int]:
        self.q.add_consumer(consumer)
        self.journal.commit()
        self.q.remove_consumer(consumer)
        self.cid += 1
        return [body(m) for m in consumer.got]

    @rule(n=st.integers(1, 40), durable=st.booleans(), red=st.sampled_from([0, 1, 5]))
    def publish(self, n: int, durable: bool, red: int) -> None:
        for _ in range(n):
            i = self.next
            self.next += 1
            is_red = red and i % red == 0
            assert self.q.publish(msg(i, durable=durable, subject="red" if is_red else "blue"), lambda: None)
            self.model.append(i)
            if is_red:
                self.red.add(i)
        self.journal.commit()

    @rule(n=st.integers(1, 30))
    def take(self, n: int) -> None:
        c = Taker(n, cid=self.cid)
        got = self._consumer(c)
        assert got == self.model[: len(got)] and len(got) == min(n, len(self.model))
        del self.model[: len(got)]
        self.held += c.got

    @rule(n=st.integers(1, 5))
    def take_red(self, n: int) -> None:
        c = Taker(n, cid=self.cid, selector=lambda m: m.field("subject") == "red")
        got = self._consumer(c)
        want = [i for i in self.model if i in self.red][:n]
        assert got == want
        self.model = [i for i in self.model if i not in set(got)]
        self.held += c.got

    @precondition(lambda self: self.held)
    @rule(k=st.integers(0, 1000), ack=st.booleans())
    def settle(self, k: int, ack: bool) -> None:
        m = self.held.pop(k % len(self.held))
        if ack:
            self.q.ack(m)
        else:
            self.q.release(m)
            self.released += 1
            self.model = sorted([*self.model, body(m)])
        self.journal.commit()

    @rule()
    def browse(self) -> None:
        assert self._consumer(Browser(len(self.model) + 1, cid=self.cid)) == self.model

    @rule(n=st.integers(0, 20), offset=st.integers(0, 300))
    def peek(self, n: int, offset: int) -> None:
        assert [body(m) for m in self.q.peek(n, offset)] == self.model[offset : offset + n]

    @invariant()
    def counted(self) -> None:
        q = self.q
        assert q.count == len(self.model)
        assert q.pager is not None and q.pager.memory() <= BUDGET + SLACK * (1 + self.released)
        assert self.broker.stats.paged_bytes == q.pager.bytes >= 0


PagedQueue.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
test_paged_queue = PagedQueue.TestCase
