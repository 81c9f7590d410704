"""Run a sans-IO engine over an anyio byte stream: one reader, one writer, the timers.

The driver knows nothing of AMQP beyond the engine's four calls, so the same
loop runs the bare :class:`amqp10.transport.Connection` or a SASL layer that
presents the same interface (see :class:`EngineProtocol`).

- **Reading**: one task reads bounded chunks (``max_read`` bytes), feeds them to
  ``receive_data`` and hands the events to the owner's callback. The owner can
  :meth:`Driver.pause_reading` (back-pressure: it holds too many undelivered
  messages); while paused the reader still takes one chunk per ``pause_limit``
  seconds, so the peer's heartbeats keep the idle timer alive.
- **Writing**: one task writes. Anything that changes the engine calls
  :meth:`Driver.flush_soon`; the writer wakes once, takes everything queued
  with one ``data_to_send()`` and writes it in one ``send`` - a burst of frames
  costs one system call. :meth:`Driver.flush` waits until what was queued
  before the call has been handed to the stream. :meth:`Driver.batch` is for
  a caller about to wait for the answer to what it queues (a send waiting for
  its outcome): what it queues goes out in one write, at once where the
  driver can tell that nothing else would share it.
- **Timers**: the writer calls ``tick(now)`` with anyio's clock each round and
  sleeps until the deadline it returns (or until woken).

I/O failures end the driver: the engine is told the stream ended (``b""``),
the owner gets the resulting events, and :attr:`Driver.error` holds the
failure as an :class:`amqp10.errors.ConnectionError`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from .. import errors
from .asyncio_tcp import asyncio_tcp
from .net import IO_ERRORS, describe_io_error, map_io_error

__all__ = ["Driver", "EngineProtocol", "Signal"]

log = logging.getLogger("amqp10.io")


EventT = TypeVar("EventT")
"""The type of the events an engine emits (its own event classes)."""

T = TypeVar("T")


class EngineProtocol(Protocol[EventT]):
    """What the driver needs from an engine (the transport Connection or a SASL layer)."""

    def receive_data(self, data: bytes) -> list[EventT]: ...

    def data_to_send(self) -> bytes: ...

    def tick(self, now: float) -> float | None: ...

    def poll_events(self) -> list[EventT]: ...

    @property
    def is_closed(self) -> bool: ...


class Signal:
    """A wake-up for tasks waiting on a condition: they re-check it after each :meth:`fire`.

    Holds no state of its own (nothing is "set"), so it never goes stale:
    waiters loop ``while not condition(): await signal.wait()``.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def fire(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self) -> None:
        event = self._event
        if event is None:
            event = self._event = anyio.Event()
        await event.wait()


EventCallback = Callable[[list[EventT]], None]


