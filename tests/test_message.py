"""The Part 3 message model: round trips, section order, lazy decoding, and Proton."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp10.message import KEEP, LazyMessage, Message
from amqp10.types import (
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Array,
    Composite,
    Data,
    DecodeError,
    DeliveryAnnotations,
    Described,
    EncodeError,
    Footer,
    Header,
    MessageAnnotations,
    Properties,
    Transfer,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    decode_at,
    encode,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

# ======================================================================================
# Helpers
# ======================================================================================


def canon(v: Any) -> Any:
    """A type-exact canonical form, so that ``1 == True == ulong(1)`` do not pass for equal.

    Type names are shared by our exact types and Proton's, so the same form compares
    values across the two implementations.
    """
    if isinstance(v, Message):
        return ("Message", v.body_type, *(canon(getattr(v, a)) for a in _MESSAGE_ATTRS))
    if isinstance(v, Composite):
        return (type(v).__name__, tuple(canon(getattr(v, f.attr)) for f in v.FIELDS))
    if isinstance(v, (bytes, bytearray, memoryview)) and not isinstance(
        v, (decimal128, proton.decimal128)
    ):
        return ("bytes", bytes(v))
    if isinstance(v, (list, tuple)):
        return ("list", tuple(canon(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((canon(k), canon(x)) for k, x in v.items()))
    if isinstance(v, (Described, proton.Described)):
        return ("Described", canon(v.descriptor), canon(v.value))
    if isinstance(v, Array):
        return ("Array", canon(v.descriptor), tuple(canon(x) for x in v.elements))
    return (type(v).__name__, v)


_MESSAGE_ATTRS = (
    "header",
    "delivery_annotations",
    "message_annotations",
    "properties",
    "application_properties",
    "body",
    "footer",
)


def sections(data: bytes) -> list[Any]:
    """Decode a run of sections one by one (independently of amqp10.message)."""
    out, pos = [], 0
    while pos < len(data):
        v, pos = decode_at(data, pos)
        out.append(v)
    return out


def enc(*values: Any) -> bytes:
    return b"".join(encode(v) for v in values)


# ======================================================================================
# Strategies
# ======================================================================================

longs = st.integers(-(2**63), 2**63 - 1)
symbols = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12).map(symbol)
texts = st.text(st.characters(codec="utf-8"), max_size=16)
ulongs = st.integers(0, 2**64 - 1).map(ulong)
uints = st.integers(0, 2**32 - 1).map(uint)
timestamps = longs.map(timestamp)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    longs,
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(float32),
    texts,
    st.binary(max_size=16),
    symbols,
    st.uuids(),
    ulongs,
    uints,
    st.integers(0, 0xFF).map(ubyte),
    st.integers(0, 0xFFFF).map(ushort),
    st.integers(-128, 127).map(byte),
    st.integers(-(2**15), 2**15 - 1).map(short),
    st.integers(-(2**31), 2**31 - 1).map(int32),
    timestamps,
    st.characters(codec="utf-8").map(char),
    st.integers(0, 2**32 - 1).map(decimal32),
    st.integers(0, 2**64 - 1).map(decimal64),
    st.binary(min_size=16, max_size=16).map(decimal128),
)
map_keys = st.one_of(texts, symbols, longs, ulongs)


def compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(map_keys, children, max_size=4),
        st.builds(Described, symbols, children),
        st.builds(lambda xs: Array(uint, xs), st.lists(uints, max_size=4)),
    )


values = st.recursive(scalars, compound, max_leaves=12)
annotation_maps = st.dictionaries(st.one_of(symbols, ulongs), values, max_size=4)
simple_values = st.one_of(
    st.none(),
    st.booleans(),
    longs,
    st.floats(allow_nan=False),
    texts,
    st.binary(max_size=8),
    symbols,
    st.uuids(),
    ulongs,
    uints,
    timestamps,
)
application_properties = st.dictionaries(texts, simple_values, max_size=5)
message_ids = st.one_of(ulongs, st.uuids(), st.binary(max_size=16), texts)


def optional(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), s)


headers = st.builds(
    Header,
    durable=optional(st.booleans()),
    priority=optional(st.integers(0, 255).map(ubyte)),
    ttl=optional(uints),
    first_acquirer=optional(st.booleans()),
    delivery_count=optional(uints),
)
properties = st.builds(
    Properties,
    message_id=optional(message_ids),
    user_id=optional(st.binary(max_size=8)),
    to=optional(texts),
    subject=optional(texts),
    reply_to=optional(texts),
    correlation_id=optional(message_ids),
    content_type=optional(symbols),
    content_encoding=optional(symbols),
    absolute_expiry_time=optional(timestamps),
    creation_time=optional(timestamps),
    group_id=optional(texts),
    group_sequence=optional(uints),
    reply_to_group_id=optional(texts),
)
bodies = st.one_of(
    st.tuples(st.just("value"), values),
    st.tuples(st.just("data"), st.lists(st.binary(max_size=32), min_size=1, max_size=4)),
    st.tuples(st.just("sequence"), st.lists(st.lists(values, max_size=4), min_size=1, max_size=3)),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    body_type, body = draw(bodies)
    return Message(
        body,
        body_type=body_type,
        header=draw(optional(headers)),
        delivery_annotations=draw(optional(annotation_maps)),
        message_annotations=draw(optional(annotation_maps)),
        properties=draw(optional(properties)),
        application_properties=draw(optional(application_properties)),
        footer=draw(optional(annotation_maps)),
    )


# ======================================================================================
# Round trips
# ======================================================================================


@given(messages())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip_every_section_and_body_kind(m: Message) -> None:
    data = m.encode()
    back = Message.decode(data)
    assert canon(back) == canon(m)
    assert back == m
    assert Message.decode(memoryview(data)) == back
    assert back.encode() == data


@given(messages())
@settings(max_examples=100, deadline=None)
def test_sections_are_written_in_the_spec_order(m: Message) -> None:
    codes = [_code(s) for s in sections(m.encode())]
    assert codes == sorted(codes)
    expected = {
        0x70: m.header is not None,
        0x71: m.delivery_annotations is not None,
        0x72: m.message_annotations is not None,
        0x73: m.properties is not None,
        0x74: m.application_properties is not None,
        0x78: m.footer is not None,
    }
    assert {c for c in codes if c in expected} == {c for c, present in expected.items() if present}
    body_codes = [c for c in codes if c in (0x75, 0x76, 0x77)]
    n = len(m.body) if m.body_type != "value" else 1
    kind = {"value": 0x77, "data": 0x75, "sequence": 0x76}[m.body_type]
    assert body_codes == [kind] * n


def _code(section: Any) -> int:
    return {
        Header: 0x70,
        DeliveryAnnotations: 0x71,
        MessageAnnotations: 0x72,
        Properties: 0x73,
        ApplicationProperties: 0x74,
        Data: 0x75,
        AmqpSequence: 0x76,
        AmqpValue: 0x77,
        Footer: 0x78,
    }[type(section)]


def test_annotation_keys_travel_as_symbols() -> None:
    m = Message(
        1,
        delivery_annotations={"d": 1},
        message_annotations={"x-opt-a": 2, ulong(7): 3},
        footer={"f": 4},
    )
    da, ma, _, ft = sections(m.encode())
    assert [type(k) for k in da.value] == [symbol]
    assert [type(k) for k in ma.value] == [symbol, ulong]
    assert [type(k) for k in ft.value] == [symbol]


def test_body_none_is_sent_as_amqp_value_null_and_no_body_decodes_to_none() -> None:
    assert Message().encode() == b"\x00\x53\x77\x40"
    assert Message.decode(b"\x00\x53\x77\x40").body is None
    m = Message.decode(encode(Properties(subject="s")))  # no body section: lenient
    assert m.body is None and m.body_type == "value" and m.subject == "s"
    assert Message.decode(b"") == Message()


def test_bytes_body_is_an_amqp_value_unless_asked_for_data() -> None:
    assert sections(Message(b"ab").encode()) == [AmqpValue(b"ab")]
    m = Message(b"ab", body_type="data")
    assert m.body == [b"ab"]
    assert sections(m.encode()) == [Data(b"ab")]
    m = Message([b"a", b"b"], body_type="data")
    assert sections(m.encode()) == [Data(b"a"), Data(b"b")]
    m = Message([[1], ["x"]], body_type="sequence")
    assert sections(m.encode()) == [AmqpSequence([1]), AmqpSequence(["x"])]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"body": b"x", "body_type": "sequence"}, "sequence body"),
        ({"body": [], "body_type": "data"}, "data body"),
        ({"body": ["text"], "body_type": "data"}, "data section holds bytes"),
        ({"body": [], "body_type": "sequence"}, "sequence body"),
        ({"body": [1], "body_type": "sequence"}, "amqp-sequence section holds a list"),
        ({"application_properties": {symbol("k"): 1}}, "keys must be str"),
        ({"application_properties": {1: 1}}, "keys must be str"),
        ({"body": object()}, "no AMQP encoding"),
    ],
)
def test_encode_errors_leave_the_buffer_as_it_was(kwargs: dict[str, Any], match: str) -> None:
    m = Message(**kwargs)
    buf = bytearray(b"prefix")
    with pytest.raises(EncodeError, match=match):
        m.encode_into(buf)
    assert buf == b"prefix"


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="body_type"):
        Message(1, body_type="blob")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Message(1, colour="red")


def test_a_subclass_property_is_a_keyword_of_the_constructor() -> None:
    if getattr(Message, "__slots__", None) is None:  # the compiled build: its Message is native

        class Plain(Message):
            pass

        with pytest.raises(TypeError, match="interpreted classes cannot inherit from compiled"):
            Plain(1)  # (README: its classes cannot be subclassed by interpreted code)
        return

    class Coloured(Message):
        __slots__ = ("_colour",)

        @property
        def colour(self) -> str:
            return self._colour

        @colour.setter
        def colour(self, value: str) -> None:
            self._colour = value

    m = Coloured(1, colour="red", subject="s")
    assert (m.colour, m.subject) == ("red", "s")
    with pytest.raises(TypeError, match="unexpected keyword argument 'shade'"):
        Coloured(1, shade="dark")


# ======================================================================================
# Accessors
# ======================================================================================


def test_accessors_create_sections_and_map_onto_fields() -> None:
    m = Message("hi")
    assert m.header is None and m.properties is None
    assert (m.durable, m.priority, m.ttl, m.first_acquirer, m.delivery_count) == (
        False,
        4,
        None,
        False,
        0,
    )
    assert (m.id, m.subject, m.creation_time, m.expiry_time) == (None, None, None, None)
    m.durable = True
    m.priority = 7
    m.ttl = 1.5  # seconds, as in Proton
    m.delivery_count = 2
    m.first_acquirer = True
    assert canon(m.header) == canon(
        Header(durable=True, priority=ubyte(7), ttl=1500, first_acquirer=True, delivery_count=2)
    )
    assert m.ttl == 1.5
    m.id = 42
    assert type(m.id) is ulong and m.id == 42
    m.correlation_id = uuid.UUID(int=1)
    m.to = "queue"
    assert m.address == "queue"
    m.reply_to = "replies"
    m.subject = "s"
    m.user_id = b"me"
    m.content_type = "text/plain"
    m.content_encoding = "gzip"
    assert type(m.content_type) is symbol
    m.creation_time = 12.5
    m.expiry_time = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    m.group_id = "g"
    m.group_sequence = 3
    m.reply_to_group_id = "rg"
    p = m.properties
    assert p is not None
    assert p.creation_time == 12500 and type(p.creation_time) is timestamp
    assert m.expiry_time == dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp()
    back = Message.decode(m.encode())
    assert back == m
    for name in (
        "durable",
        "priority",
        "ttl",
        "first_acquirer",
        "delivery_count",
        "id",
        "correlation_id",
        "to",
        "reply_to",
        "subject",
        "user_id",
        "content_type",
        "content_encoding",
        "creation_time",
        "expiry_time",
        "group_id",
        "group_sequence",
        "reply_to_group_id",
    ):
        assert getattr(back, name) == getattr(m, name), name
    m.ttl = None
    assert m.ttl is None
    with pytest.raises(TypeError, match="message-id"):
        m.id = 1.5


def test_keyword_accessors_in_the_constructor() -> None:
    m = Message({"a": 1}, id="x", subject="s", durable=True, ttl=2)
    assert m.properties == Properties(message_id="x", subject="s")
    assert m.header == Header(durable=True, ttl=2000)


# ======================================================================================
# Malformed messages
# ======================================================================================

H = Header(durable=True)
DA = DeliveryAnnotations({symbol("d"): 1})
MA = MessageAnnotations({symbol("m"): 1})
P = Properties(message_id="id")
AP = ApplicationProperties({"k": "v"})
V = AmqpValue("body")
D = Data(b"data")
S = AmqpSequence([1])
F = Footer({symbol("f"): 1})

ORDER_ERRORS = [
    ((P, H, V), "header section out of order"),
    ((MA, DA, V), "delivery-annotations section out of order"),
    ((P, MA, V), "message-annotations section out of order"),
    ((AP, P, V), "properties section out of order"),
    ((V, AP), "application-properties section out of order"),
    ((V, P), "properties section out of order"),
    ((V, F, D), "data section out of order"),
    ((F, V), "amqp-value section out of order"),
    ((H, H, V), "more than one header"),
    ((DA, DA, V), "more than one delivery-annotations"),
    ((MA, MA, V), "more than one message-annotations"),
    ((P, P, V), "more than one properties"),
    ((AP, AP, V), "more than one application-properties"),
    ((V, V), "more than one amqp-value"),
    ((V, F, F), "more than one footer"),
    ((D, S), "mixes data and amqp-sequence"),
    ((S, D), "mixes amqp-sequence and data"),
    ((D, V), "mixes data and amqp-value"),
    ((V, D), "mixes amqp-value and data"),
    ((S, S, V), "mixes amqp-sequence and amqp-value"),
    ((D, D, S), "mixes data and amqp-sequence"),
]


@pytest.mark.parametrize("decoder", [Message.decode, LazyMessage], ids=["eager", "lazy"])
@pytest.mark.parametrize(("secs", "match"), ORDER_ERRORS)
def test_order_violations_and_duplicates(decoder: Any, secs: tuple[Any, ...], match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decoder(enc(*secs))


@pytest.mark.parametrize("decoder", [Message.decode, LazyMessage], ids=["eager", "lazy"])
@pytest.mark.parametrize(
    ("data", "match"),
    [
        (enc(Transfer(handle=0), V), "not a message section"),
        (enc(Described(symbol("x:unknown"), 1)), "not a message section"),
        (enc(Described(ulong(0x7F), 1)), "not a message section"),
        (enc(5), "described message section|not a message section"),
        (enc(H, V)[:-1], "truncated"),
        (enc(H, V) + b"\x00", "truncated"),
        (enc(H, V) + b"\x00\x53", "truncated"),
        (enc(Described(ulong(0x75), "not binary")), "binary"),
        (enc(Described(ulong(0x76), 5)), "list"),
    ],
)
def test_malformed_messages(decoder: Any, data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decoder(data)


@pytest.mark.parametrize(
    "data",
    [
        enc(Described(ulong(0x70), {"not": "a list"}), V),
        enc(Described(ulong(0x73), 5), V),
        enc(Described(ulong(0x74), [1, 2]), V),
        enc(Described(ulong(0x72), "x"), V),
    ],
)
def test_section_of_the_wrong_kind(data: bytes) -> None:
    with pytest.raises(DecodeError):
        Message.decode(data)
    lazy = LazyMessage(data)  # framing is fine; the content is checked when decoded
    with pytest.raises(DecodeError):
        _ = (lazy.header, lazy.properties, lazy.application_properties, lazy.message_annotations)


def test_symbolic_and_long_descriptors_are_accepted() -> None:
    long_header = b"\x00\x80" + (0x70).to_bytes(8, "big") + encode([True])
    sym_value = encode(Described(symbol("amqp:amqp-value:*"), "v"))
    sym_data = encode(Described(symbol("amqp:data:binary"), b"d"))
    data = long_header + encode(P) + sym_value
    for m in (Message.decode(data), LazyMessage(data).message()):
        assert m.durable is True and m.id == "id" and m.body == "v"
    lazy = LazyMessage(data)
    assert lazy.durable and lazy.body == "v"
    assert Message.decode(sym_data + sym_data).body == [b"d", b"d"]
    assert LazyMessage(sym_data + sym_data).body_type == "data"


# ======================================================================================
# Lazy decoding and rewriting
# ======================================================================================


@given(messages())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_lazy_sections_equal_the_eager_ones(m: Message) -> None:
    data = m.encode()
    lazy = LazyMessage(data)
    assert lazy.raw == data and len(lazy) == len(data)
    assert lazy.body_type == m.body_type
    for a in _MESSAGE_ATTRS:
        assert canon(getattr(lazy, a)) == canon(getattr(m, a)), a
    assert canon(lazy.message()) == canon(m)
    assert lazy.durable == m.durable
    assert lazy.priority == m.priority
    assert lazy.delivery_count == m.delivery_count


@given(messages(), st.integers(0, 2**32 - 2), st.booleans())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_header_rewrite_keeps_every_other_byte(m: Message, count: int, first: bool) -> None:
    data = m.encode()
    lazy = LazyMessage(data)
    hspan = lazy.span("header")
    after_header = data[hspan[1] :] if hspan else data
    new = lazy.with_header(delivery_count=count, first_acquirer=first)
    relazy = LazyMessage(new)
    h = relazy.header
    assert h is not None
    assert (h.delivery_count, h.first_acquirer) == (count, first)
    old = m.header or Header()
    assert (h.durable, h.priority, h.ttl) == (old.durable, old.priority, old.ttl)
    assert new.endswith(after_header)
    assert new[: len(new) - len(after_header)] == encode(h)
    assert bytes(relazy.bare) == bytes(lazy.bare)
    back = relazy.message()
    back.header = m.header
    assert canon(back) == canon(m)


@given(messages(), annotation_maps)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_annotation_rewrite_keeps_the_bare_message(m: Message, added: dict[Any, Any]) -> None:
    lazy = LazyMessage(m.encode())
    new = LazyMessage(lazy.with_annotations(added))
    assert new.message_annotations == {**(m.message_annotations or {}), **added}
    assert bytes(new.bare) == bytes(lazy.bare)
    assert canon(new.header) == canon(m.header)
    assert canon(new.delivery_annotations) == canon(m.delivery_annotations)
    assert canon(new.footer) == canon(m.footer)
    body_span, new_body_span = lazy.span("body"), new.span("body")
    assert body_span and new_body_span
    assert lazy.raw[body_span[0] : body_span[1]] == new.raw[new_body_span[0] : new_body_span[1]]


def test_rewrite_inserts_and_removes_sections_in_place() -> None:
    data = enc(DA, P, AP, D, D, F)
    lazy = LazyMessage(data)
    assert lazy.span("header") is None and lazy.span("body") == (
        len(enc(DA, P, AP)),
        len(enc(DA, P, AP, D, D)),
    )
    assert lazy.with_header(durable=True) == enc(H, DA, P, AP, D, D, F)
    assert lazy.rewrite(message_annotations={"m": 1}) == enc(DA, MA, P, AP, D, D, F)
    assert lazy.rewrite(delivery_annotations=None) == enc(P, AP, D, D, F)
    assert lazy.rewrite(footer=None, header=H) == enc(H, DA, P, AP, D, D)
    assert lazy.rewrite(header=KEEP) == data
    assert lazy.with_annotations(delivery_annotations={"e": 2}) == enc(
        DeliveryAnnotations({symbol("d"): 1, symbol("e"): 2}), P, AP, D, D, F
    )
    assert lazy.with_annotations({"m": 1}, {"e": 2}, replace=True) == enc(
        DeliveryAnnotations({symbol("e"): 2}), MA, P, AP, D, D, F
    )
    assert bytes(lazy.bare) == enc(P, AP, D, D)
    assert LazyMessage(b"").body_type is None and bytes(LazyMessage(b"").bare) == b""
    assert LazyMessage(b"").with_header(priority=ubyte(1)) == enc(Header(priority=ubyte(1)))
    with pytest.raises(TypeError, match="not header fields: colour"):
        lazy.with_header(colour=1)
    with pytest.raises(ValueError, match="unknown section"):
        lazy.span("bogus")


def test_lazy_never_decodes_the_body() -> None:
    # A body that would not decode (a string that is not UTF-8, a map with an odd count)
    # does not stop a broker from reading the header and rewriting it.
    bad_string = b"\x00\x53\x77\xa1\x02\xff\xfe"
    bad_map = b"\x00\x53\x77\xc1\x03\x01\x40\x40"
    for body in (bad_string, bad_map):
        data = enc(Header(durable=True, priority=ubyte(9)), P) + body
        with pytest.raises(DecodeError):
            Message.decode(data)
        lazy = LazyMessage(data)
        assert lazy.durable and lazy.priority == 9
        assert lazy.properties == P
        new = lazy.with_header(delivery_count=1)
        assert new.endswith(enc(P) + body)
        with pytest.raises(DecodeError):
            _ = lazy.body


def test_lazy_accepts_memoryview_and_copies_it() -> None:
    buf = bytearray(enc(H, P, V))
    lazy = LazyMessage(memoryview(buf))
    buf[:] = b"\x00" * len(buf)
    assert lazy.message() == Message("body", header=H, properties=P)


# ======================================================================================
# Cross-implementation: Proton
# ======================================================================================

FULL_BODY = {
    "s": "x",
    "i": 5,
    "f": 1.5,
    "b": True,
    "n": None,
    "bin": b"\x00\x01",
    "u": uuid.UUID(int=7),
    "sym": symbol("a"),
    "ul": ulong(7),
    "ui": uint(3),
    "ts": timestamp(5),
    "l": [1, "a"],
    "m": {"k": "v"},
}


def full_message(body: Any = None, body_type: Any = "value") -> Message:
    m = Message(body if body is not None else FULL_BODY, body_type=body_type)
    m.durable = True
    m.priority = 6
    m.ttl = 2.5
    m.first_acquirer = True
    m.delivery_count = 3
    m.delivery_annotations = {symbol("x-opt-d"): "d", ulong(9): 1}
    m.message_annotations = {symbol("x-opt-m"): 2}
    m.id = "msg-1"
    m.user_id = b"user"
    m.to = "queue"
    m.subject = "subj"
    m.reply_to = "replies"
    m.correlation_id = ulong(99)
    m.content_type = "application/json"
    m.content_encoding = "utf-8"
    m.expiry_time = 2_000_000_000.5
    m.creation_time = 1_700_000_000.25
    m.group_id = "grp"
    m.group_sequence = 4
    m.reply_to_group_id = "rgrp"
    m.application_properties = {"k": "v", "n": 1, "b": False, "f": 0.5, "ul": ulong(3)}
    return m


PROTON_ATTRS = (
    "durable",
    "priority",
    "ttl",
    "first_acquirer",
    "delivery_count",
    "id",
    "user_id",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "expiry_time",
    "creation_time",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
)


def assert_same_as_proton(ours: Message, pm: Any) -> None:
    for a in PROTON_ATTRS:
        theirs = getattr(pm, a)
        mine = getattr(ours, a)
        if isinstance(theirs, memoryview):
            theirs = bytes(theirs)
        assert mine == theirs, a
    assert ours.to == pm.address
    assert canon(ours.delivery_annotations) == canon(pm.instructions)
    assert canon(ours.message_annotations) == canon(pm.annotations)
    assert canon(ours.application_properties) == canon(pm.properties)


ID_VALUES = ["text", b"\x01\x02", uuid.UUID(int=12345), ulong(2**64 - 1), 7]


@pytest.mark.parametrize(
    ("body", "body_type", "proton_body"),
    [
        (FULL_BODY, "value", FULL_BODY),
        (b"raw", "value", b"raw"),
        ("text", "value", "text"),
        ([1, "two", None], "value", [1, "two", None]),
        (None, "value", None),
        ([b"payload"], "data", b"payload"),
        ([[1, "a", [2]]], "sequence", [1, "a", [2]]),
    ],
)
def test_ours_decodes_in_proton(body: Any, body_type: Any, proton_body: Any) -> None:
    m = full_message(body, body_type)
    if body is None:
        m.body = None
    pm = proton.Message()
    pm.decode(m.encode())
    assert_same_as_proton(m, pm)
    assert canon(pm.body) == canon(proton_body)
    assert pm.inferred == (body_type != "value")


@pytest.mark.parametrize("value", ID_VALUES)
def test_message_ids_cross_to_proton(value: Any) -> None:
    m = Message("x", id=value, correlation_id=value)
    pm = proton.Message()
    pm.decode(m.encode())
    theirs = bytes(pm.id) if isinstance(pm.id, memoryview) else pm.id
    if isinstance(value, int):  # Proton reads a ulong id back as a plain int
        assert type(m.id) is ulong and theirs == m.id
        assert type(sections(m.encode())[0].message_id) is ulong
    else:
        assert canon(theirs) == canon(m.id)
    pm = proton.Message("x", id=value, correlation_id=value)
    back = Message.decode(pm.encode())
    assert canon(back.id) == canon(back.correlation_id) == canon(m.id)


def test_footer_is_ignored_by_proton() -> None:
    m = full_message()
    m.footer = {"x-hash": b"\x00" * 4}
    pm = proton.Message()
    pm.decode(m.encode())
    assert_same_as_proton(m, pm)


def proton_full(body: Any, inferred: bool = False) -> Any:
    return proton.Message(
        body,
        inferred=inferred,
        durable=True,
        priority=6,
        ttl=2.5,
        first_acquirer=True,
        delivery_count=3,
        instructions={"x-opt-d": "d", proton.ulong(9): 1},
        annotations={"x-opt-m": 2},
        id="msg-1",
        user_id=b"user",
        address="queue",
        subject="subj",
        reply_to="replies",
        correlation_id=proton.ulong(99),
        content_type="application/json",
        content_encoding="utf-8",
        expiry_time=2_000_000_000.5,
        creation_time=1_700_000_000.25,
        group_id="grp",
        group_sequence=4,
        reply_to_group_id="rgrp",
        properties={"k": "v", "n": 1, "b": False, "f": 0.5, "ul": proton.ulong(3)},
    )


@pytest.mark.parametrize(
    ("body", "inferred", "ours_body", "body_type"),
    [
        (FULL_BODY, False, FULL_BODY, "value"),
        (b"raw", False, b"raw", "value"),
        (b"raw", True, [b"raw"], "data"),
        ([1, "a"], False, [1, "a"], "value"),
        ([1, "a"], True, [[1, "a"]], "sequence"),
        (None, False, None, "value"),
    ],
)
def test_proton_decodes_here(body: Any, inferred: bool, ours_body: Any, body_type: str) -> None:
    pm = proton_full(_to_proton(body), inferred)
    data = pm.encode()
    m = Message.decode(data)
    assert_same_as_proton(m, pm)
    assert m.body_type == body_type
    assert canon(m.body) == canon(ours_body)
    lazy = LazyMessage(data)
    assert lazy.durable and lazy.priority == 6 and lazy.delivery_count == 3
    # A broker's redelivery of a Proton message still reads back in Proton.
    pm2 = proton.Message()
    pm2.decode(lazy.with_header(delivery_count=4, first_acquirer=False))
    assert (pm2.delivery_count, pm2.first_acquirer, pm2.ttl) == (4, False, 2.5)
    assert pm2.id == "msg-1" and canon(pm2.properties) == canon(pm.properties)
    pm3 = proton.Message()
    pm3.decode(lazy.with_annotations({"x-opt-added": 1}))
    assert pm3.annotations == {symbol("x-opt-m"): 2, symbol("x-opt-added"): 1}


# --- property-based, both directions ----------------------------------------------------

_PROTON_TYPES = {
    ulong: proton.ulong,
    uint: proton.uint,
    ushort: proton.ushort,
    ubyte: proton.ubyte,
    byte: proton.byte,
    short: proton.short,
    int32: proton.int32,
    float32: proton.float32,
    symbol: proton.symbol,
    char: proton.char,
    timestamp: proton.timestamp,
    decimal32: proton.decimal32,
    decimal64: proton.decimal64,
    decimal128: proton.decimal128,
}


def _to_proton(v: Any) -> Any:
    """The same value built from Proton's exact types."""
    t = _PROTON_TYPES.get(type(v))
    if t is not None:
        return t(v)
    if isinstance(v, list):
        return [_to_proton(x) for x in v]
    if isinstance(v, dict):
        return {_to_proton(k): _to_proton(x) for k, x in v.items()}
    if isinstance(v, Described):
        return proton.Described(_to_proton(v.descriptor), _to_proton(v.value))
    return v


