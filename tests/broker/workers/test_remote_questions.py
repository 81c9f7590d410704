"""What a front end asks of a queue another worker owns (``NodeElsewhere``), over a real
internal link in one event loop: the owner's answers (counts, declare, purge, delete,
``basic.get`` and its outcome), its admission of consumers (exclusive, both ways), routed
publishes (unroutable, nothing made), and consumers kept while the owner is away.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from amqp10.amqp091.fields import Int8
from amqp10.broker.core import (
    ConsumeResult,
    NotFound,
    PreconditionFailed,
    PublishResult,
    QueuedMessage,
)
from amqp10.broker.workers.owner import NodeServer

from .test_internal_link import Pair, Taker, pair, settle_down, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Answers:
    """What a question was answered: its value, or the core error it raised."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def __call__(self, answer: Callable[[], Any]) -> None:
        try:
            self.got.append(answer())
        except Exception as exc:
            self.got.append(exc)

    async def next(self) -> Any:
        n = len(self.got)
        await until(lambda: len(self.got) > n)
        return self.got[n]


async def test_the_owner_answers_counts_declare_purge_delete_and_get() -> None:
    p = await pair()
    node = p.node("asked")
    answers = Answers()
    node.ask_status(answers)
    assert isinstance(await answers.next(), NotFound)  # not there yet
    node.ask_declare(durable=False, arguments={"x-max-length": 10}, auto_delete=False, answered=answers)
    assert await answers.next() == (0, 0)
    q = p.b.default.queue("asked")
    assert q is not None and q.policy.max_length == 10  # made on the owner, with its arguments
    for i in range(3):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    node.ask_status(answers)
    assert await answers.next() == (3, 0)
    node.ask_get(answers)
    msg, left = await answers.next()
    assert msg.data == b"m0" and left == 2 and q.count == 2
    node.release(msg, delivery_failed=True)  # its outcome reaches the owner's queue
    await until(lambda: q.count == 3)
    node.ask_get(answers)
    again, _ = await answers.next()
    assert again.data == b"m0" and again.delivery_count == 1  # redelivered
    node.ack(again)
    await until(lambda: q.stats.acked == 1)
    node.ask_purge(answers)
    assert await answers.next() == 2
    node.ask_get(answers)
    assert await answers.next() == (None, 0)
    q.publish(QueuedMessage(b"last"), lambda: None)
    node.ask_delete(if_unused=False, if_empty=True, answered=answers)
    assert isinstance(await answers.next(), PreconditionFailed)  # not empty
    node.ask_delete(if_unused=False, if_empty=False, answered=answers)
    assert await answers.next() == 1
    assert p.b.default.queue("asked") is None
    await p.close()


async def test_the_owner_refuses_a_declaration_not_equivalent_to_its_queue_in_rabbitmqs_words() -> None:
    """A ``queue.declare`` put to the owner is compared with the queue as RabbitMQ 3.10 compares
    a re-declaration (core/equivalence.py), as on one worker: an argument it does not compare
    may differ, another integer type of the same value is the same; a float for an integer,
    another value, or another ``durable`` is refused with RabbitMQ's text (each was answered
    with the queue's counts: the owner compared nothing)."""
    p = await pair()
    try:  # (closed also when it fails: the next test's pair would meet this one's)
        node = p.node("eq")
        answers = Answers()
        node.ask_declare(durable=True, arguments={"x-max-length": 5}, auto_delete=False, answered=answers)
        assert await answers.next() == (0, 0)
        for same in ({"x-max-length": 5, "x-consumer-timeout": 1000}, {"x-max-length": Int8(5)}):
            node.ask_declare(durable=True, arguments=same, auto_delete=False, answered=answers)
            assert await answers.next() == (0, 0)
        where = "for queue 'eq' in vhost '/'"
        for durable, arguments, why in (
            (True, {"x-max-length": 5.0}, f"inequivalent arg 'x-max-length' {where}: received '5.0' but current is '5'"),
            (True, {}, f"inequivalent arg 'x-max-length' {where}: received none but current is the value '5' of type 'signedint'"),
            (False, {"x-max-length": 5}, f"inequivalent arg 'durable' {where}: received 'false' but current is 'true'"),
        ):
            node.ask_declare(durable=durable, arguments=arguments, auto_delete=False, answered=answers)
            refused = await answers.next()
            assert isinstance(refused, PreconditionFailed) and str(refused) == why
    finally:
        await p.close()


