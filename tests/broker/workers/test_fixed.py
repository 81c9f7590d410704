"""The internal link's fixed-width numbers (amqp10/broker/workers/fixed.py): librt's and the
``struct`` fallback a pure install uses write the same bytes, read the same numbers and
raise the same errors; and the link's records are the same bytes with either."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.core import QueuedMessage
from amqp10.broker.workers import fixed, link

FALLBACK = fixed.FALLBACK
_WIDTHS = {"i32": (32, "<i"), "i64": (64, "<q")}


def _librt() -> Any:
    import librt.strings  # (a dependency of the package: missing is a failure, not a skip)

    return librt.strings


def _write(impl: dict[str, Any] | Any, name: str, value: Any) -> bytes:
    get = impl.get if isinstance(impl, dict) else lambda n: getattr(impl, n)
    w = get("BytesWriter")()
    w.append(7)
    w.write(b"ab")
    get(name)(w, value)
    return bytes(w.getvalue())


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(sorted(_WIDTHS)), data=st.data())
def test_the_fallback_writes_and_reads_integers_as_librt_does(kind: str, data: Any) -> None:
    bits, fmt = _WIDTHS[kind]
    value = data.draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
    fallback = _write(FALLBACK, f"write_{kind}_le", value)
    assert fallback == b"\x07ab" + struct.pack(fmt, value)
    assert FALLBACK[f"read_{kind}_le"](fallback, 3) == value
    librt = _librt()
    assert _write(librt, f"write_{kind}_le", value) == fallback
    assert getattr(librt, f"read_{kind}_le")(fallback, 3) == value


@settings(max_examples=100, deadline=None)
@given(value=st.floats(allow_nan=False))
def test_the_fallback_writes_and_reads_doubles_as_librt_does(value: float) -> None:
    fallback = _write(FALLBACK, "write_f64_le", value)
    assert fallback == b"\x07ab" + struct.pack("<d", value)
    assert FALLBACK["read_f64_le"](fallback, 3) == value
    librt = _librt()
    assert _write(librt, "write_f64_le", value) == fallback
    assert librt.read_f64_le(fallback, 3) == value


@pytest.mark.parametrize("impl", ["fallback", "librt"])
def test_a_read_past_the_end_and_a_number_out_of_range_raise_the_same_errors(impl: str) -> None:
    get = FALLBACK.get if impl == "fallback" else (lambda n: getattr(_librt(), n))
    with pytest.raises(IndexError):
        get("read_i32_le")(b"abc", 0)
    with pytest.raises(IndexError):
        get("read_i64_le")(b"12345678", 1)
    with pytest.raises(IndexError):
        get("read_f64_le")(b"", 0)
    for name, value in (("write_i32_le", 2**31), ("write_i64_le", -(2**63) - 1)):
        with pytest.raises(ValueError):
            get(name)(get("BytesWriter")(), value)


_MESSAGES = [
    QueuedMessage(b"plain", priority=4, seq=7, arrival=1.5),
    QueuedMessage(b"", durable=True, message_id="m-1", delivery_count=2**32 - 1, seq=2**64 - 1),
    QueuedMessage(b"expiring", expiry=2e9, seq=2**63, arrival=3.25),
]


def test_records_are_the_same_bytes_with_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    if link.__file__.endswith(".so"):
        pytest.skip("the compiled module calls librt natively: its names cannot be replaced")
    grouped = QueuedMessage(b"g", seq=3)
    grouped.read_already("a-group", 12.5)
    msgs = [*_MESSAGES, grouped]
    batch = link.encode_batch([link.encode_record(m) for m in msgs])
    deliveries = link.encode_deliveries([1, 2**64 - 1, 0, 9], msgs)
    for name, impl in FALLBACK.items():
        monkeypatch.setattr(link, name, impl)
    assert link.encode_batch([link.encode_record(m) for m in msgs]) == batch
    assert link.encode_deliveries([1, 2**64 - 1, 0, 9], msgs) == deliveries
    back = link.decode_batch(batch, link.BATCH_FORMAT)
    assert [(m.data, m.seq, m.delivery_count, m.message_id, m.group, m.due) for m in back] == [
        (m.data, m.seq, m.delivery_count, m.message_id, m.group, m.due) for m in msgs
    ]
    refs = [ref for ref, _ in link.decode_deliveries(deliveries, link.DELIVERY_FORMAT)]
    assert refs == [1, 2**64 - 1, 0, 9]
    with pytest.raises(link.RecordError):
        link.decode_batch(batch[:-1], link.BATCH_FORMAT)


def test_the_record_layout_is_the_structs_it_was_written_with() -> None:
    """The records are the bytes ``struct`` made before the fixed-width writes (a stored
    record, link.py's ``_HEAD`` and ``_SHORT``, still reads back)."""
    assert (link._HEAD.size, link._SHORT.size) == (link._HEAD_SIZE, link._SHORT_SIZE)
    short = QueuedMessage(
        b"body", priority=3, message_id="id", delivery_count=2**32 - 1, seq=2**63 + 5, arrival=2.5
    )
    fmt = link._format_bytes(QueuedMessage.format)
    head = link._SHORT.pack(0x80 | 4, 3, 2, 2**32 - 1, 2**63 + 5, 2.5)
    assert link.encode_record(short) == head + fmt + b"id" + b"body"
    whole = QueuedMessage(b"b", priority=1, expiry=9.0, seq=4, arrival=1.0)
    whole.read_already("grp", 7.0)
    head = link._HEAD.pack(2 | 8 | 16, 1, 0, 3, 0, 4, 9.0, 1.0, 7.0)
    assert link.encode_record(whole) == head + fmt + b"grp" + b"b"
    record = link.encode_deliveries([2**64 - 2], [short])
    assert record[:12] == struct.pack("<IQ", len(record) - 12, 2**64 - 2)
    assert record[12:] == link.encode_record(short)


def test_a_message_id_past_a_signed_half_crosses_and_one_past_two_bytes_is_refused() -> None:
    long_id = "i" * 40_000  # (its length's top bit set: the head's first word past a signed int)
    msg = QueuedMessage(b"x", priority=0, message_id=long_id, seq=1)
    record = link.encode_record(msg)
    assert record[:4] == link._SHORT.pack(0x80 | 4, 0, 40_000, 0, 1, 0.0)[:4]
    assert link.decode_record(record).message_id == long_id
    with pytest.raises(ValueError):
        link.encode_record(QueuedMessage(b"x", message_id="i" * 70_000))
