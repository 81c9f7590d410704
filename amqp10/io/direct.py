"""A :class:`Driver` that feeds the engine from asyncio's protocol callbacks: no task switch per read.

The plain :class:`Driver` reads with ``await stream.receive()`` and writes from a
writer task woken by :meth:`Driver.flush_soon`: for each burst a peer sends, the
reader task wakes (and anyio re-registers the socket with epoll twice), then the
writer task wakes. With a client that waits for each answer (pika's
``BlockingConnection`` with publisher confirms: one message per round trip) those
task switches were most of the broker's CPU per message.

:class:`DirectDriver` serves the same engine over a plain TCP stream of anyio's
asyncio backend. While it runs it puts its own :class:`asyncio.Protocol` on the
stream's transport: ``data_received`` hands the bytes to the engine and the events
to the owner at once, then writes what that queued with one ``transport.write``
before returning (an answer costs no second turn of the event loop: no callback
scheduled, no extra ``epoll_wait``). Output caused from elsewhere (another
connection's read, a timer) goes through :meth:`flush_soon`, which schedules one
plain callback (``loop.call_soon``) that writes everything the engine queued -
after every other callback of that loop turn, so a burst of deliveries to this
connection still goes out in one system call. :meth:`Driver.batch` (a send that
waits for its outcome) writes at once instead when no flush is scheduled and the
loop has no other callback ready before its next poll: nothing else could share
that write, and the turn the scheduled callback would cost (an ``epoll_wait``
with no timeout, then the callback) is saved. The writer task
of :class:`Driver` stays, for the timers (heartbeats) and for writing while the
transport's buffer is over its high-water mark (``pause_writing``: the engine keeps
its output until the kernel has taken the backlog).

:meth:`DirectDriver.usable` says whether a stream qualifies (see
:mod:`amqp10.io.asyncio_tcp`: anyio's asyncio ``SocketStream``, not TLS, not a
WebSocket); the broker falls back to :class:`Driver` otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from asyncio import events as _events
from collections.abc import Callable
from typing import Any, Final

import anyio
from anyio.abc import ByteStream

from .. import errors
from .asyncio_tcp import Poller, asyncio_tcp, nothing_ready
from .driver import Driver, EngineProtocol, EventCallback, EventT, Signal

__all__ = ["DirectDriver"]

log = logging.getLogger("amqp10.io")

WRITE_HIGH_WATER = 256 * 1024
"""Bytes the transport may buffer before the engine keeps its output (back-pressure)."""

READ_SLICE: Final = 16 * 1024
"""The most bytes of a read handed to the engine at once. The rest of a bigger read is
fed a slice a turn of the loop (reading paused meanwhile), so that while a peer's burst
is handled (asyncio reads up to 256 KB: over 1,500 small transfers, 20 ms and more) the
other connections, timers and tasks get their turns, and each slice's answers go out at
its end. The broker's group committer commits the first part of a publisher's window
while the rest is handled (bench/RESULTS.md, durable against non-durable). The
transport itself reads no more than this at a time (its ``max_size``): the rest of a
burst waits in the kernel, and a read allocates no more than the heap serves."""


class _Feed(asyncio.Protocol):
    """The transport's protocol while a :class:`DirectDriver` runs.

    Write pauses and the connection's loss are passed on to anyio's own protocol too,
    so that a ``stream.send()`` (the writer task's) waits and fails as anyio's would.
    """

    def __init__(self, driver: DirectDriver[Any], anyio_protocol: Any) -> None:
        self.driver = driver
        self.anyio_protocol = anyio_protocol

    def data_received(self, data: bytes) -> None:
        self.driver._on_data(data)

    def eof_received(self) -> bool:
        self.driver._on_eof(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.anyio_protocol.connection_lost(exc)
        self.driver._on_eof(exc)

    def pause_writing(self) -> None:
        self.anyio_protocol.pause_writing()
        self.driver._write_paused = True

    def resume_writing(self) -> None:
        self.anyio_protocol.resume_writing()
        self.driver._write_paused = False
        self.driver.flush_soon()


class DirectDriver(Driver[EventT]):
    """:class:`Driver` with reads from protocol callbacks and writes from a loop callback.

    ``on_read`` (optional) is called after each chunk is read (the broker sets
    ``TCP_QUICKACK`` there). Everything else is as :class:`Driver`.
    """

    @staticmethod
    def usable(stream: ByteStream) -> bool:
        """True if ``stream`` is a plain TCP stream of anyio's asyncio backend."""
        return asyncio_tcp(stream) is not None

    def __init__(
        self,
        stream: ByteStream,
        protocol: EngineProtocol[EventT],
        on_events: EventCallback[EventT],
        *,
        peer: str = "peer",
        pause_limit: float | None = None,
        on_read: Callable[[], None] | None = None,
    ) -> None:
        if not self.usable(stream):
            raise ValueError("DirectDriver needs a plain TCP stream of anyio's asyncio backend")
        super().__init__(stream, protocol, on_events, peer=peer, pause_limit=pause_limit)
        tcp = self._direct
        assert tcp is not None
        self._transport: asyncio.Transport = tcp.transport
        self._anyio_protocol: Any = tcp.protocol
        self._on_read = on_read
        self._loop: asyncio.AbstractEventLoop | None = None
        self._installed = False
        self._write_paused = False
        self._flush_scheduled = False
        self._read_done = Signal()
        self._peek: asyncio.TimerHandle | None = None
        self._backlog: bytearray | None = None  # what is left of a read, fed a slice a turn
        self._poller: Poller | bool | None = None  # read_here's (False: it cannot)
        self.reads_here = 0
        """Reads :meth:`read_here` made (for tests)."""

    # -- the owner's calls ------------------------------------------------------------------
    def flush_soon(self) -> None:
        if self._dispatching:
            return  # the callback that dispatched writes right after
        self._wake_pending = True
        if not self._installed or self._write_paused or self._eof:
            if self._wake is not None:
                self._wake.set()
            return
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_now)

    @property
    def reading_ahead(self) -> bool:
        """Whether part of a read waits to be fed to the engine (a slice a turn)."""
        return self._backlog is not None

    def pause_reading(self) -> None:
        if self._paused:
            return
        self._paused = True
        if self._installed and not self._eof:
            self._transport.pause_reading()
            self._arm_peek()

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        self._resumed.fire()
        if self._peek is not None:
            self._peek.cancel()
            self._peek = None
        if self._installed and not self._eof and self._backlog is None:
            self._transport.resume_reading()

    # -- reading ----------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        """Put the protocol on the transport, feed what anyio had read, then wait for EOF."""
        self._loop = asyncio.get_running_loop()
        anyio_protocol = self._anyio_protocol
        leftovers = list(anyio_protocol.read_queue)
        anyio_protocol.read_queue.clear()
        ended = anyio_protocol.is_at_eof or anyio_protocol.exception is not None
        transport = self._transport
        transport.pause_reading()
        transport.set_protocol(_Feed(self, anyio_protocol))
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if hasattr(transport, "max_size"):
            # asyncio's selector transport reads up to max_size (256 KiB) at a time: each
            # read allocates that much, which glibc serves with mmap (then mremap, munmap:
            # three system calls and fresh pages per read) unless its heap happens to have
            # that much free. We feed READ_SLICE a turn anyway: read no more than that.
            transport.max_size = READ_SLICE
        self._installed = True
        for chunk in leftovers:
            if self._eof:
                break
            self._on_data(chunk)
        if ended:
            self._on_eof(anyio_protocol.exception)
        elif not self._eof:
            if self._paused:
                self._arm_peek()
            elif self._backlog is None:  # (else once the backlog is fed)
                transport.resume_reading()
        while not self._eof:
            await self._read_done.wait()

    def read_here(self, limit: float) -> bool:
        """(In a thread that holds the loop without running it: the blocking client's call
        waiting for an answer) wait for the socket and feed what it reads as
        ``data_received`` would, with the loop set as this thread's running one: no turn of
        the loop, no callback, one ``poll`` and one ``read``. False, having read nothing,
        where the loop has work of its own first (a ready callback, a scheduled write, bytes
        the transport holds for a writable socket, another file it waits on), where reading
        is paused or part of a read waits, or where the loop is not asyncio's selector loop
        (see :class:`~amqp10.io.asyncio_tcp.Poller`); and False once its next timer comes
        due or another thread wakes it: the caller runs the loop then."""
        loop = self._loop
        if (
            loop is None
            or not self._installed
            or self._paused
            or self._eof
            or self._backlog is not None
            or self._flush_scheduled
            or self._write_paused
            or self._scope is None
            or not nothing_ready(loop)
        ):
            return False
        transport = self._transport
        if transport.is_closing() or transport.get_write_buffer_size():
            return False  # (what the transport holds goes out as the loop sees the socket writable)
        poller = self._poller
        if poller is None:
            poller = self._poller = Poller.make(loop, transport) or False
        if poller is False:
            return False
        assert isinstance(poller, Poller)
        if not poller.wait(limit):
            return False
        _events._set_running_loop(loop)
        try:
            try:
                data = poller.read(READ_SLICE)
            except BlockingIOError:
                return False
            except OSError as exc:
                self._on_eof(exc)
                return True
            self.reads_here += 1
            if data:
                self._on_data(data)
            else:
                self._on_eof(None)
        finally:
            _events._set_running_loop(None)
        return True

    def _on_data(self, data: bytes) -> None:
        if self._eof or self._scope is None:
            return
        self.reads += 1
        self.bytes_read += len(data)
        if self._on_read is not None:
            self._on_read()
        if self._backlog is not None:  # after what is left of an earlier read
            self._backlog += data
            return
        if len(data) > READ_SLICE:
            self._backlog = bytearray(data[READ_SLICE:])
            data = data[:READ_SLICE]
            self._transport.pause_reading()
            assert self._loop is not None
            self._loop.call_soon(self._next_slice)
        self._feed(data)

    def _next_slice(self) -> None:
        """Feed the next slice of what is left of a read (:data:`READ_SLICE`)."""
        backlog = self._backlog
        if backlog is None:
            return
        if self._eof or self._scope is None:
            self._backlog = None
            return
        if len(backlog) > READ_SLICE:
            data = bytes(backlog[:READ_SLICE])
            del backlog[:READ_SLICE]
            assert self._loop is not None
            self._loop.call_soon(self._next_slice)
        else:
            data = bytes(backlog)
            self._backlog = None
            if not self._paused:
                self._transport.resume_reading()
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """Hand ``data`` to the engine and its events to the owner, then write the answers."""
        if self._eof:
            return
        try:
            events = self.protocol.receive_data(data)
            if events:
                self._dispatch(events)
        except Exception as exc:  # an engine bug: stop this connection, not the loop
            log.exception("error while reading from %s", self.peer)
            self.abort(
                errors.ConnectionError(
                    f"connection to {self.peer} stopped: internal error: {exc!r}"
                )
            )
            return
        # the answer to what was read goes out now, in this callback (an owner's
        # flush_soon meanwhile only marked it; a callback scheduled before is a no-op)
        self._wake_pending = True
        if self._installed and not self._write_paused and not self._eof:
            self._flush_now()
        else:
            self.flush_soon()
        if self.protocol.is_closed:
            self._stop_reading()
        elif self._paused or self._backlog is not None:
            self._transport.pause_reading()
            if self._paused:
                self._arm_peek()

    def _on_eof(self, exc: Exception | None) -> None:
        if self._eof or self._scope is None:
            return  # closing already (our own aclose), or not running
        while self._backlog is not None and not self._eof:  # what was read comes before the end
            self._next_slice()
        if self._eof:
            return
        if exc is None:
            self._io_failed(anyio.EndOfStream(), "read")
        else:
            self._io_failed(exc, "read")
        self._stop_reading()

    def _stop_reading(self) -> None:
        self._eof = True
        if self._peek is not None:
            self._peek.cancel()
            self._peek = None
        self._read_done.fire()
        if self._wake is not None:
            self._wake.set()

    def _arm_peek(self) -> None:
        """While paused, take one chunk every ``pause_limit`` seconds (the peer's heartbeats)."""
        if self.pause_limit and self._peek is None and self._loop is not None:
            self._peek = self._loop.call_later(self.pause_limit, self._peek_once)

    def _peek_once(self) -> None:
        self._peek = None
        if self._paused and not self._eof and self._backlog is None:
            self._transport.resume_reading()  # _on_data pauses again after one chunk

    # -- writing ----------------------------------------------------------------------------
    def _write_batch(self) -> None:
        loop = self._loop
        if not self._flush_scheduled and self._installed and loop is not None and nothing_ready(loop):
            # (it hands over to the writer task if the stream cannot take it.) No tick: a
            # batch queues sends and settlements, which bring no timer of the engine
            # earlier (what they write only puts its next heartbeat later); the timers run
            # at the next flush or read, or when the writer's timer, armed at the engine's
            # last deadline, fires
            self._flush_now(timers=False)
        else:
            self.flush_soon()

    def _flush_now(self, timers: bool = True) -> None:
        """Write what the engine has queued now, after running its timers (``tick``) unless
        ``timers`` is False: then none can have come due earlier than the writer's timer."""
        self._flush_scheduled = False
        if self._wake is None or self._scope is None or self._write_paused or self._eof:
            # the writer task is busy (in a send: what it took must go out first), or
            # the stream is ending or full: the writer takes it from here
            self._wake_pending = True
            if self._wake is not None:
                self._wake.set()
            return
        protocol = self.protocol
        self._wake_pending = False
        assert self._loop is not None
        deadline = protocol.tick(self._loop.time()) if timers else None
        events = protocol.poll_events()
        if events:
            self._dispatch(events)
        try:
            self._send_queued(self._transport.write)
        except (RuntimeError, OSError) as exc:
            self._io_failed(exc, "write")
            self._stop_reading()
            return
        armed = self._deadline
        if protocol.is_closed or (deadline is not None and (armed is None or deadline < armed)):
            if self._wake is not None:  # the writer re-arms its timer (or ends)
                self._wake.set()