async def test_a_routed_publish_to_a_queue_the_owner_lacks_is_unroutable_and_makes_nothing() -> None:
    p = await pair()
    node = p.node("absent")
    refused: list[PublishResult | None] = []
    stored: list[bool] = []
    node.publish_answered(QueuedMessage(b"x"), lambda: stored.append(True), refused.append)
    await until(lambda: bool(refused))
    assert refused == [PublishResult.UNROUTABLE] and not stored
    assert p.b.default.queue("absent") is None
    p.queue("absent")  # declared meanwhile: the same link now reaches it
    node.publish_answered(QueuedMessage(b"y"), lambda: stored.append(True), refused.append)
    await until(lambda: bool(stored))
    await p.close()


async def test_an_exclusive_consumer_on_either_side_holds_the_queue() -> None:
    p = await pair()
    q = p.queue("excl")
    node = p.node("excl")
    local = Taker()
    local.exclusive = True  # type: ignore[attr-defined]
    q.add_consumer(local)
    answers = Answers()
    node.ask_consume(Taker(), exclusive=False, answered=answers)
    assert await answers.next() is ConsumeResult.EXCLUSIVE_HELD  # the owner's exclusive consumer
    q.remove_consumer(local)
    remote = Taker()
    node.ask_consume(remote, exclusive=True, answered=answers)
    assert await answers.next() is ConsumeResult.ADMITTED
    assert q.admits() is ConsumeResult.EXCLUSIVE_HELD  # the other worker's exclusive consumer
    node.ask_consume(Taker(), exclusive=False, answered=answers)
    assert await answers.next() is ConsumeResult.EXCLUSIVE_HELD
    node.remove_consumer(remote)
    await until(lambda: not q.consumers)
    assert q.admits(exclusive=True) is ConsumeResult.ADMITTED
    await p.close()


async def reconnect(p: Pair) -> None:
    """The owner restarted: a new internal link from the same remote nodes."""
    p.server = NodeServer(p.b)
    await p.start()


async def test_a_consumer_is_kept_while_the_owner_is_away_and_fed_once_it_is_back() -> None:
    p = await pair()
    q = p.queue("kept")
    node = p.node("kept")
    c = Taker(credit=10)
    node.add_consumer(c)
    await until(lambda: len(q.consumers) == 1)
    q.publish(QueuedMessage(b"before"), lambda: None)
    await until(lambda: len(c.got) == 1)
    held = c.got[0]
    p.link_b.fail("the owner was killed")
    await until(lambda: node.unavailable is not None)
    assert not c.was_cancelled and not q.consumers  # kept here; gone there (released)
    assert q.count == 1
    answers = Answers()
    node.ask_status(answers)  # asked again once the owner is back
    await settle_down()
    assert not answers.got
    await reconnect(p)
    assert await answers.next() == (1, 1)
    await until(lambda: len(c.got) == 2)  # fed again, its credit carried over
    assert c.got[1].data == b"before" and c.got[1].delivery_count == 0
    node.ack(held)  # an outcome for the dead owner's delivery: nothing happens
    node.ack(c.got[1])
    await until(lambda: q.stats.acked == 1)
    assert q.count == 0 and not c.was_cancelled
    await p.close()


async def test_a_consume_asked_while_the_owner_is_away_is_answered_once_it_is_back() -> None:
    p = await pair()
    p.queue("later")
    node = p.node("later")
    p.link_b.fail("the owner was killed")
    await until(lambda: node.unavailable is not None)
    answers = Answers()
    node.ask_consume(Taker(), exclusive=False, answered=answers)
    await settle_down()
    assert not answers.got
    await reconnect(p)
    assert await answers.next() is ConsumeResult.ADMITTED
    await p.close()


