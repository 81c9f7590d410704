"""The outcome question of a joined branch's parts (``workers`` > 1, in one process: the
other workers are a fake that records what is asked and is answered by the test)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from amqp10.broker.amqp010.dtx import (
    ASK_AGAIN,
    ASK_PREPARED,
    COMMITTED_OWNER,
    INCARNATION,
    OUTCOME_QUESTION,
    PART_OWNER,
    PART_QUESTION,
    ROLLED_BACK_OWNER,
    Branches,
    Fields,
    store_id,
    txn_id,
    xid_struct,
)
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, HeldWork, nothing
from amqp10.broker.core.store import FORGET_PREPARED, PREPARE

from .test_amqp010_dtx_claim import Writing

KEY = (0, b"gid", b"bid")


class Asked:
    """One other worker, answering only when the test says."""

    count = 1

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any], Callable[[list[Any]], None]]] = []

    def ask(self, op: str, args: Mapping[str, Any], answered: Callable[[list[Any]], None]) -> None:
        self.asked.append((op, dict(args), answered))

    def take(self, op: str) -> list[Callable[[list[Any]], None]]:
        got = [a for o, _, a in self.asked if o == op]
        self.asked = [x for x in self.asked if x[0] != op]
        return got


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Recording(Writing):
    """A store journal that keeps what it was given, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, ...]] = []

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None:
        self.ops.append(op)
        super().submit(op, on_commit)

    def prepared(self) -> dict[bytes, str]:
        """The prepared records a store would keep after these writes: id -> owner."""
        kept: dict[bytes, str] = {}
        for op in self.ops:
            if op[0] == PREPARE:
                kept[op[1]] = op[2]
            elif op[0] == FORGET_PREPARED:
                kept.pop(op[1], None)
        return kept


def worker() -> tuple[Broker, Branches, Asked, Recording, Clock]:
    journal, others, clock = Recording(), Asked(), Clock()
    broker = Broker(BrokerConfig(), journal=journal, now=clock)
    broker.others = others
    return broker, Branches.of(broker), others, journal, clock


def stored(journal: Writing) -> None:
    waiting, journal.waiting = journal.waiting, []
    for on_commit in waiting:
        on_commit()


def later(broker: Broker, clock: Clock) -> None:
    clock.t += ASK_AGAIN
    broker.leases.expire_due()


def prepared_part(broker: Broker, branches: Branches, others: Asked, journal: Writing) -> None:
    """A part of the branch of KEY another worker holds, prepared here."""
    part = branches.join(KEY, lambda answer: None)
    (joined,) = others.take("amqp010.dtx-branch")
    joined([{"status": 0}])
    answered: list[Any] = []
    broker.questions[PART_QUESTION]({"op": "prepare", "xid": [0, b"gid".hex(), b"bid".hex()]}, answered.append)
    stored(journal)
    assert answered == [{"status": 0}] and part.prepared


def test_a_prepared_part_asks_until_it_is_told_and_never_decides_alone() -> None:
    broker, branches, others, journal, clock = worker()
    prepared_part(broker, branches, others, journal)
    for answers in ([], [{"outcome": "wait"}]):  # the holder down, or undecided: asked again
        later(broker, clock)
        (ask,) = others.take(OUTCOME_QUESTION)
        ask(answers)
        assert KEY in branches.parts
    later(broker, clock)
    (ask,) = others.take(OUTCOME_QUESTION)
    ask([{"outcome": "rollback"}])  # every other worker answered, none knows it: presumed abort
    assert KEY not in branches.parts
    later(broker, clock)
    assert others.take(OUTCOME_QUESTION) == []  # (settled: asked no more)


def test_a_prepared_part_commits_when_its_holder_says_so() -> None:
    broker, branches, others, journal, clock = worker()
    prepared_part(broker, branches, others, journal)
    later(broker, clock)
    (ask,) = others.take(OUTCOME_QUESTION)
    ask([{"outcome": "commit"}])
    assert KEY not in branches.parts


def outcome(broker: Broker, inc: bytes | None = None) -> Fields:
    """The answer to a part of the branch of KEY, incarnation ``inc``, asking its outcome."""
    got: list[Fields] = []
    args = {"xid": [0, b"gid".hex(), b"bid".hex()], "inc": None if inc is None else inc.hex()}
    broker.questions[OUTCOME_QUESTION](args, got.append)
    return got[0]


