"""A client connection moved to the worker that owns its node (``move_connections``), or
with ``publishers_apart`` a publisher (1.0, 0-9-1) to the worker after it
(:meth:`Handover.worker_for`).

With ``workers`` > 1 the kernel puts each client connection on a worker at random, and
a connection whose queue another worker owns pays the crossing on every message (1.3x
the instructions, bench/RESULTS.md). A plain-TCP connection is moved to the worker B
that owns its queue instead, by replay, at the *deciding event* its front end names:
AMQP 1.0's first attach (moved if its node is B's queue); AMQP 0-9-1's first method
that a replay would not reproduce as it was (moved if it names B's queue: see
:mod:`amqp10.broker.amqp091.frontend`; with ``publishers_apart`` its declarations are
replayed too, answered from B's metadata, ``answered_first`` below); AMQP 0-10's first command of any session (moved
if it names B's queue: :mod:`amqp10.broker.amqp010.frontend`). Before that event the
connection has done nothing a replay on B does not do again the same way (the
handshake; 0-9-1's ``channel.open``, ``basic.qos``, ``confirm.select``, ``tx.select``,
and with ``publishers_apart`` its declarations, answered on B from the metadata but for
their counts; 0-10's fresh ``session.attach`` and the session controls its engine
answers itself):

- The worker that accepted it (A) records every byte it read from the socket and every
  byte it wrote (:class:`Recording`, the driver's engine while the connection is
  movable). The front end passes each batch of events through :meth:`Mover.watch`; at
  the deciding event, for a queue of B's, A stops there: that event and what came after
  it are set aside unhandled, reading is paused and A writes nothing more (the recording
  is *frozen*).
- A hands B the socket's descriptor (``SCM_RIGHTS``) with both records over B's
  hand-over socket, ``<data dir>/workers/handover-<B>.sock`` (:func:`hand_over`).
- B makes a connection handler exactly as for an accepted socket
  (:class:`HandoverServer` calls the service's ``take``), feeds it what A read,
  handles the events before the deciding one and checks that their output begins with
  exactly what A wrote (:func:`replay`: the same configuration makes the same SASL, open
  and begin, or 0-9-1 or 0-10 handshake; the ``amqp10:worker`` of 1.0's open and of
  0-9-1's and 0-10's ``connection.start`` says A's number, as the client was told;
  heartbeats, written on A's timer, are left out of both: 0-9-1's and 0-10's heartbeat
  frames, 1.0's empty frames). It answers A, then
  handles the rest, writes what A had not written (the deciding event's answer) and
  serves the socket from then on.
- A, told yes, closes its copy of the descriptor without a shutdown (the socket stays
  open in B) and forgets the connection (0-10: its sessions are not kept for a resume); told no, or when B cannot be reached, it
  carries on as if nothing had happened: the events it set aside are handled, what was
  read meanwhile is fed, reading resumes (:meth:`Mover._resume`).

A connection is not moved over TLS or a WebSocket (not a plain socket: no
:class:`Recording`), when its deciding event names no queue or a local one, when its
records passed :data:`RECORD_LIMIT`, or when the driver had read past what the engine was
fed (a large read fed a slice a turn: the rest would be in neither record), or once the
``[security]`` back-off held a login's answer (the hold is this worker's). 1.0: nor when
SASL used a mechanism with a server nonce (SCRAM).
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.abc import SocketAttribute, TaskGroup, TaskStatus

from ...io.asyncio_tcp import asyncio_tcp
from ...io.direct import DirectDriver
from ...io.driver import Driver, EngineProtocol
from ..guard import HeldOutput
from .ownership import Ownership

__all__ = [
    "RECORD_LIMIT",
    "Handover",
    "HandoverServer",
    "MovedIn",
    "Mover",
    "Recording",
    "Watched",
    "hand_over",
    "handover_path",
    "replay",
]

log = logging.getLogger("amqp10.broker.workers")

RECORD_LIMIT: Final = 1024 * 1024
"""Bytes recorded either way before a connection is no longer movable. A first attach, or
0-9-1's first ``queue.declare``, comes within a few hundred bytes of the header; with
``publishers_apart`` a 0-9-1 publisher's deciding event is its first publish, recorded
whole: a first message up to about this size still moves (held only until the move is
decided)."""

ANSWER_TIMEOUT: Final = 30.0
"""Seconds A waits for B's answer once B has the descriptor (B answers in milliseconds:
the replay is one call). Past it A cannot tell whether B serves the socket, so it drops
its side (logged); the client reconnects."""

_HEAD: Final = struct.Struct("!IIII")  # shown worker, peer, inbound, written (lengths)
_YES: Final = b"\x01"
_NO: Final = b"\x00"


def handover_path(directory: Path, worker: int) -> Path:
    """Where worker ``worker`` takes connections handed to it."""
    return directory / f"handover-{worker}.sock"


@dataclass(frozen=True)
class Handover:
    """What a worker's front ends need to move a connection: where the other workers take
    them, and who owns what."""

    directory: Path
    ownership: Ownership
    publishers_apart: bool = False
    """``publishers_apart``: a connection that first publishes to a node is served by the
    worker after the node's owner, not the owner."""

    @property
    def worker(self) -> int:
        return self.ownership.me

    def worker_for(self, vhost: str, name: str, *, publishes: bool = False) -> int | None:
        """The worker that should serve a connection whose first use of node ``name`` is
        this, if not this one: the node's owner, or with :attr:`publishers_apart` and
        ``publishes`` the worker after it (so one busy queue's publishes are taken in on
        one worker, its queue and deliveries done on another: each message crosses once)."""
        ownership = self.ownership
        worker = ownership.owner(vhost, name)
        if publishes and self.publishers_apart:
            worker = (worker + 1) % ownership.workers
        return None if worker == ownership.me else worker


