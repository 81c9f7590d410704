"""The single-frame transfer encoder writes what the general frame encoder writes."""

from __future__ import annotations

import itertools

from amqp10.transport.framing import encode_frame, encode_transfer_frame
from amqp10.types import Transfer


def test_encode_transfer_frame_matches_encode_frame() -> None:
    for handle, did, tag, fmt, settled, payload in itertools.product(
        (0, 1, 255, 256, 0xFFFFFFFF),
        (0, 7, 255, 256, 0xFFFFFFFF),
        (b"", b"0", b"12345", b"t" * 32),
        (0, 9, 0x80013700),
        (False, True),
        (b"", b"abc", bytes(300)),
    ):
        fast, slow = bytearray(b"prefix"), bytearray(b"prefix")
        n1 = encode_transfer_frame(fast, 7, handle, did, tag, fmt, settled, payload)
        t = Transfer(
            handle=handle,
            delivery_id=did,
            delivery_tag=tag,
            message_format=fmt,
            settled=settled,
            more=False,
        )
        n2 = encode_frame(slow, 7, t, payload)
        assert (fast, n1) == (slow, n2)
