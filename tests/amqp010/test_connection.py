"""The server connection and its sessions, through a pair harness (a bare client peer in
memory): the handshake, heartbeats, sessions, command ids and completion, exceptions, and
bad input ending the connection or session with the spec's code."""

from __future__ import annotations

from amqp10.amqp010 import (
    CLOSE_CODES,
    CommandReceived,
    Connection,
    ConnectionEnded,
    ConnectionOpened,
    LoginRequested,
    OpenRequested,
    SessionAttached,
    SessionDetached,
    TransfersCompleted,
    op,
    result_struct,
)
from amqp10.amqp010.framing import FIRST_FRAME, FRAME_HEADER, LAST_FRAME, LAST_SEGMENT

from .peer import Pair


def test_handshake_asks_the_application_at_login_and_open() -> None:
    p = Pair()
    p.flush(b"AMQP\x01\x01\x00\x0a")
    assert p.client.header == b"AMQP\x01\x01\x00\x0a"
    ((_, start),) = p.client.take()
    assert start.name == "connection.start" and start["mechanisms"] == ["ANONYMOUS", "PLAIN"]
    p.client.send("connection.start-ok", mechanism="PLAIN", response=b"\x00u\x00p", locale="en_US")
    (login,) = p.flush()
    assert login == LoginRequested("PLAIN", b"\x00u\x00p", {})
    p.server.accept_login()
    p.flush()
    ((_, tune),) = p.client.take()
    assert tune.name == "connection.tune" and tune["max_frame_size"] == 0xFFFF
    p.client.send("connection.tune-ok", channel_max=5, max_frame_size=8192, heartbeat=10)
    p.client.send("connection.open", virtual_host="vh")
    assert p.flush() == [OpenRequested("vh")]
    assert (p.server.channel_max, p.server.max_frame, p.server.heartbeat) == (5, 8192, 10)
    p.server.accept_open()
    assert p.server.poll_events() == [ConnectionOpened()]
    p.flush()
    assert p.client.names() == ["connection.open-ok"]


def test_a_wrong_header_is_answered_with_ours_and_the_end() -> None:
    p = Pair()
    events = p.flush(b"AMQP\x00\x00\x09\x01")
    assert p.client.header == b"AMQP\x01\x01\x00\x0a"
    assert isinstance(events[0], ConnectionEnded) and p.server.is_closed


def test_a_mechanism_not_offered_closes() -> None:
    p = Pair()
    p.flush(b"AMQP\x01\x01\x00\x0a")
    p.client.send("connection.start-ok", mechanism="GSSAPI", response=b"", locale="en_US")
    p.flush()
    ((_, close),) = p.client.take("connection.close")
    assert (
        close["reply_code"] == CLOSE_CODES["connection-forced"] and "GSSAPI" in close["reply_text"]
    )


def test_a_control_out_of_turn_is_a_framing_error() -> None:
    p = Pair()
    p.flush(b"AMQP\x01\x01\x00\x0a")
    p.client.send("connection.open", virtual_host="/")
    p.flush()
    ((_, close),) = p.client.take("connection.close")
    assert (
        close["reply_code"] == CLOSE_CODES["framing-error"]
        and "connection.open in state start-ok" in close["reply_text"]
    )
    p.client.send("connection.close-ok")
    assert isinstance(p.flush()[-1], ConnectionEnded) and p.server.is_closed


def test_garbage_after_the_header_is_a_framing_error() -> None:
    p = Pair()
    p.flush(b"AMQP\x01\x01\x00\x0a" + b"\xff" * 12)
    ((_, close),) = p.client.take("connection.close")
    assert close["reply_code"] == 501


def test_attach_answers_attached_and_command_point() -> None:
    p = Pair()
    p.open()
    p.client.take()
    p.attach(1, b"my-session")
    assert SessionAttached(1, b"my-session") in p.events
    assert p.client.names() == ["session.attached", "session.command-point"]