class Recording:
    """An engine (the driver's) that records what was read and written while a
    connection is movable, and that can be *frozen*: then it writes nothing, and what is
    read is kept (and recorded) for later instead of reaching the engine."""

    def __init__(self, inner: EngineProtocol[Any]) -> None:
        self.inner = inner
        self.inbound = bytearray()
        self.outbound = bytearray()
        self.recording = True
        self.frozen = False
        self.pending = bytearray()
        """What was read while frozen (fed to the engine if the connection stays)."""

    def stop(self) -> None:
        """No longer movable: pass everything through, keep nothing."""
        self.recording = self.frozen = False
        self.inbound = bytearray()
        self.outbound = bytearray()

    @property
    def full(self) -> bool:
        """Whether it stopped recording for :data:`RECORD_LIMIT` (then it cannot move)."""
        return not self.recording

    def receive_data(self, data: bytes) -> list[Any]:
        if self.recording:
            self.inbound += data
            if self.frozen:
                self.pending += data
                return []
            if len(self.inbound) > RECORD_LIMIT:
                self.stop()
        return self.inner.receive_data(data)

    def data_to_send(self) -> bytes:
        if self.frozen:
            return b""
        data = self.inner.data_to_send()
        if data and self.recording:
            self.outbound += data
            if len(self.outbound) > RECORD_LIMIT:
                self.stop()
        return data

    def tick(self, now: float) -> float | None:
        return None if self.frozen else self.inner.tick(now)

    def poll_events(self) -> list[Any]:
        return [] if self.frozen else self.inner.poll_events()

    @property
    def is_closed(self) -> bool:
        return self.inner.is_closed


def _as_written(output: bytes) -> bytes:
    return output


@dataclass(eq=False)
class MovedIn:
    """A connection handed to this worker, as its front end replays it."""

    peer: str
    shown_worker: int
    """The worker number the client was told (1.0's open, 0-9-1's ``connection.start``:
    the accepting worker's)."""
    inbound: bytes
    """Every byte the accepting worker read from the socket, the protocol header first."""
    written: bytes
    """Every byte it wrote: the replay's output must begin with exactly these."""
    decided: anyio.Event = field(default_factory=anyio.Event)
    accepted: bool = False
    stream: Any = None
    """This worker's stream over the socket (set by the service once made)."""
    returned: bytes = b""
    """Not taken: what this worker's stream had read of the socket meanwhile, for the
    accepting worker to handle (it comes after all that worker read)."""

    def check(self, output: bytes, compared: Callable[[bytes], bytes] = _as_written) -> bytes | None:
        """What is left to write of the replay's ``output`` (then the connection is
        taken: the accepting worker is told so); None: it does not begin with what was
        written (the connection stays where it was). Both are compared as ``compared``
        gives them (the front ends' ``as_compared`` and ``without_empty_frames``:
        without heartbeats, written on each engine's own timer, and 0-9-1's
        ``queue.declare-ok`` without its counts)."""
        written = compared(self.written)
        output = compared(output)
        ok = output.startswith(written)
        self.decide(ok)
        return output[len(written) :] if ok else None

    def replaying(self) -> bool:
        """Whether its replay has not yet reached the deciding event (what it handles is
        what the accepting worker answered: :func:`replay`)."""
        return not self.decided.is_set()

    def decide(self, accepted: bool) -> None:
        """Taken or not, once: not taken, this worker's stream stops reading now and lets
        go of the socket (closing its copy without a shutdown), what it read kept."""
        if self.decided.is_set():
            return
        self.accepted = accepted
        if not accepted and self.stream is not None:
            self.returned = _let_go(self.stream)
        self.decided.set()


