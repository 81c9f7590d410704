"""The event loop under the blocking facade, run in the threads that wait on it.

:class:`Loop` owns an asyncio event loop that no thread runs for good. A blocking
call runs it in the caller's own thread until what the call waits for is done
(:meth:`Loop.wait_for`): a ``send()`` that waits for its outcome costs no wake-up
of a second thread, as in Proton's ``BlockingConnection``, which runs its reactor
in the caller's thread too. While the loop has nothing of its own to do, such a call
waits for the connection's answer on its socket and feeds it as the loop would
(:attr:`Loop.reader`, :meth:`~amqp10.io.direct.DirectDriver.read_here`): no turn of
the loop at all. The async client runs in that loop unchanged; nothing of its logic
is copied here.

Only one thread runs the loop at a time (:attr:`Loop.cond` guards who). A call
made while another thread's call runs the loop hands its work to that thread (one
wake-up, as a portal call would) and sleeps until its work is done or the loop is
free, then runs the loop itself. Between calls, a keeper thread takes the loop once
no call has run it for :data:`GRACE` seconds (heartbeats, incoming frames and
credit, reconnects, what was queued without waiting) and hands it back to the next
call: that handover (two wake-ups) is paid after an idle gap, never per call in a
loop of calls. The blocking direct peer (:mod:`.syncserve`) keeps the loop in the
keeper thread for good (``lend=False``): its handlers' calls hand their work over.
Ctrl-C while the main thread runs the loop ends the loop's turn first and is raised
in the call (:meth:`Loop._trap_sigint`: the trap stays in place between calls, and
until the loop is shut, so a call costs no system call for it).

Work reaches the loop in order: jobs (sends, settlements) queue on a deque and
start together at the loop's next turn; a :meth:`Loop.call` starts a task after
them. :class:`Tracker` is a blocking send's outcome, completed from the loop
without a task; :class:`Settlement` is a delivery's outcome on its way to the
async receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import math
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import sniffio

from .. import errors
from . import receiver as _receiver
from . import sender as _sender
from . import transactions as _txn
from ._common import Outcome

__all__ = [
    "GRACE", "Job", "Loop", "Settlement", "Tracker", "start_loop", "wait_send", "withdraw_all",
]  # fmt: skip

T = TypeVar("T")

GRACE = 0.02
"""Seconds the loop may go unrun between two blocking calls before the keeper thread
runs it (and the next call takes it back from the keeper)."""

try:  # the C functions under ``signal``: its wrappers' enum conversions cost ~7 µs a call
    _signals: Any = importlib.import_module("_signal")
except ImportError:  # pragma: no cover - not CPython
    _signals = signal


class Job(Protocol):
    """Work queued for the event loop by :meth:`Loop.post`."""

    def _start(self) -> None:
        """(In the loop) do it; what fails later is the job's own business."""

    def _cancel(self, error: errors.AMQPError) -> None:
        """The loop stopped before starting it."""


class Batch(Protocol):
    """Runs ``work()`` so that what it queues goes out in one write; returns its result."""

    def __call__(self, work: Callable[[], T], /) -> T: ...


