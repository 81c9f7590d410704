"""The single-frame transfer and the accepted/released disposition encoders write what
the general frame encoder writes."""

from __future__ import annotations

import itertools

from amqp10.transport.framing import (
    FIELDLESS_OUTCOMES,
    encode_disposition_frame,
    encode_frame,
    encode_transfer_frame,
)
from amqp10.types import Accepted, Disposition, Released, Role, Transfer


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


def test_encode_disposition_frame_matches_encode_frame() -> None:
    assert set(FIELDLESS_OUTCOMES) == {Accepted, Released}
    for role, first, last, settled, state in itertools.product(
        (Role.SENDER, Role.RECEIVER),
        (0, 1, 255, 256, 0xFFFFFFFF),
        (None, 0, 2, 255, 70000),
        (False, True),
        (Accepted(), Released()),
    ):
        fast, slow = bytearray(b"prefix"), bytearray(b"prefix")
        n1 = encode_disposition_frame(fast, 3, role, first, last, settled, state)
        d = Disposition(role=bool(role), first=first, last=last, settled=settled, state=state)
        n2 = encode_frame(slow, 3, d)
        assert (fast, n1) == (slow, n2)
