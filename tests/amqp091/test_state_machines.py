"""Every received connection method in every reachable state, held to the transition table.

A method the table allows moves the state as the table says; any other is a
connection exception (COMMAND_INVALID), for both roles (h2's
``test_state_machines`` idea, over the whole (state, input) space we can reach).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from amqp10.amqp091 import (
    AMQP_0_9_1,
    Connection,
    ConnectionFailed,
    ConnectionState,
    ReplyCode,
    channel_state,
)
from amqp10.amqp091 import methods as m
from amqp10.amqp091.base import Method
from amqp10.amqp091.connection_state import RECEIVED, TRANSITIONS, ConnectionInput

from .pair import method_frame

S = ConnectionState
CONNECTION_METHODS = [cls for cls in m.METHODS.values() if cls.CLASS_ID == 10]


def _server(steps: int) -> Connection:
    server = Connection("server")
    script: list[Callable[[], object]] = [
        lambda: server.receive_data(AMQP_0_9_1.header),
        lambda: server.receive_data(
            method_frame(0, m.ConnectionStartOk(mechanism="PLAIN", response=b"\0u\0p"))
        ),
        lambda: server.accept_login(),
        lambda: server.receive_data(
            method_frame(0, m.ConnectionTuneOk(channel_max=10, frame_max=4096))
        ),
        lambda: server.receive_data(method_frame(0, m.ConnectionOpen(virtual_host="/"))),
        lambda: server.accept_open(),
    ]
    for step in script[:steps]:
        step()
    server.data_to_send()
    server.poll_events()
    return server


def _client(steps: int) -> Connection:
    client = Connection("client")
    script: list[Callable[[], object]] = [
        lambda: client.receive_data(method_frame(0, m.ConnectionStart(mechanisms=b"PLAIN"))),
        lambda: client.receive_data(
            method_frame(0, m.ConnectionTune(channel_max=10, frame_max=4096))
        ),
        lambda: client.receive_data(method_frame(0, m.ConnectionOpenOk())),
    ]
    for step in script[:steps]:
        step()
    client.data_to_send()
    client.poll_events()
    return client


SERVER_STATES = {
    S.START_SENT: 1,
    S.AUTHENTICATING: 2,
    S.TUNE_SENT: 3,
    S.TUNED: 4,
    S.OPEN_RCVD: 5,
    S.OPEN: 6,
}
CLIENT_STATES = {S.HEADER_SENT: 0, S.START_OK_SENT: 1, S.OPEN_SENT: 2, S.OPEN: 3}
CASES = [("server", st, cls) for st in SERVER_STATES for cls in CONNECTION_METHODS] + [
    ("client", st, cls) for st in CLIENT_STATES for cls in CONNECTION_METHODS
]


@pytest.mark.parametrize(
    ("role", "state", "cls"), CASES, ids=[f"{r}-{s.name}-{c.NAME}" for r, s, c in CASES]
)
def test_received_connection_method(role: str, state: ConnectionState, cls: type[Method]) -> None:
    conn = _server(SERVER_STATES[state]) if role == "server" else _client(CLIENT_STATES[state])
    assert conn.state is state
    method = cls(reply_code=200) if cls is m.ConnectionClose else cls()
    events = conn.receive_data(method_frame(0, method))
    failed = [e for e in events if isinstance(e, ConnectionFailed)]
    event = RECEIVED.get(cls.NAME)
    allowed = role in cls.RECEIVED_BY and (
        (event is not None and (state, event) in TRANSITIONS)
        or (event is None and state is S.OPEN)  # RabbitMQ's extensions, once open
    )
    if not allowed:
        assert [f.reply_code for f in failed] == [ReplyCode.COMMAND_INVALID], (events, conn.state)
        assert conn.state is S.CLOSE_SENT
        return
    if cls is m.ConnectionStartOk:
        # allowed, but its empty mechanism is not one we offered
        assert [f.reply_code for f in failed] == [ReplyCode.COMMAND_INVALID]
        return
    assert not failed, events
    if event is ConnectionInput.RECV_CLOSE:
        assert conn.state is S.CLOSED  # answered with close-ok at once
    elif event is not None:
        expected = TRANSITIONS[state, event]
        # the client answers tune and start itself, moving on at once
        follow = {S.TUNE_RCVD: S.OPEN_SENT, S.START_RCVD: S.START_OK_SENT}
        assert conn.state is follow.get(expected, expected)
    else:
        assert conn.state is S.OPEN


def _reachable(table: dict[tuple[Any, Any], Any], start: Any) -> set[Any]:
    seen = {start}
    todo = [start]
    while todo:
        state = todo.pop()
        for (src, _), dst in table.items():
            if src is state and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return seen


@pytest.mark.parametrize(
    ("table", "states", "start", "end"),
    [
        (TRANSITIONS, ConnectionState, S.START, S.CLOSED),
        (channel_state.TRANSITIONS, channel_state.ChannelState, channel_state.ChannelState.CLOSED,
         channel_state.ChannelState.CLOSED),
        (channel_state.CONTENT_TRANSITIONS, channel_state.ContentState, channel_state.ContentState.IDLE,
         channel_state.ContentState.IDLE),
    ],
)  # fmt: skip
def test_every_state_is_reachable_and_can_end(
    table: Any, states: Any, start: Any, end: Any
) -> None:
    """No dead state in the tables: each is reachable, and from each the end is."""
    assert _reachable(table, start) == set(states)
    for state in states:
        assert end in _reachable(table, state), state


def test_the_alias_header_opens_a_0_9_1_connection() -> None:
    server = Connection("server")
    server.receive_data(b"AMQP\x01\x01\x09\x01")
    assert server.state is S.START_SENT


CHANNEL_METHODS = [
    m.ChannelOpen(),
    m.ChannelFlow(active=True),
    m.ChannelFlowOk(active=True),
    m.ChannelClose(reply_code=200),
    m.ChannelCloseOk(),
    m.BasicQos(),
]
CI = channel_state.ChannelInput
CS = channel_state.ChannelState
_INPUT = {m.ChannelClose: CI.RECV_CLOSE, m.ChannelCloseOk: CI.RECV_CLOSE_OK}


@pytest.mark.parametrize("closing", [False, True], ids=["OPEN", "CLOSING"])
@pytest.mark.parametrize("method", CHANNEL_METHODS, ids=[x.NAME for x in CHANNEL_METHODS])
def test_received_channel_method(closing: bool, method: Method) -> None:
    """A server channel OPEN or CLOSING (we sent close) against each method the client may send."""
    server = _server(6)
    server.receive_data(method_frame(1, m.ChannelOpen()))
    if closing:
        server.close_channel(1, 406, "PRECONDITION_FAILED - x")
    server.data_to_send()
    state = CS.CLOSING if closing else CS.OPEN
    events = server.receive_data(method_frame(1, method))
    failed = [e.reply_code for e in events if isinstance(e, ConnectionFailed)]
    event = _INPUT.get(type(method), CI.RECV_METHOD)
    if type(method) is m.ChannelOpen and not closing:
        assert failed == [ReplyCode.CHANNEL_ERROR]  # a second open
    elif closing and type(method) is not m.ChannelOpen:
        assert not failed  # discarded, or the close handshake
        assert (state, event) in channel_state.TRANSITIONS
    elif (state, event) in channel_state.TRANSITIONS:
        assert not failed, events
    else:
        assert failed == [ReplyCode.COMMAND_INVALID], events
    # what the channel became: the table's answer (close and close-ok end it)
    if not failed:
        expected = channel_state.TRANSITIONS.get((state, event), state)
        if expected is CS.CLOSE_RCVD or (closing and event is CI.RECV_CLOSE_OK):
            assert 1 not in server.channels
        elif closing and event is CI.RECV_CLOSE:
            assert server.channels == {1: CS.CLOSING}
        else:
            assert server.channels == {1: expected}


@pytest.mark.parametrize("name", ["connection", "channel", "content"])
def test_diagrams_draw_every_transition(name: str) -> None:
    from amqp10.amqp091._diagrams import TABLES, mermaid

    source = mermaid(name)
    table, _ = TABLES[name]
    assert source.startswith("stateDiagram-v2\n")
    assert source.count(" --> ") == len(table) + 1
