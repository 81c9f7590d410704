"""The pieces of moving a connection (workers/handover.py), in one process: the recording
engine, the replay's check, and the hand-over socket with a descriptor passed over it.

The whole mechanism between real workers is tests/broker/workers/test_handover_processes.py.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream, TaskGroup

from amqp10.broker.amqp1 import ConnectionHandler
from amqp10.broker.amqp1.frontend import replay_failed, without_empty_frames
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.guard import HeldOutput
from amqp10.broker.workers.handover import (
    RECORD_LIMIT,
    Handover,
    HandoverServer,
    MovedIn,
    Mover,
    Recording,
    hand_over,
    replay,
)
from amqp10.broker.workers.ownership import Ownership
from amqp10.io.asyncio_tcp import asyncio_tcp
from amqp10.io.direct import DirectDriver
from amqp10.transport import Connection, ConnectionClosed, LinkAttached
from amqp10.types import ErrorCondition, Source, Target
from tests.broker.harness import Net

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Echo:
    """An engine that answers each input with it, upper-cased."""

    def __init__(self) -> None:
        self.out = b""
        self.ticks = 0

    def receive_data(self, data: bytes) -> list[Any]:
        self.out += data.upper()
        return [data]

    def data_to_send(self) -> bytes:
        out, self.out = self.out, b""
        return out

    def tick(self, now: float) -> float | None:
        self.ticks += 1
        return None

    def poll_events(self) -> list[Any]:
        return []

    @property
    def is_closed(self) -> bool:
        return False


def test_a_recording_keeps_what_was_read_and_written_and_frozen_writes_nothing() -> None:
    rec = Recording(Echo())
    assert rec.receive_data(b"ab") == [b"ab"]
    assert rec.data_to_send() == b"AB"
    rec.frozen = True
    assert rec.receive_data(b"cd") == []  # kept for later, not handled
    assert rec.data_to_send() == b"" and rec.tick(1.0) is None
    assert (bytes(rec.inbound), bytes(rec.outbound), bytes(rec.pending)) == (b"abcd", b"AB", b"cd")
    rec.stop()
    assert rec.receive_data(b"e") == [b"e"] and rec.data_to_send() == b"E"
    assert rec.inbound == b"" and rec.outbound == b""


def test_a_recording_stops_past_its_limit() -> None:
    rec = Recording(Echo())
    rec.receive_data(b"x" * (RECORD_LIMIT + 1))
    assert rec.full and rec.inbound == b""


def test_the_replay_is_taken_only_if_it_begins_with_what_was_written() -> None:
    moved = MovedIn("peer", 0, b"in", b"HEAD")
    assert moved.check(b"HEADREST") == b"REST"
    assert moved.accepted and moved.decided.is_set()
    other = MovedIn("peer", 0, b"in", b"HEAD")
    assert other.check(b"HEAT") is None
    assert not other.accepted and other.decided.is_set()


EMPTY = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # a 1.0 empty frame (a heartbeat)


def test_a_1_0_replay_is_compared_without_empty_frames() -> None:
    """1.0's empty frames, written on the engine's own timer, are left out of both sides
    (they made a connection that idled before its first attach stay); headers and other
    frames are kept, an empty frame's bytes inside another frame too."""
    sasl, amqp = b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00"
    frame = b"\x00\x00\x00\x10\x02\x00\x00\x00" + EMPTY  # its payload looks like one
    written = sasl + amqp + EMPTY + frame + EMPTY
    assert without_empty_frames(written) == sasl + amqp + frame
    assert without_empty_frames(b"\x00\x00\x00") == b"\x00\x00\x00"  # (cut short: kept)
    moved = MovedIn("peer", 0, b"in", written)
    assert moved.check(sasl + amqp + frame + b"REST", without_empty_frames) == b"REST"
    assert moved.accepted
    assert MovedIn("peer", 0, b"in", written).check(sasl + amqp + frame + b"REST") is None  # (compared as written)


def _raising_on(handle: Any, kind: type) -> Any:
    """``handle``, but raising on a batch with an event of ``kind`` (a bug after the check)."""

    def raising(events: list[Any]) -> None:
        if any(type(e) is kind for e in events):
            raise RuntimeError("injected")
        handle(events)

    return raising


