"""Login and connection hygiene, for every protocol front end: one `ConnectionGuard`.

The service owns one guard and asks it, per connection:

- at accept, :meth:`ConnectionGuard.admit` (the source address's connection rate, a token
  bucket, and its connection count). A refusal is *hard* (close the socket at once: a
  flood gets nothing to work on) or *soft* (let the client log in, then refuse its open
  with ``amqp:resource-limit-exceeded``, so it sees why);
- after authentication, :meth:`ConnectionGuard.opened` (the user's connection count);
- for each login, :meth:`ConnectionGuard.login_failed` / :meth:`ConnectionGuard.login_ok`,
  which return how long to hold the answer back. Failures back off exponentially per
  source address and per user; a success is held back by its *address's* failures only
  (so a guesser cannot tell a success by its speed, while the real user logging in from
  elsewhere is not slowed down by someone guessing their password).

`HeldOutput` holds an engine's output back without blocking anything: it is the sans-IO
wrapper the driver runs, and the hold is a timer deadline like any other. Refusals and
failed logins are logged through `RefusalLog`: one line per address and reason per
interval, with the count of what it left out.

Nothing here knows a protocol: the AMQP 1.0 path in ``service.py`` calls it, and the
0-9-1 front end calls the same object with its own user names and outcomes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

import anyio

from ..io.driver import EngineProtocol
from .config import SecurityConfig

__all__ = [
    "ConnectionGuard",
    "CountedElsewhere",
    "HeldOutput",
    "Login",
    "LoginHook",
    "Refusal",
    "RefusalLog",
    "source_of",
]

log = logging.getLogger("amqp10.broker.guard")

MAX_TRACKED: Final = 100_000
"""Addresses or users tracked at most; beyond it the ones with nothing to remember go."""

_MAX_KEY: Final = 256  # a user name from the wire is kept at most this long


def source_of(peer: str) -> str:
    """The address part of a ``host:port`` peer name (``[v6]:port`` too)."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a connection is refused, and how."""

    reason: str
    """One line for the log and for the client's close description."""
    hard: bool
    """Close the socket at once (nothing is read); otherwise refuse the open with
    ``amqp:resource-limit-exceeded`` (after the login, so the client sees the condition)."""


class CountedElsewhere(Protocol):
    """The connections of the broker's other workers (``workers`` > 1:
    :class:`~amqp10.broker.workers.counters.SharedCounts`), and where this worker's go."""

    def total(self) -> int: ...
    def address(self, address: str) -> int: ...
    def user(self, user: str) -> int: ...
    def publish_total(self, n: int) -> None: ...
    def publish_address(self, address: str, n: int) -> None: ...
    def publish_user(self, user: str, n: int) -> None: ...


class LoginHook(Protocol):
    """What a front end that checks logins itself (0-9-1) tells the service's guard."""

    def succeeded(self, user: str | None) -> str | None:
        """``user`` (None: anonymous) logged in; returns why its connection is refused
        (a per-user limit), or None."""

    def failed(self, name: str | None, reason: str) -> None:
        """Credentials given as ``name`` did not check out (the answer is held back)."""


