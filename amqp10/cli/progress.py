"""A one-line progress bar for long command-line runs (``amqp10 send|receive|bench``).

Hand-written, no dependency: redrawn in place on a terminal, a plain line every
couple of seconds otherwise (so a log file is not flooded).
"""

from __future__ import annotations

import sys
import time
from typing import IO

__all__ = ["Progress"]


class Progress:
    """A one-line progress bar on a stream (redrawn in place on a terminal).

    ``total`` is the number of messages expected, or None when unknown (then
    only the count, rate and time are shown). Nothing is drawn unless
    ``enabled``.
    """

    def __init__(
        self,
        total: int | None,
        stream: IO[str] | None = None,
        *,
        enabled: bool = True,
        width: int = 30,
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def update(self, done: int, *, force: bool = False) -> None:
        """Show ``done`` messages so far (at most every 0.1 s on a terminal, 2 s elsewhere)."""
        if not self.enabled:
            return
        now = time.monotonic()
        every = 0.1 if self.tty else 2.0
        if not force and now - self._last_draw < every:
            return
        self._last_draw = now
        elapsed = now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            line = f"{done:,} msgs  {rate:,.0f} msg/s  {elapsed:.1f}s"
        else:
            frac = min(done / self.total, 1.0) if self.total else 1.0
            filled = int(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            line = (
                f"[{bar}] {frac * 100:5.1f}% {done:,}/{self.total:,} msgs  "
                f"{rate:,.0f} msg/s  {elapsed:.1f}s"
            )
        if self.tty:
            self.stream.write("\r" + line + "\033[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        """Clear the bar from a terminal (before the summary line is printed)."""
        if self.enabled and self._drawn and self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