def test_an_echo_replay_that_raises_once_taken_fails_with_a_description(caplog: pytest.LogCaptureFixture) -> None:
    moved = MovedIn("peer", 0, b"ab", b"")
    failed: list[str] = []

    def handle(events: list[Any]) -> None:
        if events == [b"ab"]:
            raise RuntimeError("injected")

    with caplog.at_level(logging.ERROR, "amqp10.broker.workers"):
        rest = replay(moved, Echo(), handle, lambda e: e == b"ab", fail=failed.append)
    assert rest == b"AB" and moved.accepted  # taken: the other worker let go of it
    assert failed == ["the replay of this connection failed after it moved: RuntimeError: injected"]
    assert [r.getMessage() for r in caplog.records] == [
        "the replay of a connection from peer failed after it was taken over: closing it"
    ]


def test_a_1_0_replay_that_raises_once_taken_closes_with_an_internal_error() -> None:
    """The first attach's handling raises on the worker that took the connection: it closes
    the connection with ``amqp:internal-error`` (it served on before, the attach unanswered)."""
    container = BrokerConfig().container_id
    client = Connection("client")
    server = Connection(container, send_header=False)
    handler = ConnectionHandler(Broker(BrokerConfig()), server)
    sent, written = bytearray(), bytearray()

    def pump() -> None:
        for _ in range(100):
            a = client.data_to_send()
            sent.extend(a)
            if a:
                handler.handle(server.receive_data(a))
            b = server.data_to_send()
            written.extend(b)
            if b:
                client.receive_data(b)
            if not a and not b:
                return
        raise AssertionError("the pair did not settle")

    client.open()
    session = client.session()
    session.begin()
    pump()
    session.sender("snd", target=Target(address="q"), source=Source()).attach()
    moved = MovedIn("peer", 0, bytes(sent) + client.data_to_send(), bytes(written))
    fresh = Connection(container, send_header=False)
    owner = ConnectionHandler(Broker(BrokerConfig()), fresh)
    handle = _raising_on(owner.handle, LinkAttached)
    rest = replay(moved, fresh, handle, lambda e: type(e) is LinkAttached, fail=partial(replay_failed, fresh, owner))
    assert rest is not None and moved.accepted
    closed = [e for e in client.receive_data(rest + fresh.data_to_send()) if type(e) is ConnectionClosed]
    assert len(closed) == 1 and closed[0].error is not None
    assert closed[0].error.condition == ErrorCondition.INTERNAL_ERROR
    assert closed[0].error.description == "the replay of this connection failed after it moved: RuntimeError: injected"


async def test_an_unreachable_worker_leaves_the_connection_where_it_was(tmp_path: Path) -> None:
    a, _ = socket.socketpair()
    with a, _:
        assert await hand_over(tmp_path, 1, a.fileno(), MovedIn("peer", 0, b"in", b"out")) is False


@pytest.mark.parametrize("take", [True, False])
async def test_the_socket_and_its_records_reach_the_owner_which_answers(tmp_path: Path, take: bool) -> None:
    """Taken: the owner serves the socket. Not taken: it gives back what it read of it."""
    client, server = socket.socketpair()
    got: list[MovedIn] = []

    async def owner_takes(sock: socket.socket, moved: MovedIn) -> None:
        stream = moved.stream = await SocketStream.from_socket(sock)
        got.append(moved)
        tcp = asyncio_tcp(stream)
        assert tcp is not None
        with anyio.fail_after(10):
            while not tcp.protocol.read_queue:  # (what the client sent: read by the owner's stream)
                await anyio.sleep(0.01)
        if take:
            moved.decide(True)
            await stream.send(b"served by the owner")
            await stream.aclose()
        else:
            moved.decide(False)  # (its stream stops reading and lets go of the socket)

    with client:
        async with anyio.create_task_group() as tg:
            await tg.start(HandoverServer(tmp_path, 1, owner_takes).run)
            client.sendall(b"later")  # what the owner's stream reads once it has the socket
            moved = MovedIn("127.0.0.1:5", 0, b"read by the first", b"written by the first")
            answer = await hand_over(tmp_path, 1, server.fileno(), moved)
            server.close()  # (the first worker's copy: closed as a moved connection's is)
            assert answer is take
            assert (got[0].peer, got[0].shown_worker, got[0].inbound, got[0].written) == (
                "127.0.0.1:5", 0, b"read by the first", b"written by the first"
            )
            if take:
                client.settimeout(10)
                assert client.recv(100) == b"served by the owner"
            else:
                assert moved.returned == b"later"
            tg.cancel_scope.cancel()


