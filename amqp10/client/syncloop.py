"""The event loop thread under the blocking facade, and the work queued for it.

:class:`Loop` is what :mod:`amqp10.client.sync` holds of an event loop running
in a thread (anyio's blocking portal): blocking calls into it, and a queue of
jobs (sends, settlements) that it drains in one hop per batch. :class:`Tracker`
is a blocking send's outcome, completed from the loop without a round trip;
:class:`Settlement` is a delivery's outcome on its way to the async receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.from_thread

from .. import errors
from . import receiver as _receiver
from . import sender as _sender
from . import transactions as _txn
from ._common import Outcome

__all__ = ["Job", "Loop", "Settlement", "Tracker", "portal_backend", "start_loop",
           "withdraw_all"]  # fmt: skip

Soon = Callable[[Callable[[], object]], object]
"""Schedules a plain callback in the event loop, from any thread, without waiting."""


def portal_backend() -> tuple[str, dict[str, Any]]:
    """asyncio, on uvloop when it is installed (it is not a dependency)."""
    if importlib.util.find_spec("uvloop") is None:
        return "asyncio", {}
    return "asyncio", {"use_uvloop": True}


def _soon_threadsafe() -> Soon:
    """The running event loop's thread-safe "call this soon" (asyncio or trio).

    On asyncio the callbacks run in the context of the task that asked for it
    (anyio's, so that anyio's calls work there), not in the posting thread's.
    """
    try:
        soon = asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return partial(soon, context=contextvars.copy_context())


class Job(Protocol):
    """Work queued for the event loop by :meth:`Loop.post`."""

    def _start(self) -> None:
        """(In the loop) do it; what fails later is the job's own business."""

    def _cancel(self, error: errors.AMQPError) -> None:
        """The loop stopped before starting it."""


