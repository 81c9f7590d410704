"""Who runs the blocking facade's event loop: the calling thread during a call, the
keeper thread between calls, one thread at a time (amqp10/client/syncloop.py)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.abc
import pytest

import amqp10.sync
from amqp10 import errors
from amqp10.client import SettleMode
from amqp10.io.asyncio_tcp import Poller
from amqp10.message import Message
from amqp10.types import Accepted, Rejected
from tests.broker.conftest import RunningBroker, broker_with

from .helpers import WAIT


def until(predicate: Callable[[], bool], what: str) -> None:
    """A bounded poll (no timing asserted)."""
    for _ in range(int(WAIT / 0.005)):
        if predicate():
            return
        time.sleep(0.005)
    raise AssertionError(f"never: {what}")


def runs_the_loop(conn: amqp10.sync.Connection, thread: threading.Thread) -> Callable[[], bool]:
    return lambda: conn._loop._driver == thread.ident


class Background(threading.Thread):
    """``fn()`` in a thread; :meth:`result` joins it and returns or raises what it did."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self._outcome: tuple[bool, Any] = (False, None)
        self.start()

    def run(self) -> None:
        try:
            self._outcome = (True, self._fn())
        except BaseException as exc:  # handed to the test thread
            self._outcome = (False, exc)

    def result(self) -> Any:
        self.join(WAIT)
        assert not self.is_alive(), "the thread is still blocked"
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def drain(conn: amqp10.sync.Connection, address: str, n: int) -> list[Any]:
    receiver = conn.open_receiver(address, credit=100)
    got: list[Any] = []
    while len(got) < n:
        d = receiver.receive(timeout=WAIT)
        d.accept()
        got.append(d.message.body)
    receiver.close()
    return got


# -- between calls ------------------------------------------------------------------------------
def test_an_idle_connection_stays_alive_past_both_idle_timeouts_while_the_caller_sleeps(
    tmp_path: Path,
) -> None:
    # the broker hangs up after 0.5 s without a frame from us, and we after 0.5 s without
    # one from it: only heartbeats, sent and read by the keeper thread, keep it open
    with (
        broker_with(tmp_path, limits={"idle_timeout": 0.5}) as b,
        amqp10.sync.connect(f"amqp://{b.url}", idle_timeout=0.5, timeout=WAIT) as conn,
    ):
        sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
        read_before = conn.async_connection.driver.reads
        time.sleep(2.0)  # four idle timeouts, no call
        assert conn.is_open
        assert conn.async_connection.driver.reads > read_before  # the broker's heartbeats
        assert isinstance(sender.send(Message(body=1)), Accepted)
        assert drain(conn, "q", 1) == [1]


def test_what_is_queued_without_waiting_goes_out_between_calls(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    tracker = sender.submit(Message(body=1))
    until(lambda: tracker.done, "the keeper sent it")  # no call in this thread meanwhile
    assert isinstance(tracker.result(), Accepted)


def test_a_call_after_an_idle_gap_takes_the_loop_back_from_the_keeper(
    conn: amqp10.sync.Connection,
) -> None:
    keeper = conn._loop._keeper
    until(runs_the_loop(conn, keeper), "the keeper took the loop")
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert [sender.send(Message(body=i)) for i in range(3)] == [Accepted()] * 3
    assert drain(conn, "q", 3) == [0, 1, 2]


def test_blocking_calls_from_inside_a_running_event_loop_work_and_close(broker: RunningBroker) -> None:
    """A Jupyter cell, a Playwright script, an async program calling a blocking library:
    that thread runs an event loop of its own and cannot run the connection's, so the
    keeper runs it for the call (and the close winds it up in a thread of its own)."""
    import asyncio

    async def inside() -> list[Any]:
        with amqp10.sync.connect(f"amqp://{broker.url}", timeout=WAIT) as c:
            sender = c.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
            outcomes = [sender.send(Message(body=i)) for i in range(3)]
            assert drain(c, "q", 3) == [0, 1, 2]
            assert c._loop._driver != threading.get_ident()
        return outcomes

    assert asyncio.run(inside()) == [Accepted()] * 3


# -- many threads, one loop ---------------------------------------------------------------------
def test_threads_sending_on_one_connection_each_get_their_outcomes_in_order(
    conn: amqp10.sync.Connection,
) -> None:
    per_thread = 150
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)

    def produce(k: int) -> list[Any]:
        return [sender.send(Message(body=[k, i])) for i in range(per_thread)]

    threads = [Background(lambda k=k: produce(k)) for k in range(3)]  # type: ignore[misc]
    for t in threads:
        assert t.result() == [Accepted()] * per_thread
    got = drain(conn, "q", 3 * per_thread)
    for k in range(3):
        assert [i for j, i in got if j == k] == list(range(per_thread))