class Loop:
    """The event loop as the blocking classes see it: run by whoever waits on it.

    :meth:`wait_for` runs the loop in the calling thread until a condition holds
    (or sleeps while another thread runs it); :meth:`call` runs a coroutine
    function there and returns its result; :meth:`post` queues a job without
    waiting (one wake-up per batch, and none while no other thread runs the
    loop: the next call, or the keeper, starts it). A call starts what was
    posted before it first, so the two stay in order (a settlement queued before
    a commit is in the transaction; one queued before a close goes out before
    it). What completes in the loop calls :meth:`completed`, which ends the
    current run of a waiting caller (it looks again) and wakes the threads
    sleeping on :attr:`cond`.
    """

    __slots__ = (
        "_aloop", "_ctx", "_deadline", "_driver", "_guests", "_interrupted", "_jobs", "_keeper",
        "_keeper_id", "_kicked", "_left_at", "_lend", "_lock", "_main_id", "_pump", "_shutting",
        "_stops", "_waiters", "_watch", "_woken", "_written", "_yield", "batch", "calls",
        "closed", "cond", "grace", "handovers", "reader",
    )  # fmt: skip

    def __init__(self, *, lend: bool = True) -> None:
        self._aloop = asyncio.new_event_loop()
        # what the loop's callbacks run in: anyio finds asyncio there without a task
        self._ctx = contextvars.copy_context()
        self._ctx.run(sniffio.current_async_library_cvar.set, "asyncio")
        self._lend = lend  # a blocking call may run the loop in its own thread
        self._lock = threading.Lock()  # cond's (taken directly where nobody waits: cheaper)
        self.cond = threading.Condition(self._lock)
        """Guards who runs the loop; threads waiting on the loop sleep on it."""
        self.closed: errors.AMQPError | None = None  # set once the loop takes no more work
        self._shutting = False  # closing: nobody starts running the loop any more
        self._driver: int | None = None  # the thread running the loop now
        self._keeper = threading.Thread(target=self._keep, name="amqp10-sync-loop", daemon=True)
        self._keeper_id: int | None = None
        self._yield = False  # a call asked the keeper for the loop
        self._left_at = 0.0  # when the last call stopped running the loop
        self.grace = GRACE
        """Seconds the loop may go unrun between calls before the keeper runs it."""
        self._waiters = 0  # threads sleeping on cond
        self._guests = 0  # of them, those that cannot run the loop: the keeper runs it for them
        self._stops = False  # a call runs the loop: completions end its run, to look
        self._deadline = math.inf  # when the call running the loop stops waiting
        self._watch: asyncio.TimerHandle | None = None  # stops the loop at _deadline
        self._interrupted = False  # Ctrl-C while a call ran the loop in the main thread
        self._main_id = threading.main_thread().ident  # (the thread Python runs signal handlers in)
        self._jobs: deque[Job] = deque()
        self.batch: Batch | None = None
        """Runs a start of the queued jobs so that what they queue goes out in one write,
        at once when nothing else would share it: the connection driver's
        :meth:`~amqp10.io.driver.Driver.batch` (a waiting ``send()`` then needs no turn
        of the loop to write, and :attr:`reader` none to read). None: each job's write is
        scheduled as the async client's."""
        self.reader: Callable[[float], bool] | None = None
        """Waits at most the seconds given, in the calling thread (the loop taken, not
        running), for the connection's next read and feeds it: True if it did, False if
        the loop must run instead (:meth:`~amqp10.io.driver.Driver.read_here`). None: the
        loop always runs."""
        self._woken = False  # a start of the queued jobs is scheduled: posting needs no wake-up
        self._written: list[Tracker] = []  # pre-settled sends to complete once written out
        self._kicked: asyncio.Event | None = None
        self._pump: asyncio.Task[None] | None = None
        self.calls = 0
        """Calls that waited for a task of the loop (:meth:`call`): for tests."""
        self.handovers = 0
        """Times a thread handed work to another running the loop (a wake-up): for tests."""

    def start(self) -> None:
        """Start the pump task (it completes pre-settled sends once written out) and
        the keeper thread."""
        self._pump = self._aloop.create_task(self._run_pump(), context=self._ctx.copy())
        self._left_at = time.monotonic()  # the first call comes at once: the keeper waits
        self._keeper.start()

    # -- the callers' side ----------------------------------------------------------------
    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` in the loop, after what was posted before, and return its result."""
        self.calls += 1
        job: _Call[T] = _Call(self, fn)
        self.post(job)
        try:
            self.wait_for(job.finished)
        except BaseException:  # Ctrl-C: the call is given up, and so is its task
            if not job.done:
                self.soon(job.abandon)
            raise
        return job.result()

    def flush(self) -> None:
        """Wait until the loop has started every job posted before."""
        if self.closed is None:
            self.call(partial(asyncio.sleep, 0))

    def post(self, job: Job) -> None:
        """Queue ``job`` to start in the loop, in order with the others posted."""
        if self.closed is not None:
            raise self.closed
        self._jobs.append(job)
        if not self._woken:
            # (appended before looking: a thread that starts running the loop after this
            # line looks at the jobs after it took the loop, and so starts this one)
            driver = self._driver
            if driver is not None and driver != threading.get_ident():
                self._woken = True
                self.handovers += 1
                try:
                    self._aloop.call_soon_threadsafe(self._start_woken, context=self._ctx)
                except RuntimeError:  # the event loop is closed: the connection is gone
                    raise errors.ConnectionClosed("the connection is closed") from None

    def soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` in the loop soon, from any thread (a no-op once it is shut)."""
        with contextlib.suppress(RuntimeError):  # (closed)
            self._aloop.call_soon_threadsafe(callback, context=self._ctx)

    def wait_for(self, done: Callable[[], bool], timeout: float = math.inf) -> bool:
        """Until ``done()``, at most ``timeout`` seconds: True once done, False if the
        time ran out or the loop was shut first.

        Runs the loop in this thread while no other thread does; otherwise sleeps
        until ``done()`` or until the loop is free (asking the keeper thread to hand
        it over). A thread that runs an event loop of its own (a Jupyter kernel's, a
        Playwright script's, an async program's) cannot run this one: it sleeps while
        the keeper runs it at once. Ctrl-C while this thread runs the loop is raised
        here once the loop has finished its turn (see :meth:`_trap_sigint`).
        """
        if done():
            return True
        end = time.monotonic() + timeout
        me = threading.get_ident()
        lend = self._lend and not _in_a_running_loop()
        cond = self.cond
        lock = self._lock
        while True:
            with lock:
                while True:
                    if self._shutting:
                        return done()
                    left = end - time.monotonic()
                    if left <= 0:
                        return done()
                    driver = self._driver
                    if driver is None and lend:
                        self._driver = me
                        break  # (_run looks at done() once it has started the queued jobs)
                    if done():
                        return True
                    if driver == me:  # (from a callback or task of the loop itself)
                        raise RuntimeError("a blocking call cannot be made inside the event loop")
                    if driver == self._keeper_id and lend and not self._yield:
                        self._yield = True  # the keeper hands the loop over after its turn
                        self._aloop.call_soon_threadsafe(self._aloop.stop)
                    self._waiters += 1
                    if not lend:
                        self._guests += 1
                        cond.notify_all()  # (the keeper takes the loop now, not after its grace)
                    try:
                        cond.wait(None if math.isinf(left) else left)
                    finally:
                        self._waiters -= 1
                        if not lend:
                            self._guests -= 1
            try:
                self._run(done, end, me)
            finally:
                self._let_go()
            if done():
                return True

    def send_here(self, submit: Callable[[], _sender.Tracker], end: float) -> _sender.Tracker | None:
        """A waiting send started and waited for in this thread, without a job or a
        :class:`Tracker`: if nobody runs the loop and this thread may, take it, start
        what was posted before and then ``submit()`` (the async send) as one batch,
        and run the loop until the async tracker is done or ``end`` (monotonic).
        Returns that tracker (not done if the time ran out, the loop was shut, or it
        waits for its bytes to be written: see :func:`wait_send`), or None, having
        started nothing, when another thread runs the loop (or a start of the posted
        jobs is scheduled, which must come first, or this thread cannot run the loop):
        then the send is posted as a :class:`Tracker`. Raises what ``submit()`` raises.
        """
        if not self._lend or _in_a_running_loop():
            return None
        me = threading.get_ident()
        with self._lock:
            if self._driver is not None or self._woken or self._shutting:
                return None
            self._driver = me
        try:
            batch = self.batch
            if batch is None:
                inner = self._ctx.run(self._start_then, submit)
            else:
                inner = self._ctx.run(batch, partial(self._start_then, submit))
            if not inner.done:
                inner.add_done_callback(self.completed)
                self._run(lambda: inner.done, end, me)
        finally:
            self._let_go()
        return inner

    def _start_then(self, submit: Callable[[], T]) -> T:
        """(The loop taken, not running) start the jobs posted so far, then ``submit()``."""
        if self._jobs:
            self._start_jobs()
        return submit()

    def _let_go(self) -> None:
        """The calling thread stops running the loop: whoever waits for it looks."""
        with self._lock:
            self._driver = None
            self._left_at = time.monotonic()
            if self._waiters:
                self.cond.notify_all()

    def _run(self, done: Callable[[], bool], end: float, me: int) -> None:
        """(With the loop taken) run it in this thread until ``done()`` or ``end``."""
        aloop = self._aloop
        if self._jobs and not self._woken:
            # start them here, not from a callback: the loop is ours and not running, so
            # a send's transfer is queued and written (see batch) before the answer is
            # waited for (by the reader, or the loop's first turn): no turn just to write
            self._ctx.run(self.start_posted)
        trap = self._trap_sigint() if me == self._main_id else None
        self._stops = True
        try:
            while not done() and not self._shutting and not self._interrupted:
                now = time.monotonic()
                if now >= end:
                    break
                reader = self.reader
                if reader is not None and self._read_here(reader, end - now):
                    continue  # (fed in this thread: no turn of the loop)
                self._arm(end)
                aloop.run_forever()
        finally:
            self._stops = False
            self._deadline = math.inf
            if trap is not None:
                trap.loop = None
        if self._interrupted:
            self._interrupted = False
            raise KeyboardInterrupt

    def _read_here(self, reader: Callable[[float], bool], limit: float) -> bool:
        """(In :meth:`_run`) the connection's answer read and fed in this thread by
        ``reader`` (:attr:`reader`), in the loop's context; completions meanwhile need not
        stop the loop, which is not running. False: the loop must run."""
        self._stops = False
        try:
            return bool(self._ctx.run(reader, limit))
        finally:
            self._stops = True

    def _trap_sigint(self) -> _SigintTrap | None:
        """(In the main thread) have Ctrl-C stop the loop at the end of its turn while this
        call runs it, so that the KeyboardInterrupt is raised in the caller (as it was
        while the caller slept on a condition), not in the middle of a callback or a task
        of the connection. Only in place of Python's own handler: the trap put there is
        left in place between calls (no system call per call; outside a call it raises
        KeyboardInterrupt as Python's does) and shared by every loop; :meth:`stop` puts
        Python's back. Returns the trap, armed for this loop, or None."""
        handler = _signals.getsignal(signal.SIGINT)
        if type(handler) is not _SigintTrap:
            if handler is not signal.default_int_handler:
                return None  # the program's own handler: leave Ctrl-C to it
            handler = _SigintTrap()
            _signals.signal(signal.SIGINT, handler)
        handler.loop = self
        return handler

    def _interrupt(self) -> None:
        """(From the signal handler, in the main thread, which runs the loop) Ctrl-C."""
        self._interrupted = True
        self._aloop.call_soon_threadsafe(self._aloop.stop)  # (wakes its poll)

    def _arm(self, end: float) -> None:
        """Stop the loop at ``end`` (monotonic): one timer serves many calls, re-armed
        when it fires before the deadline of the call running then."""
        self._deadline = end
        if math.isinf(end):
            return
        watch = self._watch
        if watch is not None:
            if watch.when() <= end:
                return
            watch.cancel()
        self._watch = self._aloop.call_at(end, self._on_watch, context=self._ctx)

    def _on_watch(self) -> None:
        self._watch = None
        deadline = self._deadline
        if math.isinf(deadline):
            return
        if self._aloop.time() >= deadline:
            self._aloop.stop()
        else:
            self._watch = self._aloop.call_at(deadline, self._on_watch, context=self._ctx)

    # -- the keeper thread ------------------------------------------------------------------
    def _keep(self) -> None:
        """Run the loop whenever no call has for :data:`GRACE` seconds, until shut."""
        cond = self.cond
        me = self._keeper_id = threading.get_ident()
        while True:
            with cond:
                while True:
                    if self._shutting:
                        return
                    grace = self.grace
                    if self._driver is None:
                        idle = time.monotonic() - self._left_at
                        if not self._lend or self._guests or (idle >= grace and not self._waiters):
                            self._driver = me
                            break
                        # (a call waiting for the loop takes it itself: the keeper that has
                        # just handed it over does not take it back first)
                        cond.wait(None if math.isinf(grace) else grace - idle if idle < grace else grace)
                    else:  # a call runs the loop: look again later (a call never wakes us)
                        cond.wait(None if math.isinf(grace) else grace)
            try:
                aloop = self._aloop
                if self._jobs and not self._woken:
                    self._woken = True
                    aloop.call_soon(self._start_woken, context=self._ctx)
                while not self._yield and not self._shutting:
                    aloop.run_forever()
            finally:
                with cond:
                    self._driver = None
                    self._yield = False
                    if self._waiters:
                        cond.notify_all()

    # -- in the loop --------------------------------------------------------------------------
    def completed(self, _what: object = None) -> None:
        """Something a blocking call may wait for is done (``_what``: a done callback's
        argument, unused): the call running the loop looks (its run ends after this
        turn), and so do the threads sleeping on it."""
        if self._stops:
            self._aloop.stop()
        if self._waiters:
            with self.cond:
                self.cond.notify_all()

    def start_posted(self) -> None:
        """(In the loop) start every job posted so far, in order, as one :attr:`batch`."""
        batch = self.batch
        if batch is None:
            self._start_jobs()
        else:
            batch(self._start_jobs)

    def _start_jobs(self) -> None:
        jobs = self._jobs
        while jobs:
            jobs.popleft()._start()

    def _start_woken(self) -> None:
        """(In the loop, a plain callback) start every job posted so far."""
        self._woken = False  # reset before draining: a job posted after this line wakes us again
        self.start_posted()

    def create_task(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        """(In the loop) a task of the loop running ``coro``."""
        return asyncio.ensure_future(coro, loop=self._aloop)

    def written(self, tracker: Tracker) -> None:
        """(In the loop) complete ``tracker``, a pre-settled send, once it is written out."""
        self._written.append(tracker)
        if self._kicked is not None:
            self._kicked.set()

    async def _run_pump(self) -> None:
        while True:
            self._kicked = asyncio.Event()  # before looking: written() after this line sets it
            if self._written:
                written, self._written = self._written, []
                for tracker in written:
                    await tracker._flushed()
            else:
                await self._kicked.wait()

    # -- the connection's life -------------------------------------------------------------
    @contextlib.contextmanager
    def hold(self, cm: AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Enter ``cm`` in a task of the loop, which keeps it entered until this exits."""
        release = asyncio.Event()
        entered: list[T] = []

        async def holder() -> None:
            async with cm as value:
                entered.append(value)
                self.completed()
                await release.wait()

        job = _Call(self, holder)
        self.post(job)
        self.wait_for(lambda: bool(entered) or job.done)
        if not entered:
            job.result()  # raises what failed it
            raise errors.ConnectionClosed("the connection is closed")
        try:
            yield entered[0]
        finally:
            if not self._shutting:
                self.call(partial(_set, release))
                self.wait_for(job.finished)
                job.result()

    def stop(self, error: errors.AMQPError) -> None:
        """Take no more work and shut the event loop: what is still queued fails with
        ``error``, what still runs in the loop is cancelled, every wait still blocked
        returns (the connection is closed by now), and the keeper thread ends."""
        cond = self.cond
        with cond:
            if self.closed is None:
                self.closed = error
            if self._shutting:
                return
            self._shutting = True
            if self._driver is not None:  # the keeper, or a call on its way out: they end now
                self._aloop.call_soon_threadsafe(self._aloop.stop)
            cond.notify_all()
        while self._jobs:
            self._jobs.popleft()._cancel(error)
        if self._keeper.is_alive() and self._keeper is not threading.current_thread():
            self._keeper.join()
        with cond:
            while self._driver is not None:
                self._waiters += 1
                try:
                    cond.wait()
                finally:
                    self._waiters -= 1
            self._driver = threading.get_ident()
        try:
            if _in_a_running_loop():  # (this thread cannot run ours: a thread of its own does)
                closer = threading.Thread(target=self._wind_up, name="amqp10-sync-close")
                closer.start()
                closer.join()
            else:
                self._wind_up()
        finally:
            self._aloop.close()
            if threading.get_ident() == self._main_id:
                _untrap_sigint()
            with cond:
                self._driver = None
                cond.notify_all()

    def _wind_up(self) -> None:
        """(The loop taken, for good) cancel what still runs in it and let it end."""
        aloop = self._aloop
        tasks = [t for t in asyncio.all_tasks(aloop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            _run_until(aloop, asyncio.gather(*tasks, return_exceptions=True))
        _run_until(aloop, aloop.shutdown_asyncgens())
        _run_until(aloop, aloop.shutdown_default_executor())


class _SigintTrap:
    """The Ctrl-C handler of the loops run by blocking calls in the main thread.

    While a call runs a loop (:attr:`loop`), Ctrl-C ends that loop's turn and is raised
    in the call; otherwise it raises KeyboardInterrupt, as Python's own handler does.
    """

    __slots__ = ("loop",)

    def __init__(self) -> None:
        self.loop: Loop | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        loop = self.loop
        if loop is None:
            signal.default_int_handler(signum, frame)
        else:
            loop._interrupt()


def _untrap_sigint() -> None:
    """(In the main thread) put Python's Ctrl-C handler back if a loop's idle trap has it."""
    handler = _signals.getsignal(signal.SIGINT)
    if type(handler) is _SigintTrap and handler.loop is None:
        _signals.signal(signal.SIGINT, signal.default_int_handler)


def _in_a_running_loop() -> bool:
    """Whether this thread is inside a running event loop (then it cannot run another)."""
    return asyncio._get_running_loop() is not None  # (get_running_loop() raises: slower)


def _run_until(aloop: asyncio.AbstractEventLoop, work: Awaitable[Any]) -> None:
    """Run ``aloop`` until ``work`` is done: ``run_until_complete``, but not ended by a
    stop asked earlier (a completion's, or one left for a keeper that had gone)."""
    future = asyncio.ensure_future(work, loop=aloop)
    future.add_done_callback(lambda _: aloop.stop())
    while not future.done():
        aloop.run_forever()
    future.result()


async def _set(event: asyncio.Event) -> None:
    event.set()


class _Call(Generic[T]):
    """A coroutine function run in a task of the loop by :meth:`Loop.call`, and its result."""

    __slots__ = ("_abandoned", "_error", "_fn", "_loop", "_result", "_task", "done")

    def __init__(self, loop: Loop, fn: Callable[[], Awaitable[T]]) -> None:
        self._loop = loop
        self._fn = fn
        self.done = False
        self._result: T | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[T] | None = None
        self._abandoned = False

    def finished(self) -> bool:
        return self.done

    def result(self) -> T:
        if not self.done:
            raise self._loop.closed or errors.ConnectionClosed("the connection is closed")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def _start(self) -> None:
        if self._abandoned:
            return
        self._task = task = self._loop.create_task(self._fn())
        task.add_done_callback(self._task_done)

    def abandon(self) -> None:
        """(In the loop) nobody waits for the result: cancel the task."""
        self._abandoned = True
        if self._task is not None:
            self._task.cancel()

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._error = self._loop.closed or errors.ConnectionClosed("the connection is closed")
        else:
            self._error = task.exception()
            if self._error is None:
                self._result = task.result()
        self.done = True
        self._loop.completed()

    def _cancel(self, error: errors.AMQPError) -> None:
        self._error = error
        self.done = True


class Tracker:
    """A submitted message's outcome (see :class:`amqp10.client.Tracker`).

    Made in the calling thread and queued; the event loop starts the send with
    the async :meth:`amqp10.client.Sender.submit` and completes this tracker
    from the async one's done callback. :meth:`wait` runs the loop (or sleeps
    while another thread does) until then, and once :attr:`done` it reads the
    outcome without the loop.
    """

    __slots__ = ("_done", "_error", "_inner", "_loop", "_outcome", "_payload", "_sender",
                 "_settled", "_txn")  # fmt: skip

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
        if loop.wait_for(self._finished, limit):
            return
        if loop.closed is not None:
            self._complete(None, loop.closed)
            return
        # timed out: withdraw the send in the loop, as the async wait does
        loop.call(partial(self._expire, limit))

    def _finished(self) -> bool:
        return self._done

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
        self._loop.completed()


def wait_send(
    loop: Loop,
    sender: _sender.Sender,
    payload: bytes,
    settled: bool | None,
    txn: _txn.Transaction | None,
    timeout: float | None,
) -> Outcome | None:
    """A blocking ``send()`` that waits for its outcome: started in this thread and
    waited for on the async tracker (:meth:`Loop.send_here`) while nobody else runs
    the loop, else posted as a :class:`Tracker`. As the async wait does, timing out
    withdraws the message, and a pre-settled one is done once it is written out.
    """
    limit = sender._conn._timeout_for(timeout)
    end = time.monotonic() + limit
    inner = loop.send_here(partial(sender.submit, payload, settled=settled, txn=txn), end)
    if inner is None:
        tracker = Tracker(loop, sender, payload, settled, txn)
        loop.post(tracker)
        return tracker.wait(timeout)
    if not inner.done or sender.unflushed(inner):
        # the time ran out (withdrawn there), the loop was shut (raises why), or the
        # pre-settled send's bytes may not be out yet: the rest of the async wait
        left = max(end - time.monotonic(), 0.0)
        loop.call(partial(sender._outcome_of, inner, left, limit))
    return inner.result()


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


def start_loop(stack: contextlib.ExitStack, *, lend: bool = True) -> Loop:
    """An event loop for blocking calls, with its keeper thread; ``stack`` shuts both.

    What enters ``stack`` afterwards (a connection, a server, through
    :meth:`Loop.hold`) closes first, so the sends still waiting have failed by the
    time the loop is shut. ``lend=False``: the keeper thread runs the loop for good
    (the blocking direct peer's).
    """
    loop = Loop(lend=lend)
    loop.start()
    stack.callback(loop.stop, errors.ConnectionClosed("the connection is closed"))
    return loop
