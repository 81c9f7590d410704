"""Reconnecting: the policy (which URLs, how often, for how long), the events, the schedule.

``amqp10.connect(urls, reconnect=ReconnectPolicy(...))`` (or ``reconnect=True``
for the defaults): when the connection drops for a reason worth retrying, the
client dials the URLs in turn with exponential backoff, opens the connection
under the same container-id, begins the sessions again and re-attaches every
link under its old name. A sender's unsettled deliveries are offered in the
attach's unsettled map (link resumption, Part 2 §2.6.13); those the peer does
not know are sent again (at least once). The mechanics live in
:mod:`amqp10.client.connection`; this module holds what is pure policy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from .. import errors

__all__ = [
    "RETRYABLE_CONDITIONS",
    "ConnectionLost",
    "ReconnectEvent",
    "ReconnectFailed",
    "ReconnectPolicy",
    "Reconnected",
    "is_retryable",
]

RETRYABLE_CONDITIONS = frozenset({"amqp:connection:forced", "amqp:resource-limit-exceeded"})
"""Connection errors worth a new connection: the peer went away or shut down
(``connection:forced``), or a resource limit, such as the idle time-out, ended it."""


def is_retryable(exc: BaseException) -> bool:
    """The default answer to "try again?" for a failure to connect or a dropped connection.

    Yes for I/O failures (refused, reset, end of stream), time-outs, a clean
    close by the peer, and the conditions in :data:`RETRYABLE_CONDITIONS`; no
    for authentication and TLS failures, and for every other AMQP condition
    (a protocol error, ``amqp:unauthorized-access``, ...): the same thing would
    happen again.
    """
    if isinstance(exc, (errors.AuthenticationError, errors.TLSError)):
        return False
    if isinstance(exc, errors.TimeoutError):
        return True
    if isinstance(exc, errors.ConnectionError):
        return exc.condition is None or exc.condition in RETRYABLE_CONDITIONS
    return False


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    """The connection dropped; reconnecting starts."""

    peer: str
    """``host:port`` of the peer that was lost."""
    error: errors.AMQPError
    """Why."""


@dataclass(frozen=True, slots=True)
class Reconnected:
    """The connection is open again and its sessions and links are re-attaching."""

    peer: str
    """``host:port`` now connected to."""
    attempts: int
    """Connection attempts this outage took (1: the first one worked)."""
    downtime: float
    """Seconds between the drop and the new open."""
    links: int
    """Links being re-attached."""
    unsettled: int
    """Unsettled sends offered for resumption (re-sent where the peer does not know them)."""


@dataclass(frozen=True, slots=True)
class ReconnectFailed:
    """Reconnecting gave up; the connection is closed with ``error``."""

    error: errors.AMQPError


ReconnectEvent: TypeAlias = ConnectionLost | Reconnected | ReconnectFailed


@dataclass(frozen=True)
class ReconnectPolicy:
    """When and how to re-open a dropped connection (and to retry the first connect).

    Attempts go through the URLs in turn; after each full round the next
    round waits ``initial_delay * multiplier**(round - 1)`` seconds (at most
    ``max_delay``), spread by ``jitter`` (0.1: +-10 %). The first round after
    a drop starts at once, with the URL that was in use. Reconnecting gives up
    after ``max_attempts`` attempts or ``max_time`` seconds, whichever comes
    first (at least one of them must be finite), with a
    :class:`~amqp10.errors.ReconnectError` carrying the last failure.

    ``retryable(exc)`` decides which failures are worth another attempt (the
    default is :func:`is_retryable`); any other failure ends at once.
    ``on_event`` is called (synchronously, in the connection's task: it must
    not block) with a :class:`ConnectionLost`, :class:`Reconnected` or
    :class:`ReconnectFailed`.
    """

    initial_delay: float = 0.1
    max_delay: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.1
    max_attempts: int | None = None
    max_time: float | None = 60.0
    retryable: Callable[[BaseException], bool] = is_retryable
    on_event: Callable[[ReconnectEvent], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("reconnect delays must not be negative")
        if self.multiplier < 1:
            raise ValueError("the backoff multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a fraction between 0 and 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.max_time is not None and not self.max_time > 0:
            raise ValueError("max_time must be positive")
        unbounded_time = self.max_time is None or math.isinf(self.max_time)
        if self.max_attempts is None and unbounded_time:
            raise ValueError("a reconnect policy needs a bound: max_attempts or a finite max_time")

    def delay(self, round_: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before round ``round_`` (0: the first round, no wait)."""
        if round_ <= 0:
            return 0.0
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (round_ - 1))
        if self.jitter:
            base *= 1 + (rng or random).uniform(-self.jitter, self.jitter)
        return max(base, 0.0)


def once_each(targets: int) -> ReconnectPolicy:
    """What a list of URLs without a policy means: try each once, in order."""
    return ReconnectPolicy(initial_delay=0.0, max_delay=0.0, max_attempts=targets, max_time=None)


class Schedule:
    """The attempts of one outage (or of the first connect): which target, after what delay.

    ``targets`` is how many URLs there are; ``start`` the index to begin with.
    Pure bookkeeping: the caller passes the time in.
    """

    def __init__(self, policy: ReconnectPolicy, targets: int, start: int, now: float) -> None:
        self.policy = policy
        self.targets = targets
        self.start = start
        self.started = now
        self.attempts = 0
        self.last_error: BaseException | None = None
        self._rng = random.Random()

    def next(self, now: float) -> tuple[float, int] | None:
        """``(delay, target index)`` of the next attempt, or None when the policy is spent."""
        p = self.policy
        k = self.attempts
        if p.max_attempts is not None and k >= p.max_attempts:
            return None
        delay = p.delay(k // self.targets, self._rng) if k % self.targets == 0 else 0.0
        if p.max_time is not None and now + delay - self.started >= p.max_time:
            return None
        self.attempts += 1
        return delay, (self.start + k) % self.targets

    def remaining(self, now: float) -> float:
        """Seconds left of ``max_time`` (infinite without one)."""
        if self.policy.max_time is None:
            return math.inf
        return max(self.policy.max_time - (now - self.started), 0.0)
