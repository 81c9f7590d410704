"""The ConnectionGuard on a fake clock: login back-off per address and per user, limits
per address and per user, the connection rate's token bucket, rate-limited logging, and
the held output of an engine."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from amqp10.broker.config import SecurityConfig
from amqp10.broker.guard import ConnectionGuard, HeldOutput, source_of


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guard(clock: Clock, **kw: Any) -> ConnectionGuard:
    return ConnectionGuard(SecurityConfig(**kw), clock=clock)


def test_failed_logins_back_off_exponentially_to_the_cap() -> None:
    clock = Clock()
    g = guard(clock, login_delay_base=0.1, login_delay_max=5.0)
    delays = []
    for _ in range(50):
        delays.append(g.login_failed("10.0.0.1", "alice"))
        clock.now += delays[-1]  # a guesser that waits for each answer
    assert delays[:7] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0])
    assert delays[7:] == [5.0] * 43
    # 50 attempts cost at least the summed back-off
    assert sum(delays) == pytest.approx(0.1 * (2**6 - 1) + 5.0 * 44)
    assert g.failed_logins == 50


def test_a_correct_login_from_another_address_is_not_delayed() -> None:
    clock = Clock()
    g = guard(clock)
    for _ in range(10):
        g.login_failed("10.0.0.1", "alice")
    assert g.login_ok("10.0.0.2", "alice") == 0.0
    # ... but a success from the guessing address waits as long as a failure would
    assert g.login_ok("10.0.0.1", "bob") == 5.0


def test_failures_for_one_user_from_many_addresses_slow_that_users_failures() -> None:
    clock = Clock()
    g = guard(clock, login_delay_base=0.1)
    for i in range(5):
        g.login_failed(f"10.0.1.{i}", "alice")
    # a new address guessing alice's password: held by alice's count (6th failure)
    assert g.login_failed("10.0.2.1", "alice") == pytest.approx(3.2)
    # a new address failing for another user: a first failure
    assert g.login_failed("10.0.2.2", "bob") == pytest.approx(0.1)
    # a success forgets the user's failures
    g.login_ok("10.0.3.1", "alice")
    assert g.delay_for("10.0.3.2", "alice", failed=True) == 0.0


def test_failures_are_forgotten_after_a_quiet_period() -> None:
    clock = Clock()
    g = guard(clock, login_failures_forget=60.0)
    for _ in range(6):
        g.login_failed("10.0.0.1", None)
    assert g.delay_for("10.0.0.1", None, failed=True) == pytest.approx(3.2)
    clock.now += 61
    assert g.delay_for("10.0.0.1", None, failed=True) == 0.0
    assert g.login_failed("10.0.0.1", None) == pytest.approx(0.1)


def test_connections_per_address_are_limited_and_released() -> None:
    clock = Clock()
    g = guard(clock, max_connections_per_address=2, connection_rate_per_address=0)
    assert g.admit("10.0.0.1") is None
    assert g.admit("10.0.0.1") is None
    refusal = g.admit("10.0.0.1")
    assert refusal is not None and not refusal.hard and "10.0.0.1" in refusal.reason
    assert g.admit("10.0.0.2") is None  # another address has its own count
    g.release("10.0.0.1")
    assert g.admit("10.0.0.1") is None
    assert g.refused == 1


def test_connections_per_user_are_limited_and_anonymous_is_not_counted() -> None:
    g = guard(Clock(), max_connections_per_user=1)
    assert g.opened("alice") is None
    refusal = g.opened("alice")
    assert refusal is not None and not refusal.hard and "alice" in refusal.reason
    assert g.opened("bob") is None
    assert g.opened(None) is None and g.opened(None) is None
    g.closed("alice")
    assert g.opened("alice") is None


def test_the_connection_rate_refuses_beyond_the_burst_then_recovers() -> None:
    clock = Clock()
    g = guard(clock, connection_rate_per_address=10.0, connection_burst_per_address=5)
    for _ in range(5):
        assert g.admit("10.0.0.1") is None
    refusal = g.admit("10.0.0.1")
    assert refusal is not None and refusal.hard
    assert g.admit("10.0.0.2") is None  # other addresses are not affected
    clock.now += 0.1  # one token back
    assert g.admit("10.0.0.1") is None
    assert g.admit("10.0.0.1") is not None
    clock.now += 10  # full again, and no more than the burst
    assert [g.admit("10.0.0.1") is None for _ in range(6)] == [True] * 5 + [False]


def test_refusals_are_logged_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    g = guard(clock, connection_rate_per_address=1.0, connection_burst_per_address=1)
    with caplog.at_level(logging.WARNING, "amqp10.broker.guard"):
        for _ in range(101):
            g.admit("10.0.0.1")
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "connections a second" in lines[0]
        clock.now += 10.5
        g.admit("10.0.0.1")  # a token: admitted, nothing logged
        for _ in range(2):
            g.admit("10.0.0.1")
        lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "99 more from 10.0.0.1" in lines[1]


def test_failed_logins_are_logged_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    g = guard(Clock())
    with caplog.at_level(logging.WARNING, "amqp10.broker.guard"):
        for _ in range(50):
            g.login_failed("10.0.0.1", "alice", "PLAIN: wrong password")
    assert len(caplog.records) == 1
    assert "failed login from 10.0.0.1 as 'alice'" in caplog.records[0].getMessage()


class Engine:
    def __init__(self) -> None:
        self.out = b"outcome"
        self.closed = False

    def receive_data(self, data: bytes) -> list[str]:
        return ["event"]

    def data_to_send(self) -> bytes:
        out, self.out = self.out, b""
        return out

    def tick(self, now: float) -> float | None:
        return None

    def poll_events(self) -> list[str]:
        return []

    @property
    def is_closed(self) -> bool:
        return self.closed


def test_held_output_waits_for_its_deadline_and_keeps_the_stream_open() -> None:
    inner = Engine()
    inner.closed = True  # a failed login: the stream should end once the outcome is out
    held = HeldOutput(inner)
    held.hold(10.0, 0.5)
    assert held.tick(10.1) == 10.5
    assert held.data_to_send() == b""
    assert not held.is_closed
    assert held.receive_data(b"x") == ["event"]
    assert held.tick(10.5) is None
    assert held.data_to_send() == b"outcome"
    assert held.is_closed
    assert held.held_for == 0.5
    held.hold(11.0, 0.0)  # nothing to hold
    assert not held.held


@pytest.mark.parametrize(
    ("peer", "addr"),
    [("127.0.0.1:5672", "127.0.0.1"), ("[::1]:40000", "::1"), ("unknown peer", "unknown peer")],
)
def test_source_of(peer: str, addr: str) -> None:
    assert source_of(peer) == addr
