"""Moving an AMQP 0-10 connection (workers/handover.py, amqp010/frontend.py), in one
process: which event decides the move, and the replay of a recorded connection on a fresh
engine and handler (the other worker's side). Between real workers:
test_handover_amqp010_processes.py."""

from __future__ import annotations

from functools import partial
from typing import Any

from amqp10.amqp010 import (
    CLOSE_CODES,
    HEADER,
    CommandReceived,
    Compound,
    Connection,
    ConnectionEnded,
    ConnectionOpened,
    LoginRequested,
    OpenRequested,
    SessionAttached,
    SessionDetached,
    op,
)
from amqp10.amqp010.framing import encode_op, split_frames
from amqp10.broker.amqp010.frontend import (
    decides_move,
    frames,
    queue_named,
    replay_failed,
    replay_handler,
    without_heartbeats,
)
from amqp10.broker.amqp010.handler import Amqp010Handler
from amqp10.broker.amqp010.kept import KeptSessions
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.workers.handover import MovedIn, replay
from tests.amqp010.peer import Peer, struct


def _command(name: str, **values: Any) -> CommandReceived:
    return CommandReceived(channel=1, command=op(name, **values))


def _transfer(destination: str, key: str) -> CommandReceived:
    c = op("message.transfer", destination=destination)
    c.headers = [struct("delivery-properties", routing_key=key)]
    return CommandReceived(channel=1, command=c)


def test_the_first_command_decides_for_the_queue_it_names() -> None:
    table: list[tuple[Any, bool, str | None]] = [
        (LoginRequested("ANONYMOUS", b""), False, None),
        (OpenRequested("/"), False, None),
        (ConnectionOpened(), False, None),
        (SessionAttached(1, b"s"), False, None),
        (SessionAttached(1, b"s", resumed=True), True, None),  # a kept session: this worker's
        (SessionDetached(1, b"s"), True, None),
        (ConnectionEnded(200, ""), True, None),
        (_command("queue.declare", queue="q", exclusive=True), True, "q"),
        (_command("queue.delete", queue="q"), True, "q"),
        (_command("queue.purge", queue="q"), True, "q"),
        (_command("queue.query", queue="q"), True, "q"),
        (_command("exchange.bind", queue="q", exchange="amq.direct", binding_key="k"), True, "q"),
        (_command("message.subscribe", queue="q", destination="d"), True, "q"),
        (_command("message.subscribe", queue="amq.x", destination="d"), True, None),
        (_command("exchange.declare", exchange="x", type="direct"), True, None),
        (_command("tx.select"), True, None),
        (_transfer("", "q"), True, "q"),
        (_transfer("amq.fanout", "q"), True, None),  # another exchange: not moved
        (CommandReceived(1, op("message.transfer", destination="")), True, None),  # no key
    ]
    assert [(decides_move(e), queue_named(e)) for e, _, _ in table] == [(d, q) for _, d, q in table]


def _encoded(channel: int, item: Compound) -> bytes:
    out = bytearray()
    encode_op(out, channel, item, 0xFFFF)
    return bytes(out)


def test_frames_are_the_header_then_one_frame_at_a_time() -> None:
    attach = _encoded(1, op("session.attach", name=b"s"))
    point = _encoded(1, op("session.command-point", command_id=0, command_offset=0))
    data = HEADER + attach + point
    assert list(frames(data)) == [HEADER, attach, point]
    assert list(frames(data + attach[:5])) == [HEADER, attach, point, attach[:5]]


def test_heartbeats_are_left_out_of_what_is_compared() -> None:
    beat = _encoded(0, op("connection.heartbeat"))
    point = _encoded(1, op("session.command-point", command_id=0, command_offset=0))
    assert without_heartbeats(HEADER + beat + point + beat) == HEADER + point
    assert without_heartbeats(HEADER + point) == HEADER + point


class Recorded:
    """A bare client against the front end's engine and handler, every byte each wrote kept."""

    def __init__(self, broker: Broker | None = None) -> None:
        self.server = Connection(mechanisms=["ANONYMOUS"], max_session_timeout=60)
        self.handler = Amqp010Handler(broker or Broker(BrokerConfig()), self.server)
        self.client = Peer()
        self.sent = bytearray()
        self.written = bytearray()
        self.now = 1000.0
        self.server.tick(self.now)

    def flush(self, raw: bytes = b"") -> None:
        data = raw + bytes(self.client.out)
        self.client.out.clear()
        self.sent += data
        self.handler.handle(self.server.receive_data(data))
        self.handler.handle(self.server.poll_events())
        self.out()

    def out(self) -> None:
        s2c = self.server.data_to_send()
        self.written += s2c
        self.client.feed(s2c)

    def beat(self) -> None:
        """Time passes: the server's tick writes a heartbeat."""
        self.now += 1.5
        self.server.tick(self.now)
        self.out()