def test_commands_get_ids_from_the_command_point_and_complete_when_asked() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.take()
    p.client.send("session.command-point", 1, command_id=10, command_offset=0)
    p.client.command("queue.declare", sync=False, queue="a")
    p.client.command("queue.declare", sync=True, queue="b")
    events = p.flush()
    cmds = [e.command for e in events if isinstance(e, CommandReceived)]
    assert [(c.id, c.sync, c["queue"]) for c in cmds] == [(10, False, "a"), (11, True, "b")]
    p.server.complete(1, cmds[0])
    p.flush()
    assert p.client.names() == []  # not asked for yet
    p.server.complete(1, cmds[1])
    p.flush()
    ((_, completed),) = p.client.take()
    assert completed.name == "session.completed" and completed["commands"] == ((10, 11),)


def test_execution_sync_completes_at_once_and_a_result_comes_first() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.take()
    p.client.command("queue.query", sync=False, queue="q")
    (e,) = p.flush()
    assert isinstance(e, CommandReceived)
    p.server.complete(
        1,
        e.command,
        result_struct("queue-query-result", queue="q", message_count=3, subscriber_count=0),
    )
    p.client.command("execution.sync")
    p.flush()
    got = p.client.take()
    assert [item.name for _, item in got] == ["execution.result", "session.completed"]
    assert got[0][1]["value"]["message_count"] == 3 and got[1][1]["commands"] == ((0, 1),)


def test_known_completed_trims_and_flush_reports() -> None:
    p = Pair()
    p.open()
    p.attach()
    for _ in range(3):
        p.client.command("queue.declare", sync=False, queue="x")
    for e in p.flush():
        if isinstance(e, CommandReceived):
            p.server.complete(1, e.command)
    p.client.take()
    p.client.send("session.known-completed", 1, commands=((0, 1),))
    p.client.send("session.flush", 1, completed=True, expected=True, confirmed=True)
    p.flush()
    got = {item.name: item for _, item in p.client.take()}
    assert got["session.completed"]["commands"] == ((2, 2),)
    assert got["session.confirmed"]["commands"] == ((2, 2),)
    assert got["session.expected"]["commands"] == ((3, 3),)


def test_a_gap_counts_as_completed_commands() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.command("queue.declare", sync=False, queue="x")
    for e in p.flush():
        if isinstance(e, CommandReceived):
            p.server.complete(1, e.command)
    p.client.take()
    p.client.send("session.gap", 1, commands=((1, 3),))  # commands 1-3: never to be sent
    p.client.send("session.flush", 1, completed=True)
    assert [e for e in p.flush() if isinstance(e, CommandReceived)] == []
    got = {item.name: item for _, item in p.client.take()}
    assert got["session.completed"]["commands"] == ((0, 3),)


def test_an_exception_ends_the_session_and_later_commands_are_ignored() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.take()
    p.client.command("queue.delete", queue="nope")
    (e,) = p.flush()
    assert isinstance(e, CommandReceived)
    p.server.exception(1, e.command, "not-found", "no queue 'nope'")
    p.client.command("queue.declare", queue="after")
    assert p.flush() == []
    exc, detach = [item for _, item in p.client.take()]
    assert exc.name == "execution.exception"
    assert (exc["error_code"], exc["command_id"], exc["class_code"], exc["command_code"]) == (
        404,
        0,
        8,
        2,
    )
    assert exc["description"] == "no queue 'nope'"
    assert detach.name == "session.detach" and detach["name"] == b"s1"
    p.client.send("session.detached", 1, name=b"s1", code=0)
    assert p.flush() == [SessionDetached(1, b"s1")]


def test_a_command_on_a_channel_with_no_session_is_answered_not_attached() -> None:
    p = Pair()
    p.open()
    p.client.take()
    p.client.command("queue.declare", 4, queue="q")
    assert p.flush() == []
    ((ch, detached),) = p.client.take()
    assert ch == 4 and detached.name == "session.detached" and detached["code"] == 3


