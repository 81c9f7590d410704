"""DirectDriver over real sockets: what anyio had read first, batching, pauses, back-pressure, EOF."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream

from amqp10.io import Driver, Listener, Signal, connect_stream
from amqp10.io.asyncio_tcp import nothing_ready
from amqp10.io.direct import READ_SLICE, DirectDriver
from tests.client.helpers import WAIT, no_leftover_tasks, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"  # DirectDriver is for asyncio's transports; on trio the broker uses Driver


class Echo:
    """An engine: each line it receives is answered upper-cased; ``quit`` closes it.

    ``copies``: answer each line that many times (each answer its own ``flush_soon``).
    ``deadline``: what ``tick`` returns until it has passed (then it counts as fired).
    """

    def __init__(self, copies: int = 1) -> None:
        self.copies = copies
        self.pending = b""
        self.out = bytearray()
        self.lines: list[bytes] = []
        self.closed = False
        self.eof = False
        self.ticks = 0
        self.fired = 0
        self.deadline: float | None = None
        self.flush: Callable[[], None] = lambda: None

    def receive_data(self, data: bytes) -> list[bytes]:
        if not data:
            self.eof = self.closed = True
            return [b""]
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        return lines

    def answer(self, lines: list[bytes]) -> None:
        for line in lines:
            self.lines.append(line)
            if line == b"quit":
                self.closed = True
                self.out += b"BYE\n"
                self.flush()
                continue
            for _ in range(self.copies):
                self.out += line.upper() + b"\n"
                self.flush()

    def data_to_send(self) -> bytes:
        data, self.out = bytes(self.out), bytearray()
        return data

    def tick(self, now: float) -> float | None:
        self.ticks += 1
        if self.deadline is not None and now >= self.deadline:
            self.fired += 1  # a timer that fires once (as a heartbeat's, re-armed later)
            self.deadline = None
        return self.deadline

    def poll_events(self) -> list[bytes]:
        return []

    @property
    def is_closed(self) -> bool:
        return self.closed and not self.out


@asynccontextmanager
async def served(
    engine: Echo, *, head: int = 0, pause_limit: float | None = None, driver: type[Driver[bytes]] = DirectDriver
) -> AsyncIterator[tuple[socket.socket, list[Driver[bytes]], Signal]]:
    """A listener whose first connection is served by a DirectDriver (or ``driver``) over
    ``engine`` (after ``head`` bytes were read with ``stream.receive``, as the broker reads
    the protocol header); yields a blocking client socket, the driver (once made) and a
    signal fired on every batch of events."""
    drivers: list[Driver[bytes]] = []
    changed = Signal()

    def on_events(events: list[bytes]) -> None:
        engine.answer([e for e in events if e])
        changed.fire()

    async def handle(stream: ByteStream, peer: str) -> None:
        got = b""
        while len(got) < head:
            got += await stream.receive(head - len(got))
        assert DirectDriver.usable(stream)
        d = driver(stream, engine, on_events, peer=peer, pause_limit=pause_limit)
        engine.flush = d.flush_soon
        engine.out += b"HEAD " + got + b"\n" if head else b""
        drivers.append(d)
        changed.fire()
        await d.run()
        changed.fire()

    async with no_leftover_tasks():
        listener = await Listener.bind("127.0.0.1", 0)
        async with anyio.create_task_group() as tg:
            await tg.start(listener.serve, handle, tg)
            client = socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT)
            try:
                yield client, drivers, changed
            finally:
                client.close()
                await listener.aclose()
                tg.cancel_scope.cancel()


@asynccontextmanager
async def answered(engine: Echo) -> AsyncIterator[tuple[socket.socket, Driver[bytes]]]:
    """:func:`served` once a first line is answered: the client socket and the driver."""
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n")
        yield client, drivers[0]


async def recv_until(client: socket.socket, end: bytes) -> bytes:
    data = b""
    with anyio.fail_after(WAIT):
        while not data.endswith(end):
            chunk = await anyio.to_thread.run_sync(client.recv, 1 << 20)
            assert chunk, f"connection ended after {data[-200:]!r}"
            data += chunk
    return data


async def test_what_anyio_read_before_the_driver_is_fed_first() -> None:
    engine = Echo()
    async with served(engine, head=4) as (client, drivers, changed):
        client.sendall(b"HDR!one\ntwo\n")  # one segment: anyio holds "one\ntwo\n" after the head
        assert await recv_until(client, b"TWO\n") == b"HEAD HDR!\nONE\nTWO\n"
        client.sendall(b"three\nquit\n")
        assert (await recv_until(client, b"BYE\n")).endswith(b"THREE\nBYE\n")
        await wait_for(changed, lambda: drivers[0].done)
        assert drivers[0].error is None
        assert engine.lines == [b"one", b"two", b"three", b"quit"]


async def test_a_burst_of_answers_is_one_write() -> None:
    engine = Echo(copies=200)
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"x\n")
        data = await recv_until(client, b"X\n" * 200)
        assert data == b"X\n" * 200
        assert drivers[0].writes == 1  # 200 flush_soon calls, one transport.write


async def test_an_answer_to_a_read_is_written_in_the_same_callback() -> None:
    # each answer was a call_soon'd flush: one more event-loop turn (and epoll_wait) per
    # read, which a peer waiting for every answer (a consumer with a small credit window)
    # paid on each round trip
    engine = Echo(copies=3)  # three flush_soon calls from the owner per line
    loop = asyncio.get_running_loop()
    scheduled: list[Any] = []
    real_call_soon = loop.call_soon

    def spy(callback: Any, *args: Any, **kwargs: Any) -> Any:
        scheduled.append(callback)
        return real_call_soon(callback, *args, **kwargs)

    async with served(engine) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n" * 3)
        d = drivers[0]
        writes = d.writes
        loop.call_soon = spy  # type: ignore[method-assign]
        try:
            for i in range(20):
                client.sendall(b"x%d\n" % i)
                await recv_until(client, (b"X%d\n" % i) * 3)
        finally:
            del loop.call_soon
        assert d.writes - writes == 20  # one write per read, the answers together
        assert not [c for c in scheduled if getattr(c, "__self__", None) is d]


class Counted(Echo):
    """An :class:`Echo` (three answers to a line, each with its own ``flush_soon``) that
    counts its ``data_to_send`` calls, and those made while its owner is still handling
    events (a flush from inside the handler)."""

    def __init__(self) -> None:
        super().__init__(copies=3)
        self.handling = False
        self.takes = 0
        self.reentrant = 0

    def answer(self, lines: list[bytes]) -> None:
        self.handling = True
        try:
            super().answer(lines)
        finally:
            self.handling = False

    def data_to_send(self) -> bytes:
        self.takes += 1
        self.reentrant += self.handling
        return super().data_to_send()


@pytest.mark.parametrize("driver", [DirectDriver, Driver])
async def test_flush_soon_inside_the_handler_flushes_once_after_it(driver: type[Driver[bytes]]) -> None:
    # the owner calls flush_soon after every change, also while the driver is inside its
    # on_events (a front end's wake): that call flushes nothing then and asks for nothing
    # more; the driver takes the engine's output once, right after the handler returns
    engine = Counted()
    async with served(engine, driver=driver) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n" * 3)
        await anyio.wait_all_tasks_blocked()
        d = drivers[0]
        takes, writes = engine.takes, d.writes
        for i in range(10):
            client.sendall(b"x%d\n" % i)
            assert await recv_until(client, (b"X%d\n" % i) * 3) == (b"X%d\n" % i) * 3
            await anyio.wait_all_tasks_blocked()
        assert engine.reentrant == 0
        assert (engine.takes - takes, d.writes - writes) == (10, 10)  # one take, one write per read


class Staged(Echo):
    """An :class:`Echo` that answers a line with ``ATTACH``, and asks its driver to answer
    ``TRANSFER`` once that is written (as the broker starts a new consumer's deliveries);
    it keeps each batch of output the driver takes (a write each)."""

    def __init__(self) -> None:
        super().__init__()
        self.after_write: Callable[[Callable[[], None]], None] = lambda callback: None
        self.taken: list[bytes] = []

    def answer(self, lines: list[bytes]) -> None:
        for _ in lines:
            self.out += b"ATTACH\n"
            self.flush()
            self.after_write(self.transfer)

    def transfer(self) -> None:
        self.out += b"TRANSFER\n"
        self.flush()

    def data_to_send(self) -> bytes:
        data = super().data_to_send()
        if data:
            self.taken.append(data)
        return data


@pytest.mark.parametrize("driver", [DirectDriver, Driver])
async def test_what_an_after_write_callback_queues_is_a_write_of_its_own(driver: type[Driver[bytes]]) -> None:
    # the callback runs once the answer queued before it is written: what it queues is
    # not taken with that answer (a peer reads the attach before the link's transfers)
    engine = Staged()
    async with served(engine, driver=driver) as (client, drivers, changed):
        await wait_for(changed, lambda: bool(drivers))
        engine.after_write = drivers[0].after_write
        client.sendall(b"a\n")
        assert await recv_until(client, b"TRANSFER\n") == b"ATTACH\nTRANSFER\n"
        assert engine.taken == [b"ATTACH\n", b"TRANSFER\n"]


async def _until_nothing_ready(loop: asyncio.AbstractEventLoop) -> None:
    """Yield until this task's step is the last the loop has ready in its turn."""
    for _ in range(1000):
        if nothing_ready(loop):
            return
        await anyio.sleep(0)
    pytest.fail("the loop always had other callbacks ready")


def _queue(engine: Echo, d: Driver[bytes], line: bytes) -> Callable[[], None]:
    def work() -> None:
        engine.out += line
        d.flush_soon()  # as the client's wake: inside a batch it only waits for the batch

    return work


async def test_a_batch_is_written_at_once_when_nothing_else_would_share_it() -> None:
    # a send that waits for its outcome: written in the caller's turn, no callback
    # scheduled (one loop turn, and one epoll_wait, less per round trip)
    engine = Echo()
    loop = asyncio.get_running_loop()
    async with answered(engine) as (client, d):
        for i in range(5):
            writes = d.writes
            await _until_nothing_ready(loop)
            d.batch(_queue(engine, d, b"first %d\n" % i))
            assert d.writes == writes + 1  # written before this task yields
            assert nothing_ready(loop)  # and nothing scheduled for it
            assert await recv_until(client, b"first %d\n" % i) == b"first %d\n" % i


async def test_batches_made_together_share_one_write() -> None:
    # while other callbacks are ready in this turn (other tasks, which may send too), a
    # batch's write is scheduled as flush_soon's, and the batches after it share it
    engine = Echo()
    loop = asyncio.get_running_loop()
    async with answered(engine) as (client, d):
        await _until_nothing_ready(loop)
        writes = d.writes
        loop.call_soon(lambda: None)  # something else to run in this turn
        d.batch(_queue(engine, d, b"one\n"))
        d.batch(_queue(engine, d, b"two\n"))
        assert d.writes == writes  # not yet
        assert await recv_until(client, b"two\n") == b"one\ntwo\n"
        assert d.writes == writes + 1
        # one batch of many sends is one write, at once
        await _until_nothing_ready(loop)

        def many() -> None:
            for i in range(10):
                _queue(engine, d, b"m%d\n" % i)()

        d.batch(many)
        assert d.writes == writes + 2
        assert await recv_until(client, b"m9\n") == b"".join(b"m%d\n" % i for i in range(10))


async def test_a_batch_inside_the_handler_is_written_after_it() -> None:
    # (a send made from the owner's event handling: the driver writes right after it)
    engine = Counted()
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n" * 3)
        d = drivers[0]
        answer = engine.answer
        engine.answer = lambda lines: d.batch(lambda: answer(lines))  # type: ignore[method-assign]
        takes, writes = engine.takes, d.writes
        client.sendall(b"b\n")
        assert await recv_until(client, b"B\n" * 3) == b"B\n" * 3
        await anyio.wait_all_tasks_blocked()
        assert engine.reentrant == 0
        assert (engine.takes - takes, d.writes - writes) == (1, 1)


async def test_a_batch_on_the_plain_driver_is_flush_soon() -> None:
    engine = Echo()
    async with served(engine, driver=Driver) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n")
        d = drivers[0]
        assert d.batch(lambda: 42) == 42
        d.batch(_queue(engine, d, b"plain\n"))
        assert await recv_until(client, b"plain\n") == b"plain\n"


async def test_paused_reading_resumes_and_peeks_for_heartbeats() -> None:
    engine = Echo()
    async with served(engine, pause_limit=0.3) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n")
        d = drivers[0]
        d.pause_reading()
        assert d.reading_paused
        client.sendall(b"b\n")
        await anyio.sleep(0.1)
        assert engine.lines == [b"a"]  # held while paused...
        await recv_until(client, b"B\n")  # ... but one chunk is taken after pause_limit
        client.sendall(b"c\n")
        await anyio.sleep(0.1)
        assert engine.lines == [b"a", b"b"]
        d.resume_reading()
        await recv_until(client, b"C\n")
        assert engine.lines == [b"a", b"b", b"c"]


async def test_a_slow_reader_gets_everything_in_order() -> None:
    engine = Echo(copies=1000)  # 10 MB in answer to one line: far over the buffers
    line = b"y" * 10_000
    async with served(engine) as (client, drivers, changed):
        client.sendall(line + b"\n")
        with anyio.fail_after(WAIT):
            while not (drivers and isinstance(drivers[0], DirectDriver) and drivers[0]._write_paused):  # the socket is full
                await anyio.sleep(0.01)
        client.sendall(b"z\n")  # answered while the transport holds megabytes
        expected = (line.upper() + b"\n") * 1000 + b"Z\n" * 1000
        data = await recv_until(client, b"Y\n" + b"Z\n" * 1000)
        assert len(data) == len(expected) and data == expected


class Sized(Echo):
    """An :class:`Echo` that records the size of every piece it is given, and the lines
    handled so far each time a callback it scheduled at its first answer runs."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.seen_at_turn: list[int] = []

    def receive_data(self, data: bytes) -> list[bytes]:
        self.sizes.append(len(data))
        return super().receive_data(data)

    def answer(self, lines: list[bytes]) -> None:
        if not self.seen_at_turn:
            asyncio.get_running_loop().call_soon(lambda: self.seen_at_turn.append(len(self.lines)))
            self.seen_at_turn.append(-1)
        super().answer(lines)


async def test_a_big_read_is_fed_a_slice_a_turn_in_order() -> None:
    engine = Sized()
    lines = [b"line %06d" % i for i in range(20_000)]  # 220 KB in one send: reads far over a slice
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"\n".join(lines) + b"\n")
        data = await recv_until(client, lines[-1].upper() + b"\n")
        assert data == b"".join(line.upper() + b"\n" for line in lines)
        assert engine.lines == lines
        assert max(engine.sizes) <= READ_SLICE and sum(engine.sizes) == len(data)
        assert len(engine.sizes) >= len(data) // READ_SLICE
        # the loop turned before the whole burst was handled: a callback scheduled at the
        # first answer ran with lines still to come
        assert 0 < engine.seen_at_turn[1] < len(lines)


async def test_what_was_read_is_handled_before_the_end_of_the_stream() -> None:
    engine = Sized()
    lines = [b"line %06d" % i for i in range(20_000)]
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"\n".join(lines) + b"\n")
        client.shutdown(socket.SHUT_WR)
        await wait_for(changed, lambda: bool(drivers) and drivers[0].done)
        assert engine.lines == lines and engine.eof and drivers[0].error is None


async def test_the_peer_closing_ends_the_driver_cleanly() -> None:
    engine = Echo()
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n")
        client.shutdown(socket.SHUT_WR)
        await wait_for(changed, lambda: bool(drivers) and drivers[0].done)
        assert engine.eof and drivers[0].error is None


async def test_the_writer_still_runs_the_timers() -> None:
    engine = Echo()
    async with served(engine) as (client, drivers, changed):
        client.sendall(b"a\n")
        await recv_until(client, b"A\n")
        engine.deadline = anyio.current_time() + 0.05  # sooner than the writer's (none)
        client.sendall(b"b\n")  # a direct flush sees the earlier deadline: the writer re-arms
        await recv_until(client, b"B\n")
        with anyio.fail_after(WAIT):
            while not engine.fired:
                await anyio.sleep(0.02)
        assert engine.fired == 1 and engine.deadline is None


async def test_the_timers_fire_on_time_while_batches_write() -> None:
    # a batch's immediate write leaves the engine's timers to the writer's timer and the
    # reads' flushes (what a batch queues brings no timer earlier): one armed before a run
    # of batches still fires, once, while they write
    engine = Echo()
    loop = asyncio.get_running_loop()
    async with answered(engine) as (client, d):
        engine.deadline = anyio.current_time() + 0.2
        client.sendall(b"b\n")  # a read's flush sees the deadline: the writer arms it
        await recv_until(client, b"B\n")
        i = 0
        with anyio.fail_after(WAIT):
            while not engine.fired:
                await _until_nothing_ready(loop)
                d.batch(_queue(engine, d, b"batch %d\n" % i))
                await recv_until(client, b"batch %d\n" % i)
                i += 1
        assert engine.fired == 1 and engine.deadline is None


def test_only_plain_asyncio_tcp_streams_qualify() -> None:
    class Other(ByteStream):
        async def receive(self, max_bytes: int = 65536) -> bytes:
            return b""

        async def send(self, item: bytes) -> None:
            pass

        async def send_eof(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

    assert not DirectDriver.usable(Other())
    with pytest.raises(ValueError, match="plain TCP stream"):
        DirectDriver(Other(), Echo(), lambda events: None)
    assert issubclass(DirectDriver, Driver)


async def test_connect_stream_gives_a_usable_stream() -> None:
    listener = await Listener.bind("127.0.0.1", 0)
    async with anyio.create_task_group() as tg:

        async def handle(stream: ByteStream, peer: str) -> None:
            await stream.aclose()

        await tg.start(listener.serve, handle, tg)
        stream = await connect_stream("127.0.0.1", listener.port, timeout=WAIT)
        assert DirectDriver.usable(stream)
        await stream.aclose()
        await listener.aclose()
        tg.cancel_scope.cancel()
