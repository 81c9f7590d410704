"""[security] for 0-9-1 logins, with real pika: failed logins answered late and counted
(with the 1.0 ones), and connections over the per-user or per-address limit refused at
``connection.open`` with ``530 NOT_ALLOWED`` and the reason, as RabbitMQ refuses its limits."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

import amqp10.sync
from amqp10 import errors
from tests.broker.conftest import broker_with

from .test_amqp091_pika import T, params


def secured(users_file: Path, **security: Any) -> dict[str, Any]:
    return {
        "sasl": {"users_file": users_file, "allow_anonymous": False},
        "security": {"connection_rate_per_address": 0, **security},
    }


def as_user(b: Any, user: str, password: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(params(b, credentials=pika.PlainCredentials(user, password)))


def test_failed_0_9_1_logins_are_held_back_and_counted(tmp_path: Path, users_file: Path) -> None:
    cfg = secured(users_file, login_delay_base=0.05, login_delay_max=0.2)
    with broker_with(tmp_path, **cfg) as b:
        guard = b.service.guard
        started = time.monotonic()
        for _ in range(5):
            with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
                as_user(b, "alice", "wrong")
            assert "ACCESS_REFUSED" in str(info.value)
        elapsed = time.monotonic() - started
        assert guard.failed_logins == 5
        assert elapsed >= 0.05 + 0.1 + 0.2 * 3  # every refusal waited out its back-off
        # the address is backing off now: its next login (even a good one) is held as long
        assert guard.delay_for("127.0.0.1", None, failed=False) == 0.2
        ok = as_user(b, "alice", "secret")
        assert ok.is_open
        ok.close()
        # a 1.0 guess from the same address counts with the 0-9-1 ones
        with pytest.raises(errors.AuthenticationError):
            amqp10.sync.connect(f"amqp://alice:nope@{b.url}", timeout=T)
        assert guard.failed_logins == 6


def test_per_user_limit_counts_both_protocols(tmp_path: Path, users_file: Path) -> None:
    with broker_with(tmp_path, **secured(users_file, max_connections_per_user=1)) as b:
        first = as_user(b, "alice", "secret")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
            as_user(b, "alice", "secret")
        assert "NOT_ALLOWED - user 'alice' has 1 connections open, the limit per user" in str(info.value)
        with pytest.raises(errors.ConnectionError, match="resource-limit-exceeded"):
            amqp10.sync.connect(f"amqp://alice:secret@{b.url}", timeout=T)
        bob = as_user(b, "bob", "hunter2")  # another user is not limited by alice's count
        bob.close()
        first.close()
        deadline = time.monotonic() + T
        while b.service.clients:  # the broker sees the close
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with (
            amqp10.sync.connect(f"amqp://alice:secret@{b.url}", timeout=T),
            pytest.raises(pika.exceptions.ProbableAccessDeniedError),
        ):
            as_user(b, "alice", "secret")  # a 1.0 connection counts for 0-9-1 too
        assert b.service.guard.refused == 3


def test_per_address_limit_refuses_0_9_1_at_the_open(tmp_path: Path, users_file: Path) -> None:
    cfg = secured(users_file, max_connections_per_address=2, login_delay_base=0)
    with broker_with(tmp_path, **cfg) as b:
        a, c = as_user(b, "alice", "secret"), as_user(b, "bob", "hunter2")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
            as_user(b, "alice", "secret")
        assert "NOT_ALLOWED - 127.0.0.1 has 2 connections open, the limit per address" in str(info.value)
        a.close()
        c.close()


def test_a_held_login_is_not_cut_by_the_handshake_timeout(tmp_path: Path, users_file: Path) -> None:
    # the back-off holds the answer longer than the handshake may take: the hold is the
    # broker's delay, not the client's, so the good login still completes
    cfg = secured(users_file, login_delay_base=1.2, login_delay_max=1.2)
    with broker_with(tmp_path, limits={"handshake_timeout": 1.0}, **cfg) as b:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            as_user(b, "alice", "wrong")
        assert b.service.guard.delay_for("127.0.0.1", "alice", failed=False) == 1.2
        ok = as_user(b, "alice", "secret")
        assert ok.is_open
        ok.close()