def test_a_holder_remembers_a_committed_branch_until_every_worker_answered() -> None:
    broker, branches, others, journal, clock = worker()
    assert outcome(broker) == {"outcome": "rollback"}  # (no such branch)
    b = branches.start(xid_struct(KEY), KEY)
    b.parts = 1
    assert outcome(broker, b.inc) == {"outcome": "wait"}
    b.held.prepare(nothing)
    replies: list[Fields] = []
    branches.command("commit", b, {"one_phase": False})(replies.append)
    assert others.take(PART_QUESTION) == []  # (told once its record of the commit is stored)
    stored(journal)
    (told,) = others.take(PART_QUESTION)
    told([])  # the part's worker did not answer
    assert replies == [{"status": 0}]
    assert outcome(broker, b.inc) == {"outcome": "commit"}
    claimed: list[bool] = []
    branches.claim(KEY, lambda answer: claimed.append(answer()))
    assert claimed == [False]  # (its xid is not new while it is remembered)
    later(broker, clock)
    (told,) = others.take(PART_QUESTION)  # told again
    told([{"status": 0}])
    assert outcome(broker, b.inc) == {"outcome": "rollback"}  # forgotten: every worker answered
    later(broker, clock)
    assert others.take(PART_QUESTION) == []


def test_a_part_told_its_branch_is_kept_prepared_asks_again_only_after_a_long_while() -> None:
    broker, branches, others, journal, clock = worker()
    prepared_part(broker, branches, others, journal)
    later(broker, clock)
    (ask,) = others.take(OUTCOME_QUESTION)
    ask([{"outcome": "prepared"}])  # its holder keeps the branch prepared, stored: it will tell
    for _ in range(int(ASK_PREPARED / ASK_AGAIN) - 1):
        later(broker, clock)
        assert others.take(OUTCOME_QUESTION) == []  # (before: asked every round)
    for _ in range(3):
        later(broker, clock)
    (ask,) = others.take(OUTCOME_QUESTION)  # (asked again once that long while passed)
    ask([{"outcome": "prepared"}])
    told: list[Any] = []
    broker.questions[PART_QUESTION]({"op": "commit", "xid": [0, b"gid".hex(), b"bid".hex()]}, told.append)
    stored(journal)
    assert told == [{"status": 0}] and KEY not in branches.parts
    assert len(broker.leases) == 0  # (its wait dropped with it)


def test_a_holder_says_prepared_only_once_its_prepare_is_stored() -> None:
    broker, branches, others, journal, clock = worker()
    b = branches.start(xid_struct(KEY), KEY)
    b.parts = 1
    replies: list[Fields] = []
    branches.command("prepare", b, {})(replies.append)
    (asked,) = others.take(PART_QUESTION)
    asked([{"status": 0}])  # the part prepared
    assert outcome(broker, b.inc) == {"outcome": "wait"}  # (its own record not stored yet: a crash loses it)
    stored(journal)
    assert replies == [{"status": 0}]
    assert outcome(broker, b.inc) == {"outcome": "prepared"}


@pytest.mark.parametrize(("op", "owner"), [("commit", COMMITTED_OWNER), ("rollback", ROLLED_BACK_OWNER)])
def test_a_holder_stores_its_outcome_of_a_branch_with_parts_until_every_worker_answered(op: str, owner: str) -> None:
    broker, branches, others, journal, clock = worker()
    b = branches.start(xid_struct(KEY), KEY)
    b.parts = 1
    b.held.prepare(nothing)
    replies: list[Fields] = []
    branches.command(op, b, {"one_phase": False})(replies.append)
    # its own record removed and the record of its outcome written, in that order (before, a
    # commit's record went with its own: one id)
    assert journal.prepared() == {store_id(KEY, b.inc): owner + INCARNATION}
    stored(journal)
    (told,) = others.take(PART_QUESTION)
    told([])  # the part's worker did not answer
    assert replies == [{"status": 0}]
    assert outcome(broker, b.inc) == {"outcome": op}
    claimed: list[bool] = []
    branches.claim(KEY, lambda answer: claimed.append(answer()))
    assert claimed == [False]  # its xid is not new while it is remembered (before: a rollback's was)
    later(broker, clock)
    (told,) = others.take(PART_QUESTION)  # told again
    told([{"status": 0}])
    assert journal.prepared() == {}
    branches.claim(KEY, lambda answer: claimed.append(answer()))
    assert others.take("amqp010.dtx-branch") != []  # (new here: the others asked whether it is theirs)


def test_a_part_of_an_old_incarnation_of_its_xid_is_not_the_new_branchs() -> None:
    """A part prepared here of a branch of KEY (incarnation A, its holder's, learnt at the
    join); the xid started again by a holder that lost it (incarnation B). The new branch's
    word is not for the old part, a session joining the new branch is refused rather than
    given the old part (its count at the holder undone), and the old part asks the outcome
    of its own incarnation (before: one part by xid, decided and joined with any branch of it)."""
    broker, branches, others, journal, clock = worker()
    old, new = b"A" * 8, b"B" * 8
    wire = [0, b"gid".hex(), b"bid".hex()]
    part = branches.join(KEY, lambda answer: None)
    (joined,) = others.take("amqp010.dtx-branch")
    joined([{"status": 0, "inc": old.hex()}])
    answered: list[Any] = []
    broker.questions[PART_QUESTION]({"op": "prepare", "xid": wire, "inc": old.hex()}, answered.append)
    stored(journal)
    assert answered == [{"status": 0}] and part.prepared and part.inc == old
    assert journal.prepared() == {store_id(KEY, old): PART_OWNER + INCARNATION}
    broker.questions[PART_QUESTION]({"op": "commit", "xid": wire, "inc": new.hex()}, answered.append)
    assert answered[-1] == {} and branches.parts[KEY] is part and part.prepared  # (not its branch)
    refused: list[Callable[[], Fields]] = []
    branches.join(KEY, refused.append)
    (joined,) = others.take("amqp010.dtx-branch")
    joined([{"status": 0, "inc": new.hex()}])
    assert refused[0]()["error"][0] == "not-allowed"
    assert [args for op, args, _ in others.asked if op == "amqp010.dtx-branch"] == [
        {"op": "end", "xid": wire, "inc": new.hex()}
    ]
    others.asked.clear()
    later(broker, clock)
    assert [args for op, args, _ in others.asked if op == OUTCOME_QUESTION] == [{"xid": wire, "inc": old.hex()}]
    (ask,) = others.take(OUTCOME_QUESTION)
    ask([{"outcome": "rollback"}])  # (the new branch's holder: not of its incarnation)
    assert KEY not in branches.parts and journal.prepared() == {}