def test_a_call_while_another_thread_runs_the_loop_is_handed_to_it(
    conn: amqp10.sync.Connection,
) -> None:
    receiver = conn.open_receiver("q", credit=10)
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    waiting = Background(lambda: receiver.receive(timeout=WAIT))
    until(runs_the_loop(conn, waiting), "the receiving thread runs the loop")
    assert sender.send(Message(body="hi")) == Accepted()  # done by the receiving thread's run
    delivery = waiting.result()
    assert delivery.message.body == "hi"
    delivery.accept()
    receiver.flush()


def test_close_from_another_thread_ends_a_blocked_receive(conn: amqp10.sync.Connection) -> None:
    receiver = conn.open_receiver("q", credit=10)
    waiting = Background(lambda: receiver.receive(timeout=WAIT))
    until(runs_the_loop(conn, waiting), "the receiving thread runs the loop")
    conn.close()
    with pytest.raises(errors.AMQPError):
        waiting.result()
    with pytest.raises(errors.ConnectionClosed):
        conn.open_sender("q")
    assert not conn._loop._keeper.is_alive()


# -- errors -------------------------------------------------------------------------------------
def test_a_rejected_send_and_a_send_on_a_closed_link_behave_as_before(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("cap.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert [sender.send(Message(body=i)) for i in range(3)] == [Accepted()] * 3
    assert isinstance(sender.send(Message(body=3)), Rejected)  # the queue holds three
    with pytest.raises(errors.DeliveryError, match="rejected"):
        sender.send(Message(body=4), wait=False)
        sender.flush()
    sender.close()
    with pytest.raises(errors.AMQPError):
        sender.send(Message(body=4))


class Relay:
    """A TCP relay to the broker whose connection can be cut (both sockets closed)."""

    def __init__(self, port: int) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._upstream = port
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self._upstream))
        self._sockets += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._listener.close()


def test_losing_the_connection_during_a_blocking_send_raises_a_connection_error(
    broker: RunningBroker,
) -> None:
    relay = Relay(broker.port)
    try:
        with amqp10.sync.connect(f"amqp://127.0.0.1:{relay.port}", timeout=WAIT) as conn:
            sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
            assert sender.send(Message(body=1)) == Accepted()  # the queue is full now
            blocked = Background(lambda: sender.send(Message(body=2)))  # no credit comes
            until(lambda: sender.queued == 1, "the send waits for credit")
            until(runs_the_loop(conn, blocked), "the sending thread runs the loop")
            relay.cut()
            with pytest.raises(errors.ConnectionError, match="connection"):
                blocked.result()
            with pytest.raises(errors.ConnectionError):
                sender.send(Message(body=3))
    finally:
        relay.cut()


needs_pthread_kill = pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
"""The Ctrl-C tests: ``ctrl_c_once`` sends it to the main thread with ``signal.pthread_kill``."""


@contextlib.contextmanager
def ctrl_c_once(ready: Callable[[], bool], what: str) -> Iterator[None]:
    """Within the block (run by the main thread), Ctrl-C once ``ready()`` (``what``),
    sent from another thread; none once the block is over (it would hit pytest)."""
    main = threading.current_thread()
    assert main is threading.main_thread() and main.ident is not None
    finished = threading.Event()

    def interrupt() -> None:
        until(lambda: finished.is_set() or ready(), what)
        if not finished.is_set():
            signal.pthread_kill(main.ident, signal.SIGINT)

    ctrl_c = Background(interrupt)
    try:
        yield
    finally:
        finished.set()
    ctrl_c.result()


@needs_pthread_kill
def test_ctrl_c_during_a_blocking_call_is_raised_in_the_caller_and_the_connection_lives_on(
    conn: amqp10.sync.Connection,
) -> None:
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        receiver = conn.open_receiver("q", credit=10)
        loop_is_main = runs_the_loop(conn, threading.current_thread())
        with ctrl_c_once(loop_is_main, "the main thread runs the loop"), pytest.raises(KeyboardInterrupt):
            receiver.receive(timeout=12 * WAIT)  # (the interrupter may be slow to run on a loaded machine)
        # the trap stays in place between calls (no system call per call), and outside a
        # call Ctrl-C is raised where the program is, as Python's own handler does
        trap = signal.getsignal(signal.SIGINT)
        assert callable(trap)
        with pytest.raises(KeyboardInterrupt):
            trap(signal.SIGINT, None)
        # raised at the end of a turn of the loop, not inside the connection's work
        assert conn.is_open
        sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
        assert sender.send(Message(body="after")) == Accepted()
        d = receiver.receive(timeout=WAIT)
        assert d.message.body == "after"
        d.accept()
        receiver.flush()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_handler_is_put_back_when_the_connection_closes(broker: RunningBroker) -> None:
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with amqp10.sync.connect(f"amqp://127.0.0.1:{broker.port}", timeout=WAIT) as conn:
            sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
            assert sender.send(Message(body=1)) == Accepted()
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # trapped
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # a program's own handler is left alone
        signal.signal(signal.SIGINT, lambda *_: None)
        handler = signal.getsignal(signal.SIGINT)
        with amqp10.sync.connect(f"amqp://127.0.0.1:{broker.port}", timeout=WAIT) as conn:
            sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
            assert sender.send(Message(body=2)) == Accepted()
            assert signal.getsignal(signal.SIGINT) is handler
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


