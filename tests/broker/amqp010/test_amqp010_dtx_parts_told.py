"""What a 0-10 ``dtx`` branch's holder makes of its parts' answers (the other workers'
parts of the branch told to prepare, ``Branches._prepare_parts``, or its outcome,
``Branches._tell_decided``): a prepare counts only if every part that joined answered
xa-ok; a commit or rollback goes on whatever they answer, a part that did not do it logged."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from amqp10.broker.amqp010.dtx import (
    COMMITTED_OWNER,
    OWNER,
    ROLLED_BACK_OWNER,
    Branch,
    Branches,
    xid_struct,
)
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, HeldWork

OK, RBROLLBACK = 0, 1
KEY = (0, b"g", b"b1")


class Others:
    """The other workers, each answering the question with ``answers`` (at once)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.count = len(answers)
        self.asked: list[str] = []

    def ask(self, op: str, args: Mapping[str, Any], answered: Callable[[list[Any]], None]) -> None:
        self.asked.append(args["op"])
        answered(self.answers)


def told(op: str, answers: list[Any], parts: int) -> list[bool]:
    broker = Broker(BrokerConfig(), now=lambda: 1000.0)
    broker.others = others = Others(answers)  # type: ignore[assignment]
    b = Branch(xid_struct(KEY), KEY, HeldWork(OWNER, b"t", broker.journal))
    b.parts = parts
    got: list[bool] = []
    branches = Branches(broker)
    if op == "prepare":
        branches._prepare_parts(b, got.append)
    else:
        owner = COMMITTED_OWNER if op == "commit" else ROLLED_BACK_OWNER
        branches.decided[KEY] = HeldWork(owner, b"t", broker.journal)
        branches._tell_decided(KEY, lambda: got.append(True))
    assert others.asked == [op]
    return got


def test_a_prepare_counts_only_if_every_part_that_joined_answered_ok() -> None:
    assert told("prepare", [{"status": OK}, {"status": OK}], 2) == [True]
    assert told("prepare", [{"status": OK}, None], 2) == [False]  # (one had no part: it did not answer)
    assert told("prepare", [{"status": OK}, {"status": RBROLLBACK}], 2) == [False]


def test_a_part_that_did_not_commit_is_logged_and_the_commit_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="amqp10.broker"):
        assert told("commit", [{"status": OK}, {"status": OK}, None], 2) == [True]
        assert "parts" not in caplog.text
        assert told("commit", [{"status": RBROLLBACK}, {"status": OK}, None], 2) == [True]
    assert "1 of its parts on other workers did not commit" in caplog.text


def test_a_part_is_a_branch_that_tells_its_holder_a_session_ended() -> None:
    broker = Broker(BrokerConfig(), now=lambda: 1000.0)
    b = Branch(xid_struct(KEY), KEY, HeldWork(OWNER, b"t", broker.journal))
    assert not b.part
    b.ended = lambda: None
    assert b.part


def test_a_part_that_did_not_roll_back_is_logged_and_the_rollback_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="amqp10.broker"):
        assert told("rollback", [{"status": OK}, {}, None], 1) == [True]
        assert "parts" not in caplog.text
        assert told("rollback", [{"status": RBROLLBACK}, None], 1) == [True]
    assert "1 of its parts on other workers did not roll back" in caplog.text