def _proton_can_hold(v: Any) -> bool:
    """Proton's binding has no plain arrays, and reads a described value whose value is
    itself described (valid AMQP) as null."""
    if isinstance(v, Array):
        return False
    if isinstance(v, list):
        return all(_proton_can_hold(x) for x in v)
    if isinstance(v, dict):
        return all(_proton_can_hold(k) and _proton_can_hold(x) for k, x in v.items())
    if isinstance(v, Described):
        return not isinstance(v.value, Described) and _proton_can_hold(v.value)
    return True


proton_values = values.filter(_proton_can_hold)
# Proton reads the string fields of properties as C strings: they end at a NUL.
proton_properties = properties.filter(
    lambda p: not any(isinstance(v, str) and "\x00" in v for v in p._values())
)


@given(
    body=proton_values,
    props=proton_properties,
    app=application_properties,
    ma=optional(st.dictionaries(symbols, proton_values, max_size=3)),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_based_both_ways_with_proton(
    body: Any, props: Properties, app: dict[str, Any], ma: dict[Any, Any] | None
) -> None:
    m = Message(body, properties=props, application_properties=app, message_annotations=ma)
    pm = proton.Message()
    pm.decode(m.encode())
    assert canon(pm.body) == canon(body)
    assert canon(pm.properties) == canon(app)
    assert canon(pm.annotations) == canon(ma)
    assert (pm.subject, pm.group_id, pm.reply_to_group_id) == (
        props.subject,
        props.group_id,
        props.reply_to_group_id,
    )
    # ...and back: Proton re-encodes what it decoded, we decode that.
    back = Message.decode(pm.encode())
    assert canon(back.body) == canon(body)
    assert canon(back.application_properties) == canon(pm.properties)
    assert canon(back.message_annotations) == canon(ma)
    # Proton built from its own types encodes to what we decode as the original.
    pm2 = proton.Message(_to_proton(body), properties=_to_proton(app), annotations=_to_proton(ma))
    assert canon(Message.decode(pm2.encode()).body) == canon(body)