def _let_go(stream: Any) -> bytes:
    """Stop ``stream`` reading at once, close its transport (no shutdown: the socket's
    other copy goes on) and return what it had read and not handed on."""
    tcp = asyncio_tcp(stream)
    if tcp is None:  # pragma: no cover - the service makes a plain TCP stream
        return b""
    tcp.transport.pause_reading()
    data = b"".join(tcp.protocol.read_queue)
    tcp.protocol.read_queue.clear()
    tcp.transport.abort()
    return data


def replay(
    moved: MovedIn,
    engine: EngineProtocol[Any],
    handle: Callable[[list[Any]], None],
    decides: Callable[[Any], bool],
    pieces: Callable[[bytes], Iterable[bytes]] = lambda data: (data,),
    compared: Callable[[bytes], bytes] = _as_written,
    *,
    fail: Callable[[str], None],
) -> bytes | None:
    """Replay a moved connection on a fresh ``engine``: feed it ``moved.inbound`` (in
    ``pieces``, each one's events handled before the next is fed: 0-9-1's handshake
    wants the handler's answer to a frame before the next frame), up to the first event
    that ``decides`` (the one the accepting worker stopped at); then, if what the engine
    wrote begins with what that worker wrote (both as ``compared`` gives them:
    :meth:`MovedIn.check`), handle that event and feed the rest. What
    is left to write of the first part (None: it differs, or the replay failed: nothing
    from the deciding event on was handled).

    Taken, the connection is this worker's (the accepting worker is told so and lets go
    of it): if handling the deciding event or the rest then raises, ``fail`` closes it
    with the protocol's internal error (0-10: connection-forced) and the description
    given (logged), rather than serving on a connection whose deciding event had no
    answer."""
    chunks = iter(pieces(moved.inbound))
    held: list[Any] = []
    try:
        for chunk in chunks:
            events = engine.receive_data(chunk)
            first = next((i for i, e in enumerate(events) if decides(e)), None)
            if first is not None:
                handle(events[:first])
                held = events[first:]
                break
            handle(events)
        rest = moved.check(engine.data_to_send(), compared)
    except Exception:  # (then the accepting worker carries on with it)
        log.exception("the replay of a connection from %s failed", moved.peer)
        moved.decide(False)
        return None
    if rest is not None:
        try:
            handle(held)
            tail = b"".join(chunks)
            if tail:
                handle(engine.receive_data(tail))
        except Exception as exc:  # taken: closed with an internal error, not left waiting
            log.exception("the replay of a connection from %s failed after it was taken over: closing it", moved.peer)
            fail(f"the replay of this connection failed after it moved: {type(exc).__name__}: {exc}")
    return rest


Take = Callable[[socket.socket, MovedIn], Awaitable[None]]
"""The service's side: serve ``socket`` as :class:`MovedIn` says; returns once decided."""