class Driver(Generic[EventT]):
    """Runs ``protocol`` over ``stream`` until the engine closes or the stream fails.

    ``on_events(events)`` is called (synchronously, in the driver's tasks) with
    every batch of engine events; it must not block. ``peer`` names the other
    end in error messages.
    """

    def __init__(
        self,
        stream: ByteStream,
        protocol: EngineProtocol[EventT],
        on_events: EventCallback[EventT],
        *,
        peer: str = "peer",
        max_read: int = 65536,
        pause_limit: float | None = None,
    ) -> None:
        if max_read < 1:
            raise ValueError("max_read must be positive")
        self.stream = stream
        self.protocol = protocol
        self.peer = peer
        self.max_read = max_read
        self.pause_limit = pause_limit
        self.error: errors.ConnectionError | None = None
        """The I/O failure (or internal error) that stopped the driver, if any."""
        self.done = False
        """True once both tasks stopped and the stream is closed."""
        self.reads = 0
        self.writes = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self._on_events = on_events
        self._dispatching = False  # inside on_events: whoever called it writes right after
        self._wake_pending = False
        self._wake: anyio.Event | None = None  # set while the writer waits (None: it is busy)
        self._deadline: float | None = None  # the engine's next timer, as the writer last saw it
        self._requested = 0  # flush generations asked for ...
        self._written = 0  # ... and handed to the stream
        self._flushed = Signal()
        self._paused = False
        self._resumed = Signal()
        self._scope: anyio.CancelScope | None = None
        self._eof = False
        self._started = False
        self._finished = Signal()  # no event is made unless someone waits (most never do)
        # a plain TCP stream on asyncio is written without awaiting when it can take the
        # bytes now (see amqp10.io.asyncio_tcp); None: always through ``await stream.send``
        self._direct = asyncio_tcp(stream)
        self._asleep_until = math.inf  # the deadline the writer sleeps until (while it does)
        self._after_write: list[Callable[[], None]] = []  # see after_write

    # -- for the owner ----------------------------------------------------------------
    def flush_soon(self) -> None:
        """Ask the writer to write what the engine has queued (cheap; call after every change).

        Inside the driver's own call of ``on_events`` it does nothing: the driver writes
        what the engine queued right after that call, so owners call it unconditionally."""
        if self._wake_pending or self._dispatching:
            return
        self._wake_pending = True
        if self._wake is not None:
            self._wake.set()

    def after_write(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once what the engine has queued so far has been handed to the
        stream, in a write of its own: output ``callback`` causes goes out in a later write.
        (The broker starts a new consumer's deliveries so: its attach answer is read alone,
        before the link's first transfers.) Never called if the connection ends first."""
        self._after_write.append(callback)

    def batch(self, work: Callable[[], T]) -> T:
        """Run ``work()`` (which queues output in the engine and may call :meth:`flush_soon`)
        and have what it queued written in one write; returns what ``work()`` returns.

        For a caller about to wait for the answer: :class:`~amqp10.io.direct.DirectDriver`
        writes at once when it is idle and the event loop has nothing else to run before
        its next poll (so nothing else would have shared the write), which saves the loop
        turn a scheduled write costs; otherwise (and here) it is :meth:`flush_soon`, and
        the write is shared as usual. Inside the driver's own call of ``on_events`` (or
        another batch) it is just ``work()``: that caller writes right after. ``work()``
        must bring no timer of the engine earlier (sends and settlements do not): that
        immediate write leaves the timers to the writer's timer and the next flush.
        """
        if self._dispatching:
            return work()
        self._dispatching = True  # (flush_soon waits for the write below)
        try:
            return work()
        finally:
            self._dispatching = False
            self._write_batch()

    def read_here(self, limit: float) -> bool:
        """Wait at most ``limit`` seconds in the calling thread, which holds the driver's event
        loop without running it, for what the peer sends, and feed it to the engine as the
        loop would: True if it read (or met the stream's end), False if it could not, or
        should not, and the caller must run the loop instead. Only
        :class:`~amqp10.io.direct.DirectDriver` can; here, never."""
        return False

    def _write_batch(self) -> None:
        """After :meth:`batch`'s work: write what it queued (here: as :meth:`flush_soon`)."""
        self.flush_soon()

    @property
    def flush_mark(self) -> int:
        """Taken once some bytes are queued in the engine: ``flush(after=mark)`` waits for them."""
        return self._requested

    async def flush(self, after: int | None = None) -> None:
        """Wait until everything the engine queued before this call was written to the stream.

        ``after``: wait only for what was queued before :attr:`flush_mark` read
        ``after``. If a flush was asked for since, its write covers those bytes,
        so many waiters share one write instead of asking for one each.
        """
        if after is not None and self._requested > after:
            target = after + 1  # asked for after those bytes were queued: it covers them
        else:
            self._requested += 1
            target = self._requested
        if self._written >= target:
            return
        self.flush_soon()
        while self._written < target:
            if self.done:
                raise self.error or errors.ConnectionClosed(f"connection to {self.peer} is closed")
            await self._flushed.wait()

    def pause_reading(self) -> None:
        """Stop feeding the engine (back-pressure) until :meth:`resume_reading`."""
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._resumed.fire()

    @property
    def reading_paused(self) -> bool:
        return self._paused

    def abort(self, error: errors.ConnectionError | None = None) -> None:
        """Stop both tasks now and close the stream (``error`` is kept if none is yet)."""
        if error is not None and self.error is None:
            self.error = error
        if self._scope is not None:
            self._scope.cancel()
        else:
            self._eof = True  # not running yet: run() returns at once

    async def wait_done(self) -> None:
        while not self.done:
            await self._finished.wait()

    async def close_if_unused(self) -> None:
        """Close the stream if :meth:`run` never ran (its task was cancelled first)."""
        if not self.done and not self._started:
            self.done = True
            self._finished.fire()
            await anyio.aclose_forcefully(self.stream)

    # -- the tasks ----------------------------------------------------------------------
    async def run(self) -> None:
        """Read and write until the engine is closed or the stream fails, then close the stream."""
        self._started = True
        # (no ``finally`` with an await in it: compiled by mypyc 1.x, one re-raised the
        # cancellation that the task group had caught; an except and a plain call do not)
        try:
            if not self._eof:
                async with anyio.create_task_group() as tg:
                    self._scope = tg.cancel_scope
                    tg.start_soon(self._read_loop)
                    await self._write_loop()
                    tg.cancel_scope.cancel()
        except BaseException:
            await self._end()
            raise
        await self._end()

    async def _end(self) -> None:
        """:meth:`run`'s end, however it ends: close the stream, wake every waiter."""
        self._scope = None
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(1.0):
                await self.stream.aclose()
            self.done = True
            self._flushed.fire()
            self._resumed.fire()
            self._finished.fire()

    def _dispatch(self, events: list[EventT]) -> None:
        """Hand ``events`` to the owner; every caller writes the engine's output after it."""
        self._dispatching = True
        try:
            try:
                self._on_events(events)
            finally:
                self._dispatching = False
        except Exception as exc:
            # a bug in the owner's handler: do not let it tear through the task group
            log.exception("error while handling events from %s", self.peer)
            err = errors.ConnectionError(
                f"connection to {self.peer} stopped: internal error while handling events: {exc!r}"
            )
            err.__cause__ = exc
            self.abort(err)

    def _io_failed(self, exc: BaseException, op: str) -> None:
        if self.error is None and not self.protocol.is_closed:
            if self.bytes_read == 0 and isinstance(self.stream, TLSStream):
                # A TLS server that rejects our certificate (or its absence) after
                # the handshake often just drops the connection: its alert is lost.
                self.error = errors.TLSError(
                    f"connection to {self.peer} failed: the peer ended the TLS session before "
                    f"sending anything ({describe_io_error(exc)}; does it require a client certificate?)"
                )
                self.error.__cause__ = exc
            elif isinstance(exc, anyio.EndOfStream):
                pass  # the engine says what an EOF means at this point
            else:
                self.error = map_io_error(exc, f"connection to {self.peer} failed ({op})")
                self.error.__cause__ = exc
            if self.error is not None:
                log.debug("%s", self.error)
        self._end_of_stream()

    def _end_of_stream(self) -> None:
        if not self._eof:
            self._eof = True
            events = self.protocol.receive_data(b"")
            if events:
                self._dispatch(events)
        self.flush_soon()

    async def _read_loop(self) -> None:
        stream = self.stream
        protocol = self.protocol
        while not self._eof:
            if self._paused:
                with anyio.move_on_after(self.pause_limit if self.pause_limit else math.inf):
                    while self._paused and not self._eof:
                        await self._resumed.wait()
                if self._eof:
                    return
            try:
                data = await stream.receive(self.max_read)
            except anyio.ClosedResourceError:
                return  # we closed it
            except IO_ERRORS as exc:
                self._io_failed(exc, "read")
                return
            self.reads += 1
            self.bytes_read += len(data)
            events = protocol.receive_data(data)
            if events:
                self._dispatch(events)
            if protocol.is_closed:
                self.flush_soon()  # the writer writes the last bytes and ends
                return
            if not self._write_now():
                self.flush_soon()

    def _write_now(self) -> bool:
        """Write the engine's output from the reading task, without waking the writer: only
        while the writer sleeps (it holds no bytes taken from the engine, so order is kept)
        and the stream takes bytes without waiting. False: it is the writer's job."""
        direct = self._direct
        if direct is None or self._wake is None or self._wake_pending or not direct.writable():
            return False
        # what was read may have moved a timer (an open's idle-time-out, a login's hold):
        # one earlier than the writer sleeps until is the writer's to handle
        deadline = self.protocol.tick(anyio.current_time())
        if deadline is not None and deadline < self._asleep_until:
            return False
        self._send_queued(direct.write)
        return True

    def _send_queued(self, write: Callable[[bytes], object]) -> None:
        """Hand all the engine has queued to ``write`` (which takes it without waiting) and
        mark the flushes asked for so far as done. The one place (for :meth:`_write_now` and
        :class:`~amqp10.io.direct.DirectDriver`) that keeps the order: the generation is read
        before the bytes are taken, so a flush asked for meanwhile waits for the next write.
        An error from ``write`` propagates, with nothing marked written."""
        generation = self._requested
        data = self.protocol.data_to_send()
        if data:
            write(data)
            self.writes += 1
            self.bytes_written += len(data)
        self._written = generation
        self._flushed.fire()
        if self._after_write:
            self._run_after_write()

    def _run_after_write(self) -> None:
        """Call the :meth:`after_write` callbacks (what they queue waits for the next write)."""
        callbacks, self._after_write = self._after_write, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # a bug in the owner's callback: stop this connection
                log.exception("error in a callback after writing to %s", self.peer)
                self.abort(errors.ConnectionError(f"connection to {self.peer} stopped: internal error: {exc!r}"))
                return
        self.flush_soon()

    async def _write_loop(self) -> None:
        protocol = self.protocol
        stream = self.stream
        while True:
            self._wake_pending = False
            deadline = self._deadline = protocol.tick(anyio.current_time())
            events = protocol.poll_events()
            if events:
                self._dispatch(events)
            generation = self._requested
            data = protocol.data_to_send()
            if data:
                direct = self._direct
                if direct is not None and direct.writable():
                    direct.write(data)  # taken at once: no await, no task switch
                else:
                    try:
                        await stream.send(data)
                    except IO_ERRORS as exc:
                        self._io_failed(exc, "write")
                        return
                self.writes += 1
                self.bytes_written += len(data)
                self._written = generation
                self._flushed.fire()
                if self._after_write:
                    self._run_after_write()
                continue  # more may have been queued while we waited on the socket
            self._written = generation
            self._flushed.fire()
            if self._after_write:
                self._run_after_write()
                continue  # (what they queued)
            if protocol.is_closed or self._eof:
                return
            if self._wake_pending:
                continue
            self._asleep_until = math.inf if deadline is None else deadline
            delay = math.inf if deadline is None else max(deadline - anyio.current_time(), 0.0)
            wake = self._wake = anyio.Event()
            with anyio.move_on_after(delay):
                await wake.wait()
            self._wake = None