class Login:
    """The [security] hook of one connection's login (a :class:`LoginHook`), for every front
    end: a failed login's answer waits out the back-off (and so does a success, by its
    address's failures), and a user over its connection limit is told why. Counted users
    are released by :meth:`ended`."""

    def __init__(
        self,
        guard: ConnectionGuard,
        held: HeldOutput[Any],
        addr: str,
        extend: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self.guard = guard
        self.held = held
        self.addr = addr
        self.extend = extend
        """Told each hold's length (the engine's handshake timer must not count it)."""
        self.counted: list[str | None] = []  # the user the guard counted this connection for

    def _hold(self, seconds: float) -> None:
        self.held.hold(anyio.current_time(), seconds)
        self.extend(seconds)

    def succeeded(self, user: str | None) -> str | None:
        """``user`` (None: anonymous) logged in; returns why its connection is refused, if it is."""
        self._hold(self.guard.login_ok(self.addr, user))
        over = self.guard.opened(user, self.addr)
        if over is not None:
            return over.reason
        self.counted.append(user)
        return None

    def failed(self, name: str | None, reason: str) -> None:
        """Credentials that did not check out (a guess): back off."""
        self._hold(self.guard.login_failed(self.addr, name, reason))

    def ended(self) -> None:
        for user in self.counted:
            self.guard.closed(user)


class RefusalLog:
    """Logs refusals at most once per ``(address, kind)`` per ``interval`` seconds,
    saying how many it left out since."""

    def __init__(
        self, interval: float, *, clock: Callable[[], float], logger: logging.Logger
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._log = logger
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (logged at, left out)

    def __call__(self, addr: str, kind: str, message: str) -> None:
        now = self._clock()
        key = (addr, kind)
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return
        more = (
            f" ({last[1]} more from {addr} in the last {now - last[0]:.0f}s)"
            if last and last[1]
            else ""
        )
        self._log.warning("%s%s", message, more)
        if len(self._last) >= MAX_TRACKED:
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval}
        self._last[key] = (now, 0)


class _Failures:
    """Failed logins of one address or user: how many, and when the last one was."""

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last = -math.inf


class _Bucket:
    """A token bucket: ``rate`` tokens a second up to ``burst``."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens = burst
        self.stamp = now


class ConnectionGuard:
    """Counts and limits connections and logins per source address and per user.

    ``clock`` (monotonic seconds) is injected so tests can drive time.
    """

    def __init__(
        self,
        config: SecurityConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.config = config
        self.clock = clock
        self.log_refusal = RefusalLog(config.refusal_log_interval, clock=clock, logger=logger)
        self._by_address: dict[str, int] = {}  # open connections per source address
        self._by_user: dict[str, int] = {}  # open connections per authenticated user
        self._buckets: dict[str, _Bucket] = {}
        self._addr_failures: dict[str, _Failures] = {}
        self._user_failures: dict[str, _Failures] = {}
        self.refused = 0
        """Connections refused so far (hard and soft)."""
        self.failed_logins = 0
        """Failed logins so far."""
        self.admitted = 0
        """Connections admitted and not yet released."""
        self.elsewhere: CountedElsewhere | None = None
        """``workers`` > 1: the other workers' connections, counted with this one's by every
        limit (set by the worker's service); None: this process is the whole broker."""

    # -- connections per address: at accept ---------------------------------------------------
    def admit(self, addr: str) -> Refusal | None:
        """A connection from ``addr`` arrives. None: admitted and counted (call
        :meth:`release` when it ends); else how to refuse it (not counted)."""
        cfg = self.config
        now = self.clock()
        if cfg.connection_rate_per_address > 0 and not self._take_token(addr, now):
            return self._refuse(
                addr,
                "rate",
                Refusal(
                    f"more than {cfg.connection_rate_per_address:g} connections a second"
                    f" (burst {cfg.connection_burst_per_address}) from {addr}",
                    hard=True,
                ),
            )
        count = self._by_address.get(addr, 0)
        elsewhere = self.elsewhere
        seen = count if elsewhere is None else count + elsewhere.address(addr)
        if cfg.max_connections_per_address and seen >= cfg.max_connections_per_address:
            return self._refuse(
                addr,
                "address",
                Refusal(f"{addr} has {seen} connections open, the limit per address", hard=False),
            )
        self._by_address[addr] = count + 1
        self.admitted += 1
        if elsewhere is not None:
            elsewhere.publish_address(addr, count + 1)
            elsewhere.publish_total(self.admitted)
        return None

    def release(self, addr: str) -> None:
        """A connection :meth:`admit` counted has ended."""
        _decrement(self._by_address, addr)
        self.admitted -= 1
        if self.elsewhere is not None:
            self.elsewhere.publish_address(addr, self._by_address.get(addr, 0))
            self.elsewhere.publish_total(self.admitted)

    def counted_elsewhere(self) -> int:
        """The connections of the broker's other workers (0 when this process is the broker)."""
        return 0 if self.elsewhere is None else self.elsewhere.total()

    def _take_token(self, addr: str, now: float) -> bool:
        cfg = self.config
        burst = float(cfg.connection_burst_per_address)
        bucket = self._buckets.get(addr)
        if bucket is None:
            if len(self._buckets) >= MAX_TRACKED:
                self._prune_buckets(now)
            bucket = self._buckets[addr] = _Bucket(burst, now)
        else:
            bucket.tokens = min(
                burst, bucket.tokens + (now - bucket.stamp) * cfg.connection_rate_per_address
            )
            bucket.stamp = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _prune_buckets(self, now: float) -> None:
        rate = self.config.connection_rate_per_address
        burst = self.config.connection_burst_per_address
        self._buckets = {
            a: b for a, b in self._buckets.items() if b.tokens + (now - b.stamp) * rate < burst
        }

    # -- connections per user: after the login ------------------------------------------------
    def opened(self, user: str | None, addr: str = "?") -> Refusal | None:
        """``user`` has logged in on a new connection. None: counted (call :meth:`closed`
        when it ends); else the refusal (soft: refuse its open). Anonymous is not counted."""
        if user is None:
            return None
        limit = self.config.max_connections_per_user
        count = self._by_user.get(user, 0)
        elsewhere = self.elsewhere
        seen = count if elsewhere is None else count + elsewhere.user(user)
        if limit and seen >= limit:
            return self._refuse(
                addr,
                "user",
                Refusal(
                    f"user {user!r} has {seen} connections open, the limit per user", hard=False
                ),
            )
        self._by_user[user] = count + 1
        if elsewhere is not None:
            elsewhere.publish_user(user, count + 1)
        return None

    def closed(self, user: str | None) -> None:
        """A connection :meth:`opened` counted for ``user`` has ended."""
        if user is not None:
            _decrement(self._by_user, user)
            if self.elsewhere is not None:
                self.elsewhere.publish_user(user, self._by_user.get(user, 0))

    def _refuse(self, addr: str, kind: str, refusal: Refusal) -> Refusal:
        self.refused += 1
        self.log_refusal(addr, kind, f"refusing a connection: {refusal.reason}")
        return refusal

    # -- logins ------------------------------------------------------------------------------
    def delay_for(self, addr: str, user: str | None, *, failed: bool) -> float:
        """Seconds to hold back a login's outcome, from the failures recorded so far: the
        address's back-off, and for a failure also the user's (whichever is longer)."""
        now = self.clock()
        count = self._count(self._addr_failures, addr, now)
        if failed and user is not None:
            count = max(count, self._count(self._user_failures, user[:_MAX_KEY], now))
        return self._backoff(count)

    def login_failed(self, addr: str, user: str | None, reason: str = "") -> float:
        """Record a failed login; returns the delay before its outcome is sent."""
        now = self.clock()
        self.failed_logins += 1
        self._record(self._addr_failures, addr, now)
        if user is not None:
            self._record(self._user_failures, user[:_MAX_KEY], now)
        delay = self.delay_for(addr, user, failed=True)
        who = f" as {user!r}" if user is not None else ""
        # one line per address and kind of failure ("wrong password", "unknown user" ...)
        self.log_refusal(
            addr,
            "login: " + reason.rpartition(": ")[2][:80],
            f"failed login from {addr}{who}: {reason or 'refused'} (answer held {delay:.2f}s)",
        )
        return delay

    def login_ok(self, addr: str, user: str | None) -> float:
        """Record a successful login; returns the delay before its outcome is sent (the
        address's back-off: a success must not be told apart from a failure by its speed).
        The user's failures are forgotten; the address's only after a quiet period."""
        delay = self.delay_for(addr, user, failed=False)
        if user is not None:
            self._user_failures.pop(user[:_MAX_KEY], None)
        return delay

    def _backoff(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        cfg = self.config
        return float(min(cfg.login_delay_max, cfg.login_delay_base * 2.0 ** min(failures - 1, 64)))

    def _count(self, table: dict[str, _Failures], key: str, now: float) -> int:
        entry = table.get(key)
        if entry is None or now - entry.last > self.config.login_failures_forget:
            return 0
        return entry.count

    def _record(self, table: dict[str, _Failures], key: str, now: float) -> None:
        entry = table.get(key)
        if entry is None:
            if len(table) >= MAX_TRACKED:
                forget = self.config.login_failures_forget
                for k in [k for k, e in table.items() if now - e.last > forget]:
                    del table[k]
            entry = table[key] = _Failures()
        if now - entry.last > self.config.login_failures_forget:
            entry.count = 0  # a quiet period: start again
        entry.count += 1
        entry.last = now


def _decrement(table: dict[str, int], key: str) -> None:
    n = table.get(key, 0) - 1
    if n > 0:
        table[key] = n
    else:
        table.pop(key, None)


EventT = TypeVar("EventT")


class HeldOutput(Generic[EventT]):
    """An engine whose output can be held back until a time (sans-IO: the hold is a timer).

    Wraps any `EngineProtocol` (the SASL+1.0 engine, the 0-9-1 engine) for the driver.
    While held, ``data_to_send`` gives nothing, ``tick`` returns the hold's end as a
    deadline and ``is_closed`` is False (so a failed login's outcome is still written,
    late, before the stream closes); input is read and processed meanwhile.
    """

    def __init__(self, inner: EngineProtocol[EventT]) -> None:
        self.inner = inner
        self.held_for = 0.0
        """Seconds of holds so far (a handshake timer adds them to its allowance)."""
        self._until: float | None = None
        self._now = -math.inf

    def hold(self, now: float, seconds: float) -> None:
        """Write nothing until ``now + seconds`` (``now`` on the driver's clock)."""
        if seconds <= 0:
            return
        until = now + seconds
        self._until = until if self._until is None else max(self._until, until)
        self._now = now
        self.held_for += seconds

    @property
    def held(self) -> bool:
        return self._until is not None and self._now < self._until

    def receive_data(self, data: bytes) -> list[EventT]:
        return self.inner.receive_data(data)

    def data_to_send(self) -> bytes:
        return b"" if self.held else self.inner.data_to_send()

    def tick(self, now: float) -> float | None:
        self._now = now
        if self._until is not None and now >= self._until:
            self._until = None
        deadline = self.inner.tick(now)
        if self._until is None:
            return deadline
        return self._until if deadline is None else min(deadline, self._until)

    def poll_events(self) -> list[EventT]:
        return self.inner.poll_events()

    @property
    def is_closed(self) -> bool:
        return not self.held and self.inner.is_closed