class HandoverServer:
    """This worker's hand-over socket: connections other workers move here."""

    def __init__(self, directory: Path, worker: int, take: Take) -> None:
        self.path = handover_path(directory, worker)
        self.take = take

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.path.unlink(missing_ok=True)
        listener = await anyio.create_unix_listener(self.path)
        async with listener, anyio.create_task_group() as tg:
            task_status.started()
            while True:
                stream = await listener.accept()
                tg.start_soon(self._one, stream)

    async def _one(self, stream: Any) -> None:
        async with stream:
            sock: socket.socket | None = None
            try:
                with anyio.fail_after(ANSWER_TIMEOUT):
                    data, fds = await stream.receive_fds(_HEAD.size, 1)
                    if len(fds) != 1:
                        return
                    sock = socket.socket(fileno=fds[0])
                    while len(data) < _HEAD.size:
                        data += await stream.receive(_HEAD.size - len(data))
                    shown, peer_len, in_len, out_len = _HEAD.unpack(data)
                    body = b""
                    total = peer_len + in_len + out_len
                    while len(body) < total:
                        body += await stream.receive(total - len(body))
                peer = body[:peer_len].decode()
                moved = MovedIn(peer, shown, body[peer_len : peer_len + in_len], body[peer_len + in_len :])
                taking, sock = sock, None
                await self.take(taking, moved)
                await stream.send(_YES if moved.accepted else _NO + moved.returned)
            except Exception:  # a broken hand-over: the other worker carries on with it
                log.warning("a connection handed over could not be taken", exc_info=True)
            finally:
                if sock is not None:  # not taken: this copy closed (no shutdown: the socket stays)
                    sock.close()


async def hand_over(directory: Path, worker: int, fd: int, moved: MovedIn) -> bool | None:
    """Hand the socket ``fd`` (as ``moved`` describes it) to worker ``worker``: True if it
    serves it now, False if it does not (or cannot be reached: the connection stays
    here; what it read of the socket meanwhile is in ``moved.returned``), None if that
    cannot be told (no answer in :data:`ANSWER_TIMEOUT`)."""
    peer = moved.peer.encode()
    head = _HEAD.pack(moved.shown_worker, len(peer), len(moved.inbound), len(moved.written))
    try:
        stream = await anyio.connect_unix(handover_path(directory, worker))
    except OSError:
        return False
    async with stream:
        try:
            await stream.send_fds(head, [fd])
            await stream.send(peer + moved.inbound + moved.written)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False  # (the other worker closes what it got of it)
        answer = b""
        try:
            with anyio.fail_after(ANSWER_TIMEOUT):
                while True:  # yes, or no and what it read (up to its end)
                    answer += await stream.receive()
                    if answer == _YES:
                        return True
        except TimeoutError:
            return None
        except anyio.EndOfStream:
            pass
        except (OSError, anyio.BrokenResourceError):
            return False  # it ended before it answered: it wrote nothing to the client
    if answer[:1] != _NO:
        return False  # (nothing: it ended before it answered)
    moved.returned = answer[1:]
    return False


def _unset(events: list[Any]) -> None:
    raise RuntimeError("Watched.handle not set")


class Watched:
    """The driver's event callback of a connection that may move (0-9-1, 0-10): each batch
    goes to :attr:`mover` first while it watches (:meth:`Mover.watch` sets the deciding
    event and what follows aside), then to :attr:`handle`. Both are set once the handler
    exists, after the driver (whose wake the handler is given) is made with this."""

    __slots__ = ("handle", "mover")

    def __init__(self) -> None:
        self.mover: Mover | None = None
        self.handle: Callable[[list[Any]], None] = _unset

    def __call__(self, events: list[Any]) -> None:
        mover = self.mover
        if mover is not None and mover.watching:
            events = mover.watch(events)
        self.handle(events)


