"""A Hypothesis state machine over the pair harness: random valid sequences of
channel opens and closes (either side), methods and multi-frame contents both ways,
flow, fed whole or in random chunks. After every pump both engines are OPEN,
agree on the open channels, and every content arrives whole, in order, on its channel."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqp10.amqp091 import (
    BasicProperties,
    ChannelState,
    ConnectionFailed,
    ConnectionState,
    ContentReceived,
    Event,
    MethodReceived,
)
from amqp10.amqp091 import methods as m

from .pair import Pair


class PairMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair(client={"frame_max": 4096})
        self.pair.open()
        self.to_server: list[tuple[int, bytes]] = []
        self.to_client: list[tuple[int, bytes]] = []
        self.methods_to_server: list[int] = []
        self.events: list[Event] = []

    def _open(self) -> list[int]:
        return [
            n
            for n, state in self.pair.client.channels.items()
            if state is ChannelState.OPEN and self.pair.server.channels.get(n) is ChannelState.OPEN
        ]

    @rule(chunk=st.sampled_from([None, 1, 7, 1000]))
    def pump(self, chunk: int | None) -> None:
        self.pair.chunk = chunk
        s, c = self.pair.pump()
        self.events += s + c
        for e in s:
            if isinstance(e, ContentReceived):
                assert self.to_server.pop(0) == (e.channel, e.body)
            elif isinstance(e, MethodReceived):
                assert self.methods_to_server.pop(0) == e.channel
        for e in c:
            if isinstance(e, ContentReceived):
                assert self.to_client.pop(0) == (e.channel, e.body)
        assert not self.to_server and not self.to_client and not self.methods_to_server
        assert self.pair.server.channels == self.pair.client.channels

    @precondition(lambda self: len(self.pair.client.channels) < 5)
    @rule()
    def open_channel(self) -> None:
        self.pair.client.open_channel()

    @rule(data=st.data(), size=st.integers(0, 10_000))
    def publish(self, data: st.DataObject, size: int) -> None:
        open_ = self._open()
        if not open_:
            return
        ch = data.draw(st.sampled_from(open_))
        body = bytes([size % 251]) * size
        self.pair.client.send_content(
            ch, m.BasicPublish(routing_key="q"), BasicProperties(priority=1), body
        )
        self.to_server.append((ch, body))

    @rule(data=st.data(), size=st.integers(0, 10_000))
    def deliver(self, data: st.DataObject, size: int) -> None:
        open_ = self._open()
        if not open_:
            return
        ch = data.draw(st.sampled_from(open_))
        body = bytes([size % 13]) * size
        self.pair.server.send_content(
            ch, m.BasicDeliver(consumer_tag="c", delivery_tag=1), b"\x00\x00", body
        )
        self.to_client.append((ch, body))

    @rule(data=st.data())
    def method(self, data: st.DataObject) -> None:
        open_ = self._open()
        if not open_:
            return
        ch = data.draw(st.sampled_from(open_))
        self.pair.client.send_method(
            ch, m.BasicAck(delivery_tag=data.draw(st.integers(0, 2**64 - 1)))
        )
        self.methods_to_server.append(ch)

    @rule(data=st.data(), by_server=st.booleans())
    def close_channel(self, data: st.DataObject, by_server: bool) -> None:
        open_ = self._open()
        if not open_:
            return
        ch = data.draw(st.sampled_from(open_))
        # the closing side drops what the other sent on the channel and has not yet arrived
        if by_server:
            self.pair.server.close_channel(ch, 404, "NOT_FOUND - no queue 'q' in vhost '/'")
            self.to_server = [x for x in self.to_server if x[0] != ch]
            self.methods_to_server = [x for x in self.methods_to_server if x != ch]
        else:
            self.pair.client.close_channel(ch)
            self.to_client = [x for x in self.to_client if x[0] != ch]

    @invariant()
    def healthy(self) -> None:
        assert self.pair.server.state is ConnectionState.OPEN
        assert self.pair.client.state is ConnectionState.OPEN
        assert not [e for e in self.events if isinstance(e, ConnectionFailed)]


PairMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestPair = PairMachine.TestCase
