"""The broker's per-message shortcuts agree with the general paths they bypass."""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.broker.amqp1.message import _parse_slow, _scan_sections, parse_transfer
from amqp10.broker.config import BrokerConfig, QueuePolicy
from amqp10.message import Message
from amqp10.types import DecodeError, Header, Properties, timestamp, ulong
from tests.broker.harness import Net


def _fields(m: Any) -> tuple[Any, ...]:
    return (m.data, m.priority, m.durable, m.expiry, m.message_id, m.delivery_count, m.arrival)


MESSAGES = [
    Message(body=b"x" * 100, body_type="data"),
    Message(body="hello"),
    Message(body=[b"a", b"b"], body_type="data"),
    Message(body=[[1, 2], [3]], body_type="sequence"),
    Message(body=None),
    Message(body={"k": 1}, durable=True, priority=7, ttl=5.0, id="m-1"),
    Message(body=1, header=Header(delivery_count=3, first_acquirer=False)),
    Message(
        body=1,
        properties=Properties(message_id=ulong(42), absolute_expiry_time=timestamp(2_000_000)),
    ),
    Message(
        body=1, id="only-id", application_properties={"a": 1}, message_annotations={"x-opt-a": 1}
    ),
    Message(body=1, delivery_annotations={"x-opt-d": 2}, footer={"f": 1}),
    Message(
        body=1, header=Header(), properties=Properties()
    ),  # empty (list0) sections, as Proton sends
]


@pytest.mark.parametrize("msg", MESSAGES, ids=range(len(MESSAGES)))
def test_routing_fields_match_the_general_path(msg: Message) -> None:
    raw = msg.encode()
    fast = parse_transfer(raw, 1000.0)  # need_ids: every field extracted
    slow = _parse_slow(raw, 1000.0)
    assert _fields(fast) == _fields(slow)


def test_proton_shaped_message_takes_the_fast_path() -> None:
    raw = b"\x00\x53\x70\x45\x00\x53\x73\x45\x00\x53\x75\xa0\x03abc"
    assert _scan_sections(raw) == (0, 4, -1)  # header, properties, no message annotations
    m = parse_transfer(raw, 1000.0)
    assert (m.durable, m.priority, m.expiry, m.message_id) == (False, 4, None, None)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x53\x75\xa0\x05abc",  # truncated data
        b"\x00\x53\x77\x40\x00\x53\x70\x45",  # header after the body
        b"\x00\x53\x77\x40\x00\x53\x77\x40",  # two amqp-value sections
        b"\x00\x53\x75\x45",  # a data section that is not binary
        b"\x00\x53\x99\x40",  # not a section
        b"\x00\x53\x70\xc0\x02\x01",  # truncated header list
    ],
)
def test_malformed_messages_are_refused_as_before(raw: bytes) -> None:
    assert _scan_sections(raw) is None
    with pytest.raises(DecodeError):
        parse_transfer(raw, 1000.0)


def test_message_ids_skipped_only_where_nothing_needs_them() -> None:
    net = Net(BrokerConfig(default_policy=QueuePolicy(durable=False)))
    c = net.client()
    s = c.sender("plain")
    c.send(s, Message(body=1, id="a"))
    q = net.broker.nodes["plain"]
    assert not q.needs_message_ids
    assert next(iter(q)).message_id is None  # neither deduplicated nor stored: not decoded
    net2 = Net(BrokerConfig(default_policy=QueuePolicy(durable=False, duplicate_window=10)))
    c2 = net2.client()
    s2 = c2.sender("dedup")
    c2.send(s2, Message(body=1, id="a"))
    c2.send(s2, Message(body=2, id="a"))
    assert net2.broker.nodes["dedup"].count == 1