class Mover:
    """One movable connection's side of the worker that accepted it.

    The front end wraps its engine in :attr:`recording` (the driver's protocol) and
    passes each batch of events through :meth:`watch`, with ``decides``: whether an
    event is the one the move is decided at (1.0: a link's attach; 0-9-1: a method a
    replay would not reproduce; 0-10: a command), and ``worker_of``: for that event, the
    worker that should serve the connection by the queue it names (:meth:`Handover.worker_for`;
    None: this one, or no queue; then the connection stays); ``moved_away`` runs once that worker serves it. :func:`replay` on the other
    worker splits its events by the same ``decides``."""

    def __init__(
        self,
        handover: Handover,
        peer: str,
        recording: Recording,
        decides: Callable[[Any], bool],
        worker_of: Callable[[Any], int | None],
        handle: Callable[[list[Any]], None],
        moved_away: Callable[[], None] = lambda: None,
        answered_first: Callable[[Any], bool] = lambda e: False,
    ) -> None:
        self.handover = handover
        self.peer = peer
        self.recording = recording
        self.decides = decides
        self.worker_of = worker_of
        self.handle = handle
        self.moved_away = moved_away
        """Called once the other worker serves the connection, before it is let go here
        (0-10: its sessions end here, not kept for a resume)."""
        self.answered_first = answered_first
        """Events before the deciding one whose answer the other worker's replay takes as
        written here (0-9-1's declarations with ``publishers_apart``): the connection stays
        if one comes in the deciding event's batch (its answer is not written yet)."""
        self.driver: Driver[Any] | None = None
        self.task_group: TaskGroup | None = None
        self.watching = True
        self._pause_limit: float | None = None

    def running(self, driver: Driver[Any], task_group: TaskGroup) -> None:
        """The connection's driver and a task group to hand over from."""
        self.driver = driver
        self.task_group = task_group

    def watch(self, events: list[Any]) -> list[Any]:
        """The events to handle now: all of them, or those before the deciding event when
        it names a queue another worker should serve and the hand-over has started (the rest are set
        aside for :meth:`_resume`)."""
        decides = self.decides
        for i, e in enumerate(events):
            if decides(e):
                target = None if self.recording.full else self.worker_of(e)
                driver = self.driver
                answered_first = self.answered_first
                if (
                    target is None
                    or driver is None
                    or self.task_group is None
                    or not self._quiet()
                    or any(answered_first(before) for before in events[:i])
                ):
                    self.stop()
                    return events
                self.watching = False
                self.recording.frozen = True
                # no peek at the socket while paused (0-9-1's driver's): B reads it from now on
                self._pause_limit, driver.pause_limit = driver.pause_limit, None
                driver.pause_reading()
                self.task_group.start_soon(self._move, target, events[i:])
                return events[:i]
        return events

    def stop(self) -> None:
        """Not moved: the connection is served here to its end, unrecorded."""
        self.watching = False
        self.recording.stop()
        if self.driver is not None:
            self.driver.protocol = self.recording.inner

    def _quiet(self) -> bool:
        """Whether all that was written has left the process (the transport buffers none)
        and all that was read reached the engine (the driver holds no rest of a read to
        feed later: it would be in neither record), and no login's answer was ever held
        ([security] back-off: the hold is this worker's; a replay elsewhere would answer a
        pipelined login at once and tell a right password by its speed)."""
        driver = self.driver
        assert driver is not None
        inner = self.recording.inner
        if isinstance(inner, HeldOutput) and inner.held_for > 0:
            return False
        tcp = asyncio_tcp(driver.stream)
        fed = not isinstance(driver, DirectDriver) or not driver.reading_ahead
        return fed and tcp is not None and tcp.transport.get_write_buffer_size() == 0

    def _socket(self) -> Any:
        assert self.driver is not None
        return self.driver.stream.extra(SocketAttribute.raw_socket)

    async def _move(self, target: int, held: list[Any]) -> None:
        rec = self.recording
        moved = MovedIn(self.peer, self.handover.worker, bytes(rec.inbound), bytes(rec.outbound))
        taken = await hand_over(self.handover.directory, target, self._socket().fileno(), moved)
        driver = self.driver
        assert driver is not None
        if taken:
            log.debug("connection from %s moved to worker %d", self.peer, target)
            self.moved_away()
            driver.abort()  # (the stream's close aborts the transport: no shutdown, B has the socket)
            return
        if taken is None:
            log.warning("connection from %s: worker %d did not answer its hand-over: dropped", self.peer, target)
            driver.abort()
            return
        log.debug("connection from %s not moved to worker %d: served here", self.peer, target)
        self._resume(held, moved.returned)

    def _resume(self, held: list[Any], returned: bytes) -> None:
        """Carry on here: the events set aside, then what was read meanwhile (here, then by
        the other worker)."""
        rec = self.recording
        pending = bytes(rec.pending) + returned
        self.stop()
        driver = self.driver
        assert driver is not None
        driver.pause_limit = self._pause_limit
        # reading resumes first (nothing is read before this returns): a handler that pauses
        # it for what it handles now (an answer that comes later, a memory alarm's block)
        # keeps its pause
        driver.resume_reading()
        try:
            self.handle(held)
            if pending:
                self.handle(rec.inner.receive_data(pending))
        except Exception:  # as the driver's own dispatch: this connection stops, not the worker
            log.exception("error while handling events from %s", self.peer)
            driver.abort()
            return
        driver.flush_soon()