async def test_questions_go_after_the_publishes_before_them() -> None:
    p = await pair()
    p.queue("ordered")
    node = p.node("ordered")
    for i in range(5):  # the first publish opens the link: they wait for the owner's credit
        node.publish_answered(QueuedMessage(f"m{i}".encode()), lambda: None, lambda r: None)
    answers = Answers()
    node.ask_status(answers)
    assert await answers.next() == (5, 0)
    await p.close()



async def test_a_no_ack_consumer_is_done_with_on_the_owner_as_it_is_sent() -> None:
    p = await pair()
    q = p.queue("noack")
    node = p.node("noack")
    c = Taker(credit=100)
    c.no_ack = True  # type: ignore[attr-defined]
    node.add_consumer(c)
    await until(lambda: len(q.consumers) == 1)
    for i in range(5):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    await until(lambda: len(c.got) == 5)
    await until(lambda: q.stats.acked == 5)  # acked as sent: at most once, as no-ack on one broker
    (link_consumer,) = p.server.consumers.values()
    assert not link_consumer.in_flight
    for msg in c.got:
        node.ack(msg)  # (its front end's ack: nothing to send)
    assert not p.remote._control
    await p.close()


async def test_a_kept_consumer_refused_when_the_owner_is_back_is_cancelled() -> None:
    p = await pair()
    q = p.queue("taken")
    node = p.node("taken")
    c = Taker()
    node.add_consumer(c)
    await until(lambda: len(q.consumers) == 1)
    p.link_b.fail("the owner was killed")
    await until(lambda: node.unavailable is not None and not q.consumers)
    holder = Taker()
    holder.exclusive = True  # type: ignore[attr-defined]
    q.add_consumer(holder)  # an exclusive consumer took the queue meanwhile
    await reconnect(p)
    await until(lambda: c.was_cancelled)  # told, as a deleted queue's consumer is
    assert q.consumers == [holder]
    await p.close()


async def test_the_owner_decides_a_kind_named_at_an_attach_keeping_the_node_it_has() -> None:
    """``ask_make`` (workers/making.py): the owner makes a node of the kind asked if it has
    none, else answers the kind of the one it has, which stays."""
    p = await pair()
    answers = Answers()
    p.node("made").ask_make("topic", answers)
    assert await answers.next() == "topic"
    assert p.b.default.nodes["made"].kind == "topic"  # made on the owner (shared from there)
    p.queue("kept")
    p.node("kept").ask_make("topic", answers)
    assert await answers.next() == "queue"
    assert p.b.default.nodes["kept"].kind == "queue"
    p.node("read").ask_make("stream", answers)
    assert await answers.next() == "stream"
    await p.close()


async def test_a_kind_named_at_an_attach_here_is_the_owners_decision() -> None:
    """``VirtualHost.decide``: nothing to decide with one worker; with an owner elsewhere, a
    topic it made is copied here, and a queue it has is its stand-in, as it said."""
    p = await pair()
    decided: list[Any] = []
    assert not p.a.default.decide("t", "topic", decided.append)  # (no placement: one worker)
    p.a.placement = lambda vhost, name: p.node(name)
    assert not p.a.default.decide("t", None, decided.append)  # (the rules' kind: nothing asked)
    assert p.a.default.decide("t", "topic", decided.append)
    await until(lambda: len(decided) == 1)
    assert decided[0] is p.a.default.nodes["t"] and decided[0].kind == "topic"  # our copy
    assert p.b.default.nodes["t"].kind == "topic"  # the owner's
    p.queue("q")
    assert p.a.default.decide("q", "topic", decided.append)
    await until(lambda: len(decided) == 2)
    assert decided[1] is p.node("q") and p.a.default.kind_of(decided[1]) == "queue"
    assert "q" not in p.a.default.nodes and p.b.default.nodes["q"].kind == "queue"
    await p.close()
