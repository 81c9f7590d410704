"""A question re-sent after its owner's link went, or after its owner restarted, is applied
once (``amqp10.broker.workers.questions``): over a real internal link in one event loop,
and the remembered answers across a restart of the owner's store."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, QueuedMessage
from amqp10.broker.core import store as st
from amqp10.broker.workers.owner import NodeServer
from amqp10.broker.workers.questions import AnswerMemo
from tests.broker.harness import SyncJournal

from .test_internal_link import HeldJournal, Pair, pair, settle_down
from .test_remote_questions import Answers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _lost_answer(p: Pair, journal: HeldJournal, ask: str) -> tuple[Answers, AnswerMemo]:
    """Ask ``ask`` of queue "q" (3 messages), applied on the owner and its answer lost: the
    link fails before the store's commit lets the answer go."""
    memo = AnswerMemo(p.b)
    p.server.memo = memo
    q = p.queue("q")
    for i in range(3):
        q.publish(QueuedMessage(f"m{i}".encode()), lambda: None)
    journal.commit()
    answers = Answers()
    node = p.node("q")
    if ask == "purge":
        node.ask_purge(answers)
    else:
        node.ask_delete(if_unused=False, if_empty=False, answered=answers)
    for _ in range(200):
        if q.count == 0:
            break
        await settle_down(1)
    assert q.count == 0  # applied on the owner
    await p.close()  # the link goes before the answer was let go
    journal.commit()
    assert answers.got == []
    return answers, memo


@pytest.mark.parametrize("ask", ["purge", "delete"])
async def test_a_question_asked_again_after_the_link_went_is_answered_as_first_not_applied_again(ask: str) -> None:
    journal = HeldJournal()
    p = await pair(journal)
    answers, memo = await _lost_answer(p, journal, ask)
    if ask == "purge":  # published meanwhile: a purge applied again would drop it
        q = p.b.default.queue("q")
        assert q is not None
        q.publish(QueuedMessage(b"after"), lambda: None)
    p.server = NodeServer(p.b)  # the link is back (the same owner: its memo)
    p.server.memo = memo
    await p.start()
    for _ in range(2000):
        journal.commit()
        if answers.got:
            break
        await settle_down(1)
    assert answers.got == [3]  # the first answer: 3 purged, or 3 deleted with the queue
    if ask == "purge":
        q = p.b.default.queue("q")
        assert q is not None and q.count == 1
    else:
        assert p.b.default.queue("q") is None  # (asked again, it would answer not found)
    node = p.node("q")
    node.ask_status(answers)  # the next question says the answer arrived: forgotten
    for _ in range(2000):
        journal.commit()
        if len(answers.got) == 2:
            break
        await settle_down(1)
    assert memo.answer(p.remote.incarnation, 1) is None
    await p.close()


def test_a_remembered_answer_is_stored_with_its_change_and_forgotten_once_it_arrived(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    owner = Broker(BrokerConfig(), journal=SyncJournal(store))
    memo = AnswerMemo(owner)
    memo.remember(b"asker-01", 7, b"the answer")
    restarted = Broker(BrokerConfig())
    restarted.recover(store)
    again = AnswerMemo(restarted)  # the owner restarted: it knows the answer still
    assert again.answer(b"asker-01", 7) == b"the answer"
    assert again.answer(b"asker-01", 8) is None and again.answer(b"asker-02", 7) is None
    restarted.journal = SyncJournal(store)
    again.arrived(b"asker-01", 8)  # answers below 8 arrived
    assert again.answer(b"asker-01", 7) is None
    third = Broker(BrokerConfig())
    third.recover(store)
    assert AnswerMemo(third).answer(b"asker-01", 7) is None  # gone from the store too