def test_a_holder_answers_for_its_own_incarnation_of_an_xid_only() -> None:
    broker, branches, others, journal, clock = worker()
    b = branches.start(xid_struct(KEY), KEY)
    assert b.inc is not None and b.held.txn_id == store_id(KEY, b.inc)
    assert outcome(broker, b.inc) == {"outcome": "wait"}
    assert outcome(broker, b"A" * 8) == {"outcome": "rollback"}  # (another branch of the xid: not known)
    assert outcome(broker) == {"outcome": "rollback"}  # (a part stored before incarnations)


def test_records_stored_before_incarnations_are_read_with_none() -> None:
    """A store's records of owners without INCARNATION (written before it) come back as
    before, their incarnation None: matched by their xid alone; those with it, by both."""
    journal = Recording()
    broker = Broker(BrokerConfig(), journal=journal, now=Clock())
    other = (0, b"gid", b"other")
    inc = b"C" * 8
    broker._prepared = {
        PART_OWNER: {txn_id(KEY): HeldWork(PART_OWNER, txn_id(KEY), journal)},
        PART_OWNER + INCARNATION: {store_id(other, inc): HeldWork(PART_OWNER + INCARNATION, store_id(other, inc), journal)},
    }
    branches = Branches.of(broker)
    assert branches.parts[KEY].inc is None and branches.parts[other].inc == inc


@pytest.mark.parametrize("op", ["commit", "rollback"])
def test_a_holder_tells_no_part_its_outcome_before_its_record_is_stored(op: str) -> None:
    """Between the write of the record of its outcome and the store's word, a holder killed
    comes back with the branch prepared: no part may have been told the outcome meanwhile
    (before: the record counted from the write, so a part asking was answered it, and the
    parts were told it at the next round)."""
    broker, branches, others, journal, clock = worker()
    b = branches.start(xid_struct(KEY), KEY)
    b.parts = 1
    b.held.prepare(nothing)
    stored(journal)
    branches.command(op, b, {"one_phase": False})(lambda fields: None)
    assert outcome(broker, b.inc) == {"outcome": "wait"}
    branches.ask_again()  # (as a part of another branch could have it due now)
    later(broker, clock)
    assert others.take(PART_QUESTION) == []
    claimed: list[bool] = []
    branches.claim(KEY, lambda answer: claimed.append(answer()))
    assert claimed == [False]  # (its xid is not new meanwhile)
    stored(journal)
    assert outcome(broker, b.inc) == {"outcome": op}
    (told,) = others.take(PART_QUESTION)
    told([{"status": 0}])
    assert outcome(broker, b.inc) == {"outcome": "rollback"}  # (forgotten: every worker answered)


def test_a_rollback_of_a_branch_never_prepared_stores_nothing_and_tells_its_parts_once() -> None:
    """Its parts were never asked to prepare: nothing of them is in another store, so no
    record of the rollback is written and its xid is new at once (before: a record written
    before the client's answer, and the xid refused until every worker answered)."""
    broker, branches, others, journal, clock = worker()
    b = branches.start(xid_struct(KEY), KEY)
    b.parts = 1
    replies: list[Fields] = []
    branches.command("rollback", b, {})(replies.append)
    (told,) = [args for op, args, _ in others.asked if op == PART_QUESTION]
    assert told["op"] == "rollback"
    others.take(PART_QUESTION)[0]([])  # (the part's worker did not answer: told once only)
    stored(journal)
    assert replies == [{"status": 0}]
    assert [op for op in journal.ops if op[0] == PREPARE] == []
    assert outcome(broker, b.inc) == {"outcome": "rollback"}
    later(broker, clock)
    assert others.take(PART_QUESTION) == []
    claimed: list[bool] = []
    branches.claim(KEY, lambda answer: claimed.append(answer()))
    assert others.take("amqp010.dtx-branch") != []  # (new here: the others asked whether it is theirs)