class Loop:
    """The event loop thread as the blocking classes see it.

    :meth:`call` runs a coroutine function there and waits for it: a round trip
    between threads, for what must answer at once (open, fetch, close).
    :meth:`post` hands it work without waiting: jobs (sends, settlements) queue
    on a deque, and one wake-up per batch starts all that queued, in a plain
    callback of the loop (one ``call_soon_threadsafe`` for the batch, not one per
    message, and no task woken).
    A call starts what was posted before it first, so the two stay in order
    (a settlement queued before a commit is in the transaction; one queued
    before a close goes out before it). Trackers complete in the loop thread
    through :attr:`cond`, which the threads waiting for them sleep on; a done
    tracker is read without the loop.
    """

    __slots__ = ("_jobs", "_kicked", "_portal", "_pump", "_soon", "_woken", "_written", "closed",
                 "cond")  # fmt: skip

    def __init__(self, portal: anyio.from_thread.BlockingPortal) -> None:
        self._portal = portal
        self.cond = threading.Condition()
        self.closed: errors.AMQPError | None = None  # set once the loop takes no more work
        self._jobs: deque[Job] = deque()
        self._woken = False  # a wake-up is on its way: posting more needs none
        self._written: list[Tracker] = []  # pre-settled sends to complete once written out
        self._kicked: anyio.Event | None = None
        self._soon: Soon | None = None
        self._pump: Future[None] | None = None

    def start(self) -> None:
        """Start the pump task, which completes pre-settled sends once written out
        (from a thread other than the loop's)."""
        self._pump, self._soon = self._portal.start_task(self._run)

    def call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``fn()`` in the loop, after what was posted before, and return its result."""
        return self._portal.call(self._in_order, fn)

    async def _in_order(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        self.start_posted()
        return await fn()

    def flush(self) -> None:
        """Wait until the loop has started every job posted before (one round trip)."""
        if self.closed is None:
            self.call(anyio.lowlevel.checkpoint)

    def start_posted(self) -> None:
        """(In the loop) start every job posted so far, in order."""
        jobs = self._jobs
        while jobs:
            jobs.popleft()._start()

    def stop(self, error: errors.AMQPError) -> None:
        """Take no more work: what is still queued fails with ``error``, and so does
        every wait still blocked (the connection is closed by now)."""
        self.closed = error
        if self._pump is not None:
            self._pump.cancel()
        while self._jobs:
            self._jobs.popleft()._cancel(error)
        with self.cond:
            self.cond.notify_all()

    def post(self, job: Job) -> None:
        """Queue ``job`` to start in the loop, in order with the others posted."""
        if self.closed is not None:
            raise self.closed
        self._jobs.append(job)
        if not self._woken:
            self._woken = True
            assert self._soon is not None, "the pump was not started"
            try:
                self._soon(self._start_woken)
            except RuntimeError:  # the event loop ended under us: the connection is gone
                raise errors.ConnectionClosed("the connection is closed") from None

    def _start_woken(self) -> None:
        """(In the loop, a plain callback) start every job posted so far."""
        self._woken = False  # reset before draining: a job posted after this line wakes us again
        self.start_posted()

    def written(self, tracker: Tracker) -> None:
        """(In the loop) complete ``tracker``, a pre-settled send, once it is written out."""
        self._written.append(tracker)
        self._kick()

    def _kick(self) -> None:
        if self._kicked is not None:
            self._kicked.set()

    async def _run(self, *, task_status: anyio.abc.TaskStatus[Soon]) -> None:
        task_status.started(_soon_threadsafe())
        while True:
            self._kicked = anyio.Event()  # before looking: written() after this line sets it
            if self._written:
                written, self._written = self._written, []
                for tracker in written:
                    await tracker._flushed()
            else:
                await self._kicked.wait()


class Tracker:
    """A submitted message's outcome (see :class:`amqp10.client.Tracker`).

    Made in the calling thread and queued; the event loop starts the send with
    the async :meth:`amqp10.client.Sender.submit` and completes this tracker
    from the async one's done callback. :meth:`wait` sleeps on a condition
    until then, and once :attr:`done` it reads the outcome without the loop.
    """

    __slots__ = ("_done", "_error", "_inner", "_loop", "_outcome", "_payload", "_sender",
                 "_settled", "_txn", "_waited")  # fmt: skip

    def __init__(
        self,
        loop: Loop,
        sender: _sender.Sender,
        payload: bytes,
        settled: bool | None,
        txn: _txn.Transaction | None,
    ) -> None:
        self._loop = loop
        self._sender = sender
        self._payload = payload
        self._settled = settled
        self._txn = txn
        self._inner: _sender.Tracker | None = None
        self._done = False
        self._outcome: Outcome | None = None
        self._error: Exception | None = None
        self._waited = False  # a thread sleeps on the loop's condition for this one

    def __repr__(self) -> str:
        if self._inner is None:
            return "<Tracker queued>" if not self._done else f"<Tracker failed: {self._error}>"
        return repr(self._inner)

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> Outcome | None:
        """The outcome (None if sent pre-settled); raises what failed the send, or
        :class:`~amqp10.errors.IllegalStateError` while it is still waiting."""
        if not self._done:
            raise errors.IllegalStateError("the send is still waiting for its outcome")
        if self._error is not None:
            raise self._error
        return self._outcome

    def wait(self, timeout: float | None = None) -> Outcome | None:
        """The outcome, once the peer settles the message (see :meth:`amqp10.client.Tracker.wait`).

        Waits at most ``timeout`` seconds (the connection's default when None);
        timing out withdraws the message, as there.
        """
        if not self._done:
            self._block(timeout)
        return self.result()

    def _block(self, timeout: float | None) -> None:
        limit = self._sender._conn._timeout_for(timeout)
        loop = self._loop
        cond = loop.cond
        end = None if math.isinf(limit) else time.monotonic() + limit
        with cond:
            self._waited = True  # before looking at _done: the loop sets _done, then reads this
            while not self._done and loop.closed is None:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                cond.wait(left)
        if self._done:
            return
        if loop.closed is not None:
            self._complete(None, loop.closed)
            return
        # timed out: withdraw the send in the loop, as the async wait does (one round trip)
        loop.call(partial(self._expire, limit))

    # -- in the event loop -------------------------------------------------------------
    def _start(self) -> None:
        if self._done or self._inner is not None:  # withdrawn, or started by _expire
            return
        try:
            inner = self._sender.submit(self._payload, settled=self._settled, txn=self._txn)
        except Exception as exc:
            self._complete(None, exc)
            return
        self._inner = inner
        self._payload = b""
        inner.add_done_callback(self._inner_done)

    def _inner_done(self, inner: _sender.Tracker) -> None:
        if self._sender.unflushed(inner):
            self._loop.written(self)  # done once its bytes are out, as the async wait
        else:
            self._complete(inner.outcome, inner.error)

    async def _flushed(self) -> None:
        assert self._inner is not None
        try:
            await self._sender.flushed(self._inner)
        except errors.AMQPError as exc:
            self._complete(None, exc)
        else:
            self._complete(None, None)

    async def _expire(self, limit: float) -> None:
        self._start()
        inner = self._inner
        if inner is not None:
            await self._sender._outcome_of(inner, 0.0, limit)
            self._complete(inner.outcome, inner.error)  # came meanwhile (and is written out)

    def _withdraw(self) -> None:
        if self._inner is None:
            self._complete(None, errors.IllegalStateError("the send was withdrawn"))
        else:
            self._sender._withdraw(self._inner)

    def _cancel(self, error: errors.AMQPError) -> None:
        self._complete(None, error)

    def _complete(self, outcome: Outcome | None, error: Exception | None) -> None:
        """The outcome is in (from the loop's thread, or from closing)."""
        if self._done:
            return
        self._outcome = outcome
        self._error = error
        self._done = True
        if self._waited:
            with self._loop.cond:
                self._loop.cond.notify_all()


class Settlement:
    """A delivery's outcome, queued by the blocking :meth:`amqp10.client.sync.Delivery.settle`.

    Started in the loop, it settles the async delivery as
    :meth:`amqp10.client.Delivery.settle` does (the disposition goes out with
    the connection's next write, with the others of its batch); what fails is
    handed to ``failed`` (the blocking receiver keeps it for its next flush).
    """

    __slots__ = ("_delivery", "_failed", "_state", "_txn")

    def __init__(
        self,
        delivery: _receiver.Delivery,
        state: Any,
        txn: _txn.Transaction | None,
        failed: Callable[[Exception], None],
    ) -> None:
        self._delivery = delivery
        self._state = state
        self._txn = txn
        self._failed = failed

    def _start(self) -> None:
        try:
            self._delivery.settle_nowait(self._state, txn=self._txn)
        except Exception as exc:  # (not into the pump: it starts the jobs after this one)
            self._failed(exc)

    def _cancel(self, error: errors.AMQPError) -> None:
        self._failed(error)


async def withdraw_all(trackers: list[Tracker]) -> None:
    for tracker in trackers:
        tracker._withdraw()


def start_loop(stack: contextlib.ExitStack) -> Loop:
    """An event loop thread with its pump; ``stack`` stops both.

    What enters ``stack`` afterwards (a connection, a server) closes first, so
    the sends still waiting have failed by the time the pump stops.
    """
    backend, options = portal_backend()
    portal = stack.enter_context(anyio.from_thread.start_blocking_portal(backend, options))
    loop = Loop(portal)
    loop.start()
    stack.callback(loop.stop, errors.ConnectionClosed("the connection is closed"))
    return loop