def _opened(pair: Recorded, *, heartbeat: int = 0) -> None:
    """The handshake, then a session attached that asks for a timeout."""
    pair.flush(HEADER)
    pair.client.send("connection.start-ok", mechanism="ANONYMOUS", response=b"", locale="en_US")
    pair.flush()
    pair.client.send("connection.tune-ok", channel_max=10, max_frame_size=0xFFFF, heartbeat=heartbeat)
    pair.client.send("connection.open", virtual_host="/")
    pair.flush()
    pair.client.send("session.attach", 1, name=b"s1")
    pair.client.send("session.command-point", 1, command_id=0, command_offset=0)
    pair.client.send("session.request-timeout", 1, timeout=30)
    pair.flush()


def _recorded(*, heartbeat: int = 0) -> tuple[bytes, bytes]:
    """A client's connection up to its ``queue.declare`` (after an ``execution.sync``): all
    it sent (the header first) and all the broker wrote before that command was handled."""
    pair = Recorded()
    _opened(pair, heartbeat=heartbeat)
    if heartbeat:
        pair.beat()
    pair.client.command("execution.sync", 1)
    pair.flush()
    assert pair.client.names()[-1] == "session.completed"  # (the execution.sync's)
    pair.client.command("queue.declare", 1, queue="q")
    return bytes(pair.sent + pair.client.out), bytes(pair.written)


def _fresh() -> tuple[Connection, Amqp010Handler]:
    conn = Connection(mechanisms=["ANONYMOUS"], max_session_timeout=60)
    return conn, Amqp010Handler(Broker(BrokerConfig()), conn)


def _names(data: bytes) -> list[str]:
    peer = Peer()
    peer.feed(HEADER + data)
    return peer.names()


def _unexpected(why: str) -> None:
    raise AssertionError(f"the replay failed once taken: {why}")


def test_a_replay_fed_frame_by_frame_writes_what_the_first_worker_wrote_then_answers_the_command() -> None:
    inbound, written = _recorded()
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    rest = replay(moved, conn, handler.handle, decides_move, frames, without_heartbeats, fail=_unexpected)
    assert rest == b"" and moved.accepted  # (it had written all the answers before the declare)
    assert handler.vhost.queue("q") is not None  # the deciding command, handled after the check
    assert 1 in handler.sessions
    # what the driver writes next: the declare's completion (command 1, after the sync's 0)
    assert _names(conn.data_to_send()) == ["session.completed"]


def test_a_replay_fed_at_once_is_refused() -> None:
    """The engine wants the handler's answer to ``start-ok`` before ``tune-ok``: the whole
    input fed in one piece fails the replay, which is then refused."""
    inbound, written = _recorded()
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    assert replay(moved, conn, handler.handle, decides_move, fail=_unexpected) is None
    assert moved.decided.is_set() and not moved.accepted


def test_a_heartbeat_the_first_worker_wrote_does_not_make_the_replay_differ() -> None:
    inbound, written = _recorded(heartbeat=1)
    beat = _encoded(0, op("connection.heartbeat"))
    assert beat in list(split_frames(written[8:]))  # (its clock wrote one before the declare)
    conn, handler = _fresh()
    assert replay(MovedIn("127.0.0.1:1", 0, inbound, written), conn, handler.handle, decides_move, frames, fail=_unexpected) is None
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    assert replay(moved, conn, handler.handle, decides_move, frames, without_heartbeats, fail=_unexpected) == b""
    assert moved.accepted and handler.vhost.queue("q") is not None


def test_a_connection_moved_away_keeps_none_of_its_sessions_for_a_resume() -> None:
    """Its session asked for a timeout: ended where it was, it would be kept there; moved,
    the other worker has it, and the first keeps nothing."""
    pair = Recorded()
    _opened(pair)
    assert pair.server.sessions[1].timeout == 30
    pair.handler.moved_away()
    pair.handler.cleanup()
    assert not KeptSessions.of(pair.handler.broker).sessions
    stayed = Recorded()
    _opened(stayed)
    stayed.handler.cleanup()  # (ended here: kept)
    assert len(KeptSessions.of(stayed.handler.broker).sessions) == 1