def test_a_first_link_is_moved_for_a_queue_only() -> None:
    """``move_connections`` moves a connection to the worker that owns the queue its first
    link names (:meth:`NodeLookup.queue_named <amqp10.broker.amqp1.lookup.NodeLookup.queue_named>`):
    never for ``$management``, ``$cbs``, an exchange or a topic, which are no queue."""
    net = Net()
    vhost = net.broker.vhosts["/"]
    vhost.declare_exchange("x", "direct", durable=False)
    vhost.declare_queue("q", durable=False)
    client = net.client()
    attached: list[Any] = []
    handle = client.handler.handle

    def handle_seen(events: list[Any]) -> None:
        attached.extend(e.link for e in events if isinstance(e, LinkAttached))
        handle(events)

    client.handler.handle = handle_seen  # type: ignore[method-assign]
    named = {}
    for address in ("$management", "$cbs", "x", "/exchanges/x", "/queues/q", "q", "new"):
        client.sender(address)
        client.receiver(address)
        named[address] = {client.handler.nodes.queue_named(link) for link in attached}
        attached.clear()
    assert named == {
        "$management": {None},
        "$cbs": {None},
        "x": {None},
        "/exchanges/x": {None},
        "/queues/q": {"q"},
        "q": {"q"},
        "new": {"new"},
    }


@asynccontextmanager
async def _served() -> AsyncIterator[tuple[SocketStream, TaskGroup]]:
    """A stream over one end of a socket pair, and a task group (cancelled at the end)."""
    a, b = socket.socketpair()
    with a:
        stream = await SocketStream.from_socket(b)
        async with stream, anyio.create_task_group() as tg:
            yield stream, tg
            tg.cancel_scope.cancel()


async def test_no_move_while_the_driver_holds_the_rest_of_a_read(tmp_path: Path) -> None:
    """A read fed a slice a turn: its rest is in neither record, so the connection stays.
    Otherwise the move starts with reading paused and no peek at the socket (0-9-1's
    driver reads one chunk every ``pause_limit`` while paused), restored if it stays."""
    async with _served() as (stream, tg):
        for backlog in (True, False):
            rec = Recording(Echo())
            driver = DirectDriver(stream, rec, lambda events: None, pause_limit=5.0)
            handled: list[Any] = []
            mover = Mover(Handover(tmp_path, Ownership(2, 0)), "peer", rec, lambda e: e == "attach", lambda e: 1, handled.extend)
            mover.running(driver, tg)
            if backlog:
                driver._backlog = bytearray(b"the rest of a read")
                assert mover.watch(["open", "attach"]) == ["open", "attach"]  # all handled here
                assert not mover.watching and not rec.recording
                continue
            assert mover.watch(["open", "attach", "more"]) == ["open"]  # the rest set aside
            assert rec.frozen and driver.pause_limit is None
            with anyio.fail_after(10):  # (worker 1 has no hand-over socket: it stays)
                while rec.recording:
                    await anyio.sleep(0.01)
            assert handled == ["attach", "more"] and driver.pause_limit == 5.0


async def test_no_move_when_a_declaration_answered_first_came_in_the_deciding_events_batch(tmp_path: Path) -> None:
    """0-9-1 with ``publishers_apart``: a declaration before the deciding publish is
    replayed elsewhere as the first worker answered it, so that answer must have been
    written: in the publish's own batch it is not yet, and the connection stays; in an
    earlier batch the publish moves it."""
    async with _served() as (stream, tg):
        for together in (True, False):
            rec = Recording(Echo())
            mover = Mover(
                Handover(tmp_path, Ownership(2, 0)), "peer", rec, lambda e: e == "publish", lambda e: 1,
                lambda events: None, answered_first=lambda e: e == "declare",
            )  # fmt: skip
            mover.running(DirectDriver(stream, rec, lambda events: None), tg)
            if together:
                assert mover.watch(["open", "declare", "publish"]) == ["open", "declare", "publish"]
                assert not mover.watching and not rec.recording  # stays, unrecorded
                continue
            assert mover.watch(["open", "declare"]) == ["open", "declare"] and mover.watching
            assert mover.watch(["publish"]) == [] and rec.frozen  # the move has started


