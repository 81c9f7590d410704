"""Heartbeat and timeout bookkeeping for a connection, with time passed in.

The connection reports traffic (``received()``, ``sent()``); ``check(now)``
stamps it with the caller's time and says what is due: the connection is lost
(heartbeats missed for two intervals, §4.2.7; the handshake or the close-ok took
too long), a heartbeat should go out (at half the interval, as RabbitMQ does, so
one late tick never costs the connection), and the next deadline.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Due", "Timers"]


@dataclass(frozen=True, slots=True)
class Due:
    """What ``Timers.check`` found."""

    lost: str | None
    """Why the connection is dead, or None."""
    heartbeat: bool
    """Send a heartbeat frame now."""
    deadline: float | None
    """When to check again (None: no timer needed)."""


class Timers:
    """The clocks of one connection: its start, the last traffic each way, its close."""

    __slots__ = (
        "_close_started",
        "_last_recv",
        "_last_sent",
        "_recv_flag",
        "_sent_flag",
        "_started",
        "close_timeout",
        "handshake_timeout",
        "heartbeat",
    )

    def __init__(self, handshake_timeout: float | None, close_timeout: float | None) -> None:
        self.handshake_timeout = handshake_timeout
        self.close_timeout = close_timeout
        self.heartbeat = 0
        """The negotiated interval in seconds (0: none)."""
        self._started: float | None = None
        self._close_started: float | None = None
        self._last_recv = 0.0
        self._last_sent = 0.0
        self._recv_flag = False
        self._sent_flag = False

    def received(self) -> None:
        """Bytes arrived since the last check."""
        self._recv_flag = True

    def sent(self) -> None:
        """Bytes went out since the last check."""
        self._sent_flag = True

    def check(self, now: float, *, handshaking: bool, closing: bool) -> Due:
        """Stamp the traffic seen since the last check with ``now`` and say what is due."""
        if self._started is None:
            self._started = self._last_recv = self._last_sent = now
        if self._recv_flag:
            self._last_recv, self._recv_flag = now, False
        if self._sent_flag:
            self._last_sent, self._sent_flag = now, False
        deadlines: list[float] = []
        if handshaking and self.handshake_timeout is not None:
            if now - self._started >= self.handshake_timeout:
                return Due(f"handshake not done within {self.handshake_timeout}s", False, None)
            deadlines.append(self._started + self.handshake_timeout)
        if closing and self.close_timeout is not None:
            if self._close_started is None:
                self._close_started = now
            if now - self._close_started >= self.close_timeout:
                return Due(f"no close-ok within {self.close_timeout}s", False, None)
            deadlines.append(self._close_started + self.close_timeout)
        beat = False
        hb = self.heartbeat
        if hb:
            if now - self._last_recv >= 2 * hb:
                return Due(f"missed heartbeats from the peer, timeout: {hb}s", False, None)
            if now - self._last_sent >= hb / 2:
                beat = True
                self._last_sent = now
            deadlines += (self._last_sent + hb / 2, self._last_recv + 2 * hb)
        return Due(None, beat, min(deadlines) if deadlines else None)
