"""Resource alarms: the broker's memory high-watermark and the store's disk free limit.

Checked once a second by the service (RabbitMQ's model): while the broker process's
resident size is over ``limits.memory_high_watermark`` (a fraction of the machine's
memory, or ``memory_high_watermark_bytes``), or the SQLite store's filesystem has less
free than ``limits.disk_free_limit_bytes``, :meth:`Broker.set_alarm` blocks publishers
(1.0: no credit; 0-9-1: ``connection.blocked``), and clears it once back under.
The readings are functions, so a test can set what they say.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .config import Limits
from .core.broker import Broker

__all__ = ["ResourceAlarms", "default_disk_free_limit", "machine_memory", "resident_bytes"]

_MiB = 1024 * 1024


def resident_bytes() -> int | None:
    """This process's resident set size (None where /proc cannot say)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def machine_memory() -> int | None:
    """The machine's physical memory in bytes (None if the system cannot say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def free_bytes(path: Path) -> int | None:
    """Bytes free to an unprivileged user on ``path``'s filesystem (None: cannot say)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def default_disk_free_limit(path: Path) -> int:
    """1% of ``path``'s filesystem, at least 50 MiB and at most 1 GiB."""
    try:
        st = os.statvfs(path)
        size = st.f_blocks * st.f_frsize
    except OSError:
        size = 0
    return min(1024 * _MiB, max(50 * _MiB, size // 100))


class ResourceAlarms:
    """Sets and clears ``broker``'s alarm from the memory and disk readings."""

    def __init__(self, broker: Broker, limits: Limits, store_dir: Path | None) -> None:
        self.broker = broker
        self.rss: Callable[[], int | None] = resident_bytes
        """The broker's resident size now (a test may replace it)."""
        self.store_dir = store_dir
        self.disk_free: Callable[[], int | None] = lambda: None if store_dir is None else free_bytes(store_dir)
        """Free bytes on the store's filesystem now (None: not checked; a test may replace it)."""
        if limits.memory_high_watermark_bytes is not None:
            self.memory_limit: int | None = limits.memory_high_watermark_bytes
        else:
            total = machine_memory()
            self.memory_limit = None if total is None else int(total * limits.memory_high_watermark)
        limit = limits.disk_free_limit_bytes
        if limit is None:
            limit = 0 if store_dir is None else default_disk_free_limit(store_dir)
        self.disk_limit = limit
        """Free bytes below which publishers are blocked (0: never)."""

    def check(self) -> str | None:
        """Read memory and disk, set or clear the broker's alarm; the reason, or None."""
        reason = None
        rss = self.rss()
        if self.memory_limit is not None and rss is not None and rss > self.memory_limit:
            reason = f"memory: resident size {rss // _MiB} MiB is above the high watermark ({self.memory_limit // _MiB} MiB)"
        elif self.disk_limit:
            free = self.disk_free()
            if free is not None and free < self.disk_limit:
                reason = f"disk: {free // _MiB} MiB free on the store's filesystem, under the limit ({self.disk_limit // _MiB} MiB)"
        self.broker.set_alarm(reason)
        return reason
