"""The rewrites transfer of an internal link (``workers/link.py``): the new bytes of
messages a consumer of another worker changed while it held them, by consumer and the
owner's reference."""

from __future__ import annotations

import pytest

from amqp10.broker.workers.link import (
    CONTROL_FORMAT,
    REWRITE_FORMAT,
    RecordError,
    decode_rewrites,
    encode_rewrites,
)


def test_rewrites_carry_each_messages_bytes_by_consumer_and_reference() -> None:
    rewrites = [(7, 1, b"\x00Sp\xc0\x01\x00"), (7, 2, b""), (9, 2**40, b"x" * 70_000)]
    assert decode_rewrites(encode_rewrites(rewrites), REWRITE_FORMAT) == rewrites


@pytest.mark.parametrize("cut", [1, 8, 19, 21])
def test_rewrites_cut_short_do_not_decode(cut: int) -> None:
    payload = encode_rewrites([(1, 1, b"abc")])
    with pytest.raises(RecordError):
        decode_rewrites(payload[:-cut] if cut < len(payload) else payload[:1], REWRITE_FORMAT)


def test_a_transfer_that_is_not_rewrites_does_not_decode() -> None:
    with pytest.raises(RecordError):
        decode_rewrites(encode_rewrites([(1, 1, b"abc")]), CONTROL_FORMAT)
