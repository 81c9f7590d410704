"""The store's group committer: operations collected from the event loop and written
to a :class:`~.store.SqlStore` in one transaction per batch from a worker thread, so a
burst of N messages costs one fsync, not N. A caller's ``on_commit`` runs only once
its operation is durable: this is when the broker accepts a message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from .accounting import Histogram
from .store import Op, SqlStore

log = logging.getLogger("amqp10.broker")


COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Upper bounds (seconds) of the commit latency histogram (``amqp10_store_commit_seconds``)."""


class GroupCommitter:
    """Collects store operations and commits them in batches from a worker thread.

    ``submit(op, on_commit)`` never blocks; ``on_commit`` runs in the event loop
    once the operation is durable (this is when the broker accepts a message).
    Run :meth:`run` in a task group; :meth:`flush` waits for everything so far.
    """

    RETRY_SECONDS = 0.5
    """How often a write the store had no room for is tried again."""

    def __init__(self, store: SqlStore, *, interval: float = 0.002, max_batch: int = 2048) -> None:
        self.store = store
        self.interval = interval
        self.max_batch = max_batch
        self.stalled: str | None = None
        """Why the last write failed and waits to be retried (the store is out of space), or None."""
        self._stopping = False
        self._ops: list[Op] = []
        self._callbacks: list[Callable[[], None]] = []
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._closed = False
        self.commits = 0
        self.ops_committed = 0
        self.latency = Histogram(COMMIT_BUCKETS)
        """Seconds each commit took (the write and its fsync, as the event loop waits)."""
        self.error: BaseException | None = None

    def submit(self, op: Op, on_commit: Callable[[], None] | None = None) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")
        ops = self._ops
        ops.append(op)
        if on_commit is not None:
            self._callbacks.append(on_commit)
        if len(ops) == 1:
            # The first since the committer took the last batch. With more, it is already
            # woken (or its commit loop takes them before it idles): no event calls per op.
            if self._idle.is_set():
                self._idle = anyio.Event()
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._ops)

    @property
    def idle(self) -> bool:
        """Whether everything submitted is committed and its ``on_commit`` has run."""
        return not self._ops and self._idle.is_set()

    async def flush(self) -> None:
        """Wait until every operation submitted so far is committed."""
        while self._ops or not self._idle.is_set():
            await self._idle.wait()

    async def run(self) -> None:
        """Commit batches until cancelled (then commit what is left)."""
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                if self.interval and len(self._ops) < self.max_batch:
                    await anyio.sleep(self.interval)
                await self._commit_pending()
        finally:
            self._stopping = True
            with anyio.CancelScope(shield=True):
                await self._commit_pending()

    async def _commit_pending(self) -> None:
        """Commit everything submitted, in order. A batch the store has no room for is
        kept, with its callbacks (nothing in it is confirmed), and tried again every
        :attr:`RETRY_SECONDS` with what came after it; :attr:`stalled` says so meanwhile.
        Once stopping, such a batch is given up (logged): it was never confirmed."""
        while self._ops:
            ops, self._ops = self._ops, []
            callbacks, self._callbacks = self._callbacks, []
            started = time.perf_counter()
            try:
                # shielded: a batch taken out of _ops is written even when the committer is
                # being cancelled (the broker stopping); a cancellation at the writer thread's
                # start would otherwise drop it, with nothing left for run's final commit
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.store.apply, ops)
            except Exception as exc:
                if not self.store.out_of_space(exc):
                    self.error = exc
                    raise
                if self._stopping:
                    log.error("stopping with %d store writes not done (%s): none was confirmed", len(ops), exc)
                    self._ops.clear()
                    self._callbacks.clear()
                    break
                if self.stalled is None:
                    log.warning("the store has no room (%s): refusing messages until a write succeeds", exc)
                self.stalled = f"the store has no room: {exc}"
                self._ops[:0] = ops
                self._callbacks[:0] = callbacks
                await anyio.sleep(self.RETRY_SECONDS)
                continue
            except BaseException as exc:
                self.error = exc
                raise
            if self.stalled is not None:
                self.stalled = None
                log.warning("the store has room again: accepting messages")
            self.latency.observe(time.perf_counter() - started)
            self.commits += 1
            self.ops_committed += len(ops)
            for cb in callbacks:
                cb()
        self._idle.set()

    def close(self) -> None:
        self._closed = True
