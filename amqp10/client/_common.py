"""Small pieces shared by the client modules: settle modes, deadlines, payloads, timeouts."""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeAlias, TypeVar

import anyio

from .. import errors
from ..message import Message
from ..types import (
    Accepted,
    Modified,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "OUTCOMES",
    "Outcome",
    "SettleMode",
    "deadline",
    "encode_payload",
    "windowed",
]

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Seconds any single wait may take unless a ``timeout`` says otherwise."""

Outcome: TypeAlias = Accepted | Rejected | Released | Modified
"""A terminal delivery state (Part 3 §3.4)."""

OUTCOMES = (Accepted, Rejected, Released, Modified)


class SettleMode(enum.Enum):
    """How a link's deliveries are settled: the (snd-settle-mode, rcv-settle-mode) pair.

    ``AT_MOST_ONCE``: the sender settles before sending (nothing comes back).
    ``AT_LEAST_ONCE``: the sender waits for the receiver's outcome, then settles.
    ``MIXED`` (default): the sender picks per message (``send(settled=...)``);
    receivers settle first, as in ``AT_LEAST_ONCE``.
    ``TWO_PHASE``: as ``AT_LEAST_ONCE``, but the receiver's outcome only becomes
    final once the sender has settled (rcv-settle-mode *second*, §2.6.12).
    """

    AT_MOST_ONCE = "at-most-once"
    AT_LEAST_ONCE = "at-least-once"
    MIXED = "mixed"
    TWO_PHASE = "two-phase"

    @property
    def snd_settle_mode(self) -> SenderSettleMode:
        return _MODES[self][0]

    @property
    def rcv_settle_mode(self) -> ReceiverSettleMode:
        return _MODES[self][1]


_MODES = {
    SettleMode.AT_MOST_ONCE: (SenderSettleMode.SETTLED, ReceiverSettleMode.FIRST),
    SettleMode.AT_LEAST_ONCE: (SenderSettleMode.UNSETTLED, ReceiverSettleMode.FIRST),
    SettleMode.MIXED: (SenderSettleMode.MIXED, ReceiverSettleMode.FIRST),
    SettleMode.TWO_PHASE: (SenderSettleMode.UNSETTLED, ReceiverSettleMode.SECOND),
}


def settle_mode(value: SettleMode | str) -> SettleMode:
    """Accept the enum or its value (``"at-least-once"``)."""
    if isinstance(value, SettleMode):
        return value
    try:
        return SettleMode(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in SettleMode)
        raise ValueError(f"settle_mode must be one of {choices}, not {value!r}") from None


_UNBOUNDED: AbstractContextManager[None] = nullcontext()


def deadline(timeout: float, what: str, shown: float | None = None) -> AbstractContextManager[None]:
    """Bound the body by ``timeout`` seconds (``math.inf``: unbounded).

    anyio's cancellation becomes :class:`amqp10.errors.TimeoutError` saying
    ``what timed out after Ns`` (N is ``shown`` if given: the limit the caller
    set, when ``timeout`` is what is left of it).
    """
    if math.isinf(timeout):
        return _UNBOUNDED  # no generator and no cancel scope: it is on every send's path
    return _Bounded(timeout, what, shown)


class _Bounded:
    """:func:`deadline`'s context manager: ``anyio.fail_after`` without its two generator
    layers (it is on the path of every send that waits for its outcome), one cancel scope
    whose expiry, or a plain ``TimeoutError`` from the body, becomes
    :class:`amqp10.errors.TimeoutError`."""

    __slots__ = ("_scope", "_shown", "_timeout", "_what")

    def __init__(self, timeout: float, what: str, shown: float | None) -> None:
        self._timeout = timeout
        self._what = what
        self._shown = shown
        self._scope: anyio.CancelScope | None = None

    def __enter__(self) -> None:
        self._scope = scope = anyio.CancelScope(deadline=anyio.current_time() + self._timeout)
        scope.__enter__()

    def __exit__(self, tp: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        scope = self._scope
        assert scope is not None
        if scope.__exit__(tp, exc, tb):  # it caught a cancellation: its own
            if scope.cancelled_caught and anyio.current_time() >= scope.deadline:
                self._timed_out()
            return True
        if isinstance(exc, TimeoutError) and not isinstance(exc, errors.TimeoutError):
            self._timed_out()  # (the body's: anyio.fail_after's callers took it for theirs)
        return False

    def _timed_out(self) -> None:
        limit = self._timeout if self._shown is None else self._shown
        raise errors.TimeoutError(f"{self._what} timed out after {limit:g}s") from None


Payload: TypeAlias = Message | bytes | bytearray | memoryview


def encode_payload(message: Any) -> bytes:
    """A :class:`Message` encoded, or bytes taken as an already-encoded message."""
    if isinstance(message, Message):
        return message.encode()
    if isinstance(message, bytes):
        return message
    if isinstance(message, (bytearray, memoryview)):
        return bytes(message)
    raise TypeError(
        f"send() takes a Message or the bytes of an encoded message, not {type(message).__name__}"
    )


def describe_outcome(state: Any) -> str:
    """``rejected (amqp:...: text)``, ``released``, ... for messages."""
    if isinstance(state, Rejected):
        e = state.error
        if e is None:
            return "rejected"
        text = str(e.condition) + (f": {e.description}" if e.description else "")
        return f"rejected ({text})"
    if isinstance(state, Released):
        return "released"
    if isinstance(state, Modified):
        return "modified"
    if isinstance(state, Accepted):
        return "accepted"
    return "settled without an outcome" if state is None else repr(state)


def windowed(
    messages: Iterable[Payload], window: int, submit: Callable[[Payload], T], in_flight: deque[T]
) -> Iterator[T]:
    """The windowing of a pipeline: ``submit`` each message, at most ``window`` in flight.

    Yields the oldest submission (taken off ``in_flight``) whenever the caller
    must wait for it: the window is full, or the messages ran out. The next
    message is taken only once there is room, so a source that stops (say,
    after a refusal it was told of) stops the sending. The two pipelines,
    async and blocking, are this plus their way of waiting.
    """
    if window < 1:
        raise ValueError("window must be at least 1")
    source = iter(messages)
    while True:
        while len(in_flight) >= window:
            yield in_flight.popleft()
        message = next(source, None)
        if message is None:
            break
        in_flight.append(submit(message))
    while in_flight:
        yield in_flight.popleft()
