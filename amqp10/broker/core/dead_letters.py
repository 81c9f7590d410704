"""Dead letters kept in their source queue until a route takes them (at-least-once).

Under ``x-dead-letter-strategy: at-least-once`` RabbitMQ does not drop a dead letter that
reaches no queue (no dead-letter exchange, no binding that matches, every target full):
the source queue keeps it, out of its ready messages, and sends it again later
(``rabbit_fifo_dlx_worker``). Here a queue keeps such messages in a
:class:`HeldDeadLetters` and tries them again when its virtual host's routes change (a
binding, a queue declared) and otherwise on the broker's once-a-second tick, at an
interval that starts at :data:`FIRST_RETRY` and doubles, while nothing goes, up to
:data:`MAX_RETRY` (RabbitMQ retries every ``dead_letter_worker_publisher_confirm_timeout``,
three minutes). A stored message stays in the store until its dead letter is safe where
it went: a crash loses none, and after a restart it is kept aside again (the store marks
it: ``store.HELD_DEAD_LETTER``), never ready.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from .message import QueuedMessage

__all__ = ["FIRST_RETRY", "MAX_RETRY", "HeldDeadLetters", "SendDeadLetter"]

FIRST_RETRY = 1.0
"""Seconds before the first time-driven retry (the broker's tick is once a second)."""
MAX_RETRY = 60.0
"""The longest wait between two time-driven retries."""

SendDeadLetter = Callable[[QueuedMessage, str, Callable[[], None]], bool]
"""Route a dead letter (``msg, reason, on_stored``); True if a queue took it (``on_stored``
then runs once it is safe there), False if none did (``on_stored`` is not called)."""


class HeldDeadLetters:
    """A queue's dead letters that reached no queue: each with its reason and what to run
    once it is safe elsewhere (delete it from the source queue's store), oldest first."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.items: deque[tuple[QueuedMessage, str, Callable[[], None]]] = deque()
        self.interval = FIRST_RETRY
        self.retry_at = now() + FIRST_RETRY

    def __len__(self) -> int:
        return len(self.items)

    def hold(self, msg: QueuedMessage, reason: str, on_stored: Callable[[], None]) -> None:
        self.items.append((msg, reason, on_stored))

    def due(self) -> bool:
        return self.now() >= self.retry_at

    def retry(self, send: SendDeadLetter) -> int:
        """Send each again, in order; keep those no queue took. How many went; the next
        time-driven retry comes sooner if some went, later (up to :data:`MAX_RETRY`) if none."""
        sent = 0
        for _ in range(len(self.items)):
            msg, reason, on_stored = self.items.popleft()
            if send(msg, reason, on_stored):
                sent += 1
            else:
                self.items.append((msg, reason, on_stored))
        self.interval = FIRST_RETRY if sent else min(self.interval * 2, MAX_RETRY)
        self.retry_at = self.now() + self.interval
        return sent

    def drop(self) -> int:
        """Give them all up (their queue is deleted, or no longer dead-letters): each leaves
        the store. How many."""
        n = len(self.items)
        for _msg, _reason, on_stored in self.items:
            on_stored()
        self.items.clear()
        return n