def test_detach_and_a_busy_session_name() -> None:
    p = Pair()
    p.open()
    p.attach(1, b"same")
    p.client.take()
    p.client.send("session.attach", 2, name=b"same")
    p.flush()
    ((ch, busy),) = p.client.take()
    assert (ch, busy.name, busy["code"]) == (2, "session.detached", 1)
    p.client.send("session.detach", 1, name=b"same")
    assert p.flush() == [SessionDetached(1, b"same")]
    ((_, done),) = p.client.take()
    assert done.name == "session.detached" and done["code"] == 0


def test_the_peer_completing_our_commands_is_told_to_the_application() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.take()
    t = op("message.transfer", destination="d", accept_mode=0, acquire_mode=0)
    assert p.server.send_command(1, t) == 0
    assert (
        p.server.send_command(
            1, op("message.transfer", destination="d", accept_mode=0, acquire_mode=0)
        )
        == 1
    )
    p.client.send("session.completed", 1, commands=((0, 1),), timely_reply=True)
    assert p.flush() == [TransfersCompleted(1, ((0, 1),))]
    assert [item.name for _, item in p.client.take()] == [
        "message.transfer",
        "message.transfer",
        "session.known-completed",
    ]


def test_heartbeats_go_out_and_silence_ends_the_connection() -> None:
    p = Pair()
    p.flush(b"AMQP\x01\x01\x00\x0a")
    p.client.send("connection.start-ok", mechanism="ANONYMOUS", response=b"", locale="en_US")
    p.flush()
    p.server.accept_login()
    p.client.send("connection.tune-ok", channel_max=1, max_frame_size=4096, heartbeat=5)
    p.client.send("connection.open", virtual_host="/")
    p.flush()
    p.server.accept_open()
    p.flush()
    p.client.take()
    deadline = p.server.tick(p.now + 5)
    p.flush()
    assert p.client.names() == ["connection.heartbeat"] and deadline is not None
    p.server.tick(p.now + 10.02)
    ended = p.server.poll_events()
    assert ended == [ConnectionEnded(320, "heartbeat timeout")]


def test_the_handshake_times_out() -> None:
    p = Pair(Connection(mechanisms=["ANONYMOUS"], handshake_timeout=3))
    p.flush(b"AMQP\x01\x01\x00\x0a")
    p.server.tick(p.now + 4)
    p.flush()
    ((_, close),) = p.client.take("connection.close")
    assert close["reply_text"] == "handshake timed out"


def test_close_is_answered_with_close_ok() -> None:
    p = Pair()
    p.open()
    p.client.take()
    p.client.send("connection.close", reply_code=200, reply_text="bye")
    assert p.flush() == [ConnectionEnded(200, "bye")]
    assert p.client.names() == ["connection.close-ok"] and p.server.is_closed


def test_a_large_command_over_small_frames_reaches_the_application_whole() -> None:
    p = Pair(max_frame=4096)
    p.open()
    p.attach()
    p.client.command(
        "message.transfer", destination="", accept_mode=1, acquire_mode=0, body=b"z" * 100_000
    )
    (e,) = p.flush()
    assert isinstance(e, CommandReceived) and len(e.command.body) == 100_000


def test_an_unknown_type_code_in_a_command_closes_with_framing_error() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.take()
    p.client.command("queue.declare", queue="q", arguments={"k": 1})
    raw = bytearray(p.client.out)
    p.client.out.clear()
    at = raw.index(b"\x01k") + 2  # the map entry's type code (int64: 0x31)
    raw[at] = 0x0F
    p.flush(bytes(raw))
    ((_, close),) = p.client.take("connection.close")
    assert close["reply_code"] == 501 and "unknown type code 0x0f" in close["reply_text"]


def test_a_header_segment_before_its_command_closes_with_framing_error() -> None:
    p = Pair()
    p.open()
    p.attach()
    p.client.take()
    p.flush(FRAME_HEADER.pack(FIRST_FRAME | LAST_FRAME | LAST_SEGMENT, 2, 12, 1, 1))
    ((_, close),) = p.client.take("connection.close")
    assert (
        close["reply_code"] == 501 and "header segment without its command" in close["reply_text"]
    )