# -- the answer read in the caller's thread (Driver.read_here) ------------------------------------
class LoopTurns:
    """Counts the runs of the connection's event loop (``run_forever``) from now on."""

    def __init__(self, conn: amqp10.sync.Connection) -> None:
        self.runs = 0
        aloop = conn._loop._aloop
        real = aloop.run_forever

        def counted() -> None:
            self.runs += 1
            real()

        aloop.run_forever = counted  # type: ignore[method-assign]


def test_a_waiting_send_reads_its_outcome_in_the_callers_thread_without_running_the_loop(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(sender.send(Message(body=-1)), Accepted)  # (the keeper's loop taken back)
    driver = conn.async_connection.driver
    before = driver.reads_here  # type: ignore[attr-defined]
    turns = LoopTurns(conn)
    outcomes = [sender.send(Message(body=i)) for i in range(50)]
    assert all(isinstance(o, Accepted) for o in outcomes)
    assert driver.reads_here - before >= 50  # type: ignore[attr-defined]
    assert turns.runs <= 5  # (a credit top-up or the keeper's grace may take a turn)
    assert drain(conn, "q", 51) == [-1, *range(50)]


@contextlib.contextmanager
def socket_waits() -> Iterator[list[float]]:
    """The limits of the waits on a connection's socket (``Poller.wait``) within the block."""
    real = Poller.wait
    limits: list[float] = []

    def wait(self: Poller, limit: float) -> bool:
        limits.append(limit)
        return real(self, limit)

    Poller.wait = wait  # type: ignore[method-assign]
    try:
        yield limits
    finally:
        Poller.wait = real  # type: ignore[method-assign]


def _holds_the_first_message(
    release: threading.Event, accepted: threading.Event
) -> Callable[[amqp10.sync.Connection], None]:
    """A peer that takes the first message and accepts it only once ``release`` is set
    (or after ``WAIT``), then sets ``accepted``."""

    def handler(conn: amqp10.sync.Connection) -> None:
        for link in conn.incoming_links():
            assert isinstance(link, amqp10.sync.Receiver)
            d = link.receive(timeout=WAIT)
            release.wait(WAIT)
            d.accept()
            accepted.set()
            with contextlib.suppress(errors.AMQPError):
                link.receive(timeout=WAIT)  # (until the connection closes)
            return

    return handler


@contextlib.contextmanager
def held_send(
    accepted: threading.Event | None = None, **serve: Any
) -> Iterator[tuple[amqp10.sync.Connection, amqp10.sync.Sender, threading.Event]]:
    """A connection to a peer (``serve``: its options) that holds the first message it
    gets until the event is set (then sets ``accepted``), and a sender to it."""
    release = threading.Event()
    handler = _holds_the_first_message(release, accepted or threading.Event())
    with (
        amqp10.sync.serve("127.0.0.1", 0, handler, timeout=WAIT, **serve) as peer,
        amqp10.sync.connect(peer.url, timeout=WAIT) as conn,
    ):
        try:
            yield conn, conn.open_sender("held", settle_mode=SettleMode.AT_LEAST_ONCE), release
        finally:
            release.set()


def test_a_send_waiting_in_the_callers_thread_gives_the_loop_to_another_threads_work() -> None:
    # the main thread waits for its outcome on the socket, not in the loop; what another
    # thread hands to the loop meanwhile wakes that wait and runs at once
    with held_send() as (conn, sender, release):
        ran = threading.Event()
        prompt: list[bool] = []

        def other_thread() -> None:
            time.sleep(0.2)  # the send below waits by then
            conn._loop.soon(ran.set)
            prompt.append(ran.wait(WAIT / 2))
            release.set()

        t = threading.Thread(target=other_thread)
        t.start()
        with socket_waits() as waits:
            assert isinstance(sender.send(Message(body="held")), Accepted)
        t.join(WAIT)
        assert prompt == [True]  # run while the send still waited, not after
        assert waits  # (the send did wait on the socket)


@needs_pthread_kill
def test_ctrl_c_while_a_send_waits_in_the_callers_thread_is_raised_there() -> None:
    # Ctrl-C interrupts the poll on the socket: the trap wakes the loop, the wait gives
    # way to it, and the KeyboardInterrupt is raised in the caller after the loop's turn
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    accepted = threading.Event()
    try:
        with held_send(accepted) as (conn, sender, release), socket_waits() as waits:
            with ctrl_c_once(lambda: bool(waits), "the send waits on the socket"):
                with pytest.raises(KeyboardInterrupt):
                    sender.send(Message(body="held"), timeout=12 * WAIT)
                # raised while the peer still held the message: the poll gave way at once
                assert not accepted.is_set()
            assert waits
            assert conn.is_open
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_send_waiting_in_the_callers_thread_still_sends_the_heartbeats() -> None:
    # the peer hangs up after 0.5 s without a frame from us and sends us none (we ask for
    # no heartbeats): ours are a timer of the loop, which the wait on the socket gives way to
    with held_send(idle_timeout=0.5) as (conn, sender, release):
        timer = threading.Timer(2.0, release.set)  # four of the peer's idle timeouts
        timer.start()
        try:
            with socket_waits() as waits:
                assert isinstance(sender.send(Message(body="held")), Accepted)
            assert conn.is_open
            assert waits  # (the send did wait on the socket)
        finally:
            timer.cancel()


def test_a_send_waiting_in_the_callers_thread_sees_timers_the_loop_added_after_pruning_its_list(
    conn: amqp10.sync.Connection,
) -> None:
    # asyncio replaces its list of timers when over half of 100+ are cancelled (as each
    # blocking receive's cancelled deadline adds up): the wait reads the list it has now
    aloop = conn._loop._aloop
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(sender.send(Message(body=-2)), Accepted)  # (waited on the socket once)
    before = aloop._scheduled  # type: ignore[attr-defined]

    async def cancel_most_timers() -> None:
        handles = [aloop.call_later(0.05, lambda: None) for _ in range(150)]
        for h in handles[:120]:
            h.cancel()
        await asyncio.sleep(0)  # a turn of the loop: it prunes the list

    conn._loop.call(cancel_most_timers)
    assert aloop._scheduled is not before  # type: ignore[attr-defined]  # (the premise)
    time.sleep(0.1)  # the 30 left fire; the first time of the old list is past
    assert isinstance(sender.send(Message(body=-1)), Accepted)
    driver = conn.async_connection.driver
    reads = driver.reads_here  # type: ignore[attr-defined]
    for i in range(20):
        assert isinstance(sender.send(Message(body=i)), Accepted)
    assert driver.reads_here - reads >= 20  # type: ignore[attr-defined]


def test_a_send_waits_in_the_loop_while_the_loop_waits_on_another_file_too() -> None:
    # a second file on the loop (a user's own I/O, say an HTTP token request) is served
    # while a send waits: the wait on the connection's socket alone would leave it unread
    with held_send() as (conn, sender, release):
        theirs, ours = socket.socketpair()
        served = threading.Event()

        async def watch() -> None:
            asyncio.get_running_loop().add_reader(ours.fileno(), served.set)

        async def unwatch() -> None:
            asyncio.get_running_loop().remove_reader(ours.fileno())

        conn._loop.call(watch)
        prompt: list[bool] = []

        def other_thread() -> None:
            time.sleep(0.2)  # the send below waits by then
            theirs.send(b"x")
            prompt.append(served.wait(WAIT / 2))
            release.set()

        t = threading.Thread(target=other_thread)
        t.start()
        try:
            assert isinstance(sender.send(Message(body="held")), Accepted)
            t.join(WAIT)
            assert prompt == [True]  # served while the send still waited
        finally:
            conn._loop.call(unwatch)
            theirs.close()
            ours.close()


def test_a_waiting_send_bigger_than_the_socket_takes_at_once_goes_out_whole(
    conn: amqp10.sync.Connection,
) -> None:
    # what the transport keeps for a writable socket is written by the loop: the wait on
    # the socket's reads gives way to it
    body = bytes(range(256)) * 400  # 100 KiB: below the transport's high-water mark
    sock = conn.async_connection.driver.stream.extra(anyio.abc.SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # the kernel takes little a write
    sender = conn.open_sender("big", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(sender.send(Message(body=body), timeout=WAIT), Accepted)
    receiver = conn.open_receiver("big", credit=1)
    d = receiver.receive(timeout=WAIT)
    assert d is not None and d.message.body == body
    d.accept()