async def test_a_move_that_fails_keeps_the_pause_the_handler_made(tmp_path: Path) -> None:
    """Not moved, the set-aside events are handled here; a handler that pauses reading for
    one (an answer that comes later, a memory alarm's block) keeps that pause."""
    a, b = socket.socketpair()
    with a:
        stream = await SocketStream.from_socket(b)
        async with stream, anyio.create_task_group() as tg:
            rec = Recording(Echo())
            driver = DirectDriver(stream, rec, lambda events: None)
            handled: list[Any] = []

            def handle(events: list[Any]) -> None:
                handled.extend(events)
                if "declare" in events:
                    driver.pause_reading()

            mover = Mover(Handover(tmp_path, Ownership(2, 0)), "peer", rec, lambda e: e == "declare", lambda e: 1, handle)
            mover.running(driver, tg)
            assert mover.watch(["open", "declare"]) == ["open"]
            with anyio.fail_after(10):  # (worker 1 has no hand-over socket: it stays)
                while rec.recording:
                    await anyio.sleep(0.01)
            assert handled == ["declare"] and driver._paused
            tg.cancel_scope.cancel()


async def test_no_move_once_a_logins_answer_was_held(tmp_path: Path) -> None:
    """[security] back-off holds a failed login's answer on this worker: such a connection
    stays (replayed elsewhere, a pipelined login would be answered at once)."""
    a, b = socket.socketpair()
    with a:
        stream = await SocketStream.from_socket(b)
        async with stream, anyio.create_task_group() as tg:
            for held in (0.0, 0.5):
                out = HeldOutput(Echo())
                out.hold(0.0, held)
                rec = Recording(out)
                driver = DirectDriver(stream, rec, lambda events: None)
                mover = Mover(Handover(tmp_path, Ownership(2, 0)), "peer", rec, lambda e: e == "attach", lambda e: 1, lambda e: None)
                mover.running(driver, tg)
                got = mover.watch(["open", "attach"])
                if held:
                    assert got == ["open", "attach"] and not rec.recording  # stays, unrecorded
                else:
                    assert got == ["open"] and rec.frozen  # (the move starts)
                    with anyio.fail_after(10):
                        while rec.recording:
                            await anyio.sleep(0.01)
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("take", [True, False])
async def test_the_front_end_is_told_once_the_connection_moved_away(tmp_path: Path, take: bool) -> None:
    """Taken by the owner: ``moved_away`` runs before the connection is let go here (0-10
    ends its sessions without keeping them); not taken: it does not, the events set aside
    are handled here."""

    async def owner_takes(sock: socket.socket, moved: MovedIn) -> None:
        sock.close()
        moved.decide(take)

    a, b = socket.socketpair()
    with a:
        stream = await SocketStream.from_socket(b)
        async with stream, anyio.create_task_group() as tg:
            await tg.start(HandoverServer(tmp_path, 1, owner_takes).run)
            rec = Recording(Echo())
            driver = DirectDriver(stream, rec, lambda events: None)
            handled: list[Any] = []
            told: list[str] = []
            handover = Handover(tmp_path, Ownership(2, 0))
            mover = Mover(handover, "peer", rec, lambda e: e == "declare", lambda e: 1, handled.extend, lambda: told.append("moved away"))
            mover.running(driver, tg)
            assert mover.watch(["open", "declare"]) == ["open"]
            with anyio.fail_after(10):
                while not (told if take else handled):
                    await anyio.sleep(0.01)
            assert (told, handled) == ((["moved away"], []) if take else ([], ["declare"]))
            tg.cancel_scope.cancel()


def test_where_a_connection_goes_by_its_first_use_of_a_node(tmp_path: Path) -> None:
    """The owner for anything; with ``publishers_apart`` a publisher goes to the worker
    after the owner (wrapping round); None where that is this worker."""
    ownership = Ownership(3, 0)
    names = {ownership.owner("/", f"q{i}"): f"q{i}" for i in range(50)}
    assert sorted(names) == [0, 1, 2]
    plain = Handover(tmp_path, ownership)
    apart = Handover(tmp_path, ownership, publishers_apart=True)
    for owner, name in names.items():
        mine = None if owner == 0 else owner
        assert plain.worker_for("/", name) == mine
        assert plain.worker_for("/", name, publishes=True) == mine
        assert apart.worker_for("/", name) == mine
        after = (owner + 1) % 3
        assert apart.worker_for("/", name, publishes=True) == (None if after == 0 else after)