def test_a_replay_attaches_its_sessions_fresh_as_the_first_worker_did() -> None:
    """The other worker keeps a session of that name (an earlier connection's): the replay
    does not resume it (the first worker attached a fresh one, and a resumed attach there
    decides: not moved), and it stays kept."""
    inbound, written = _recorded()
    earlier = Recorded()
    _opened(earlier)
    earlier.handler.cleanup()
    kept = KeptSessions.of(earlier.handler.broker).sessions
    ((old, _),) = kept.values()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    conn = Connection(mechanisms=["ANONYMOUS"], max_session_timeout=60)
    handler = Amqp010Handler(earlier.handler.broker, conn)
    with handler.attaching_fresh():
        assert replay(moved, conn, handler.handle, decides_move, frames, without_heartbeats, fail=_unexpected) == b""
    assert moved.accepted and handler.sessions[1] is not old
    assert [s for s, _ in kept.values()] == [old]
    assert handler.vhost.queue("q") is not None


def test_a_refused_replay_keeps_none_of_its_sessions() -> None:
    """The replay differs (the worker it came from serves on): the sessions it attached
    asked for a timeout, but none is kept here (the real one carries on there)."""
    inbound, written = _recorded()
    conn, handler = _fresh()
    moved = MovedIn("127.0.0.1:1", 0, inbound, written + b"more")
    with handler.attaching_fresh() as resuming:
        assert replay(moved, conn, replay_handler(handler, resuming), decides_move, frames, without_heartbeats, fail=_unexpected) is None
    assert 1 in handler.sessions and handler.sessions[1].state.timeout == 30  # (as replayed)
    handler.replay_refused()  # (ServeContext.replayed's cleanup when not taken)
    assert not KeptSessions.of(handler.broker).sessions


def _kept_named(broker: Broker, name: bytes) -> Any:
    """A session named ``name`` kept on ``broker`` (an earlier connection's, timeout 30)."""
    earlier = Recorded(broker)
    _opened(earlier)
    earlier.client.send("session.attach", 2, name=name)
    earlier.client.send("session.command-point", 2, command_id=0, command_offset=0)
    earlier.client.send("session.request-timeout", 2, timeout=30)
    earlier.flush()
    earlier.handler.cleanup()
    return next(s for (_, _, n), (s, _) in KeptSessions.of(broker).sessions.items() if n == name)


def test_once_the_replay_is_taken_a_later_attach_resumes_a_session_kept_here() -> None:
    """Sessions attached before the deciding command are attached fresh (as on the worker
    the connection came from); one attached after it, in the same read, resumes the
    session of its name this worker keeps: this worker serves the connection then."""
    pair = Recorded()
    _opened(pair)
    pair.client.command("queue.declare", 1, queue="q")
    pair.client.send("session.attach", 2, name=b"k")
    inbound, written = bytes(pair.sent + pair.client.out), bytes(pair.written)
    conn, handler = _fresh()
    old_s1, old_k = _kept_named(handler.broker, b"s1"), _kept_named(handler.broker, b"k")
    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    with handler.attaching_fresh() as resuming:
        rest = replay(moved, conn, replay_handler(handler, resuming), decides_move, frames, without_heartbeats, fail=_unexpected)
    assert rest == b"" and moved.accepted
    assert handler.sessions[1] is not old_s1  # attached fresh, before the declare
    assert handler.sessions[2] is old_k  # resumed, after it
    assert [s for s, _ in KeptSessions.of(handler.broker).sessions.values()] == [old_s1]


def test_a_replay_that_raises_once_taken_closes_the_connection() -> None:
    """The deciding command's handling raises on the worker that took the connection: it
    sends ``connection.close`` (``connection-forced``: 0-10 has no internal-error close
    code) with the description, rather than serving on with the command unanswered."""
    inbound, written = _recorded()
    conn, handler = _fresh()

    def handle(events: list[Any]) -> None:
        if any(decides_move(e) for e in events):
            raise RuntimeError("injected")
        handler.handle(events)

    moved = MovedIn("127.0.0.1:1", 0, inbound, written)
    rest = replay(moved, conn, handle, decides_move, frames, without_heartbeats, fail=partial(replay_failed, handler))
    assert rest == b"" and moved.accepted
    peer = Peer()
    peer.feed(HEADER + conn.data_to_send())
    assert peer.names() == ["connection.close"]
    close = peer.got[-1][1]
    assert close["reply_code"] == CLOSE_CODES["connection-forced"]
    assert close["reply_text"] == "the replay of this connection failed after it moved: RuntimeError: injected"
