"""Composite types: round trips, exact encodings, mandatory fields, field types, defaults.

The strategies here are small on purpose: one per field type of the spec's
composites, enough to exercise every generated encoder and decoder.
"""

from __future__ import annotations

import ast
import inspect
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.types import (
    DEFAULT_LIMITS,
    Accepted,
    Array,
    Attach,
    Begin,
    Close,
    Composite,
    Coordinator,
    DecodeError,
    Described,
    Disposition,
    EncodeError,
    Error,
    ErrorCondition,
    Flow,
    Limits,
    Modified,
    Open,
    Rejected,
    Released,
    Role,
    SaslMechanisms,
    SaslOutcome,
    Source,
    Target,
    Transfer,
    decode,
    encode,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from amqp10.types.composite import (
    RAW_DECODERS,
    RESTRICTED,
    DescribedType,
    Field,
    composite_types,
    described_types,
    primitive_of,
)

COMPOSITES: list[type[Composite]] = composite_types()  # type: ignore[assignment]
U32 = 4294967295

# --- strategies --------------------------------------------------------------------------

ASCII = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=10)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
SYMBOLS = st.one_of(ASCII.map(symbol), ASCII)  # a str in a symbol field travels as one
BINARY = st.one_of(st.binary(max_size=12), st.binary(min_size=256, max_size=300))
SIMPLE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 63) - 1),
    TEXT,
    st.binary(max_size=8),
    ASCII.map(symbol),
    st.integers(0, U32).map(uint),
)
KEYS = st.one_of(TEXT, ASCII.map(symbol), st.integers(-100, 100), st.binary(max_size=4))


def _unsigned(bits: int, wrap: type) -> st.SearchStrategy[Any]:
    top = (1 << bits) - 1
    ints = st.one_of(st.integers(0, top), st.sampled_from(sorted({0, 1, 255, min(256, top), top})))
    return st.one_of(ints, ints.map(wrap))


PRIMITIVE: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "ubyte": _unsigned(8, ubyte),
    "ushort": _unsigned(16, ushort),
    "uint": _unsigned(32, uint),
    "ulong": _unsigned(64, ulong),
    "string": TEXT,
    "symbol": SYMBOLS,
    "binary": BINARY,
    "timestamp": st.integers(-(1 << 63), (1 << 63) - 1).map(timestamp),
    "map": st.dictionaries(KEYS, SIMPLE, max_size=3),
    "symbol-keyed-map": st.dictionaries(ASCII.map(symbol), SIMPLE, max_size=3),
}

EXTENSION = st.builds(Described, st.just(symbol("com.example:ext")), st.lists(SIMPLE, max_size=2))


def providers(archetype: str) -> list[type[Composite]]:
    return [
        c for c in COMPOSITES
        if c.PROVIDES and archetype in [p.strip() for p in c.PROVIDES.split(",")]
    ]


def requires_strategy(archetype: str) -> st.SearchStrategy[Any]:
    """Values of a ``*`` field that requires ``archetype``."""
    if archetype == "address":
        return TEXT
    if archetype == "message-id":
        return st.one_of(
            st.integers(0, (1 << 64) - 1).map(ulong), st.uuids(), st.binary(max_size=8), TEXT
        )
    if archetype in ("txn-id", "global-tx-id"):
        return st.binary(min_size=1, max_size=8)
    classes = providers(archetype)
    assert classes, archetype
    return st.one_of(EXTENSION, *[st.deferred(lambda c=c: composite(c)) for c in classes])


def field_strategy(f: Field) -> st.SearchStrategy[Any]:
    prim = primitive_of(f.type)
    r = RESTRICTED.get(f.type)
    if r is not None and r.choices and r.provides is None:
        values = st.sampled_from(list(r.choices.values()))
    elif prim in PRIMITIVE:
        values = PRIMITIVE[prim]
    elif prim == "error":
        values = st.deferred(lambda: composite(Error))
    elif prim == "*":
        assert f.requires is not None, f
        values = requires_strategy(f.requires)
    else:
        raise AssertionError(f"no strategy for {f!r}")
    if f.multiple:
        values = st.one_of(values, st.lists(values, max_size=3))
    return values if f.mandatory else st.one_of(st.none(), values)


def composite(cls: type[Composite]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({f.attr: field_strategy(f) for f in cls.FIELDS}).map(
        lambda kw: cls(**kw)
    )


# One valid value per mandatory field type, for hand-built instances.
SAMPLE: dict[str, Any] = {
    "string": "x",
    "symbol": symbol("PLAIN"),
    "uint": 7,
    "ulong": 7,
    "boolean": True,
    "binary": b"\x01",
    "ubyte": 0,
    "*": b"txn1",
}


def minimal(cls: type[Composite]) -> Any:
    """An instance of ``cls`` with only its mandatory fields set."""
    return cls(**{f.attr: SAMPLE[primitive_of(f.type)] for f in cls.FIELDS if f.mandatory})


def wire_list(value: Any) -> list[Any]:
    """The described list of an encoded composite, as the codec decodes it (exact types)."""
    data = bytearray(encode(value))
    assert data[:2] == b"\x00\x53"
    data[2] = 0xFE  # no such descriptor: the value stays a Described
    raw = decode(bytes(data))
    assert type(raw) is Described and type(raw.value) is list
    return raw.value


def described(cls: type[Any], value: Any) -> bytes:
    return encode(Described(ulong(cls.DESCRIPTOR_CODE), value))


def cid(c: type[Any]) -> str:
    return c.__name__


# --- round trips ----------------------------------------------------------------------------


def _check_decoded_types(v: Composite) -> None:
    """Decoded fields hold the exact Python types of their AMQP types."""
    exact = {
        "boolean": bool, "ubyte": ubyte, "ushort": ushort, "uint": uint, "ulong": ulong,
        "string": str, "symbol": symbol, "binary": bytes, "timestamp": timestamp,
        "map": dict, "symbol-keyed-map": dict,
    }
    for f in v.FIELDS:
        x = getattr(v, f.attr)
        prim = primitive_of(f.type)
        if x is None or x == f.default or prim not in exact:
            continue
        if f.multiple:
            assert type(x) is list and all(type(e) is exact[prim] for e in x), (f, x)
        else:
            assert type(x) is exact[prim], (f, x)


@pytest.mark.parametrize("cls", COMPOSITES, ids=cid)
@settings(max_examples=40)
@given(data=st.data())
def test_round_trip(cls: type[Composite], data: st.DataObject) -> None:
    value = data.draw(composite(cls))
    encoded = encode(value)
    back = decode(encoded)
    assert type(back) is cls
    assert back == value
    assert encode(back) == encoded
    _check_decoded_types(back)
    # the symbolic descriptor decodes to the same class
    assert decode(encode(Described(symbol(cls.DESCRIPTOR_NAME), wire_list(value)))) == back


@pytest.mark.parametrize("cls", COMPOSITES, ids=cid)
def test_round_trip_minimal_and_empty_keywords(cls: type[Composite]) -> None:
    value = minimal(cls)
    assert decode(encode(value)) == value
    for f in cls.FIELDS:
        if not f.mandatory:
            assert getattr(value, f.attr) == f.default


# --- exact bytes (checked by hand against Part 1 §1.6 and Part 2) ------------------------------


@pytest.mark.parametrize(
    ("value", "hex_"),
    [
        (Accepted(), "00532445"),
        (Released(), "00532645"),
        (Close(), "00531845"),
        (Close(error=None), "00531845"),
        (Modified(), "00532745"),
        (Source(), "00532845"),
        (Source(durable=0, expiry_policy="session-end", timeout=0, dynamic=False), "00532845"),
        # handle 0 as uint0; every other field absent, so the list stops after it
        (Transfer(handle=0), "005314c0020143"),
        # more=False is its default: omitted as a trailing field
        (Transfer(handle=1, delivery_id=5, more=False), "005314c0050252015205"),
        (Open(container_id="x"), "005310c00401a10178"),
        (Open(container_id="x", max_frame_size=U32, channel_max=65535), "005310c00401a10178"),
        # max-frame-size equal to its default inside the list travels as null
        (Open(container_id="x", max_frame_size=U32, idle_time_out=0), "005310c00805a1017840404043"),
        (Flow(incoming_window=0, next_outgoing_id=0, outgoing_window=0), "005313c005044043" "4343"),
        (
            Disposition(role=True, first=5, settled=True, state=Accepted()),
            "005315c00a05415205404100532445",
        ),
        (
            Begin(next_outgoing_id=1, incoming_window=2, outgoing_window=3, handle_max=U32),
            "005311c008044052015202" "5203",
        ),
        (
            Attach(name="l", handle=0, role=Role.SENDER, snd_settle_mode=2, rcv_settle_mode=1),
            "005312c00905a1016c4342405001",
        ),
        (Attach(name="l", handle=0, role=True, snd_settle_mode=2), "005312c00603a1016c4341"),
        (
            Rejected(error=Error(condition=ErrorCondition.NOT_FOUND)),
            "005325c0170100531dc01101a30e" + b"amqp:not-found".hex(),
        ),
        (
            SaslMechanisms(sasl_server_mechanisms=["PLAIN"]),
            "005340c00b01e00801a305" + b"PLAIN".hex(),
        ),
        (SaslOutcome(code=0), "005344c003015000"),
        # a body over 255 bytes takes list32
        (
            Transfer(handle=0, delivery_tag=b"x" * 300),
            "005314d00000013700000003" "4340b00000012c" + "78" * 300,
        ),
    ],
)
def test_exact_bytes(value: Any, hex_: str) -> None:
    assert encode(value).hex() == hex_
    assert decode(bytes.fromhex(hex_)) == value


def test_a_field_equal_to_its_default_decodes_to_the_default() -> None:
    back = decode(encode(Open(container_id="x", max_frame_size=U32, idle_time_out=0)))
    assert back.max_frame_size == U32 and back.channel_max == 65535 and back.idle_time_out == 0


# --- mandatory fields ------------------------------------------------------------------------

MANDATORY = [(c, f) for c in COMPOSITES for f in c.FIELDS if f.mandatory]


def _mid(p: tuple[type[Any], Field]) -> str:
    return f"{p[0].__name__}.{p[1].attr}"


@pytest.mark.parametrize(("cls", "f"), MANDATORY, ids=[_mid(p) for p in MANDATORY])
def test_missing_mandatory_on_encode(cls: type[Composite], f: Field) -> None:
    value = minimal(cls)
    setattr(value, f.attr, None)
    with pytest.raises(EncodeError, match=f.name):
        encode(value)


@pytest.mark.parametrize(("cls", "f"), MANDATORY, ids=[_mid(p) for p in MANDATORY])
def test_missing_mandatory_on_decode(cls: type[Composite], f: Field) -> None:
    items = wire_list(minimal(cls))
    i = cls.FIELDS.index(f)
    as_null = list(items)
    as_null[i] = None
    with pytest.raises(DecodeError, match=f.name):
        decode(described(cls, as_null))
    with pytest.raises(DecodeError, match=f.name):
        decode(described(cls, items[:i]))  # the list stops before it


def test_mandatory_field_after_the_last_present_one_is_still_checked() -> None:
    with pytest.raises(EncodeError, match="outgoing-window"):
        encode(Begin(next_outgoing_id=1, incoming_window=2, outgoing_window=None))  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="incoming-window"):
        encode(Flow(incoming_window=None, next_outgoing_id=1, outgoing_window=2))  # type: ignore[arg-type]


def test_constructor_is_keyword_only_and_needs_mandatory_fields() -> None:
    with pytest.raises(TypeError):
        Open("x")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Open()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Open(container_id="x", max_frame_sise=512)  # type: ignore[call-arg]


# --- field types on decode -------------------------------------------------------------------

# a value of the wrong type for each kind of field
WRONG: dict[str, Any] = {
    "boolean": uint(1),
    "ubyte": ushort(1),
    "ushort": uint(1),
    "uint": 5,  # a long, not a uint
    "ulong": 5,
    "string": b"x",
    "symbol": b"x",
    "binary": "x",
    "timestamp": 5,
    "map": [1],
    "symbol-keyed-map": [1],
    "error": symbol("amqp:not-found"),
    "*": 5,
}
TYPED = [
    (c, f)
    for c in COMPOSITES
    for f in c.FIELDS
    if not (f.type == "*" and f.requires == "global-tx-id")  # anything goes there
]


def _wrong(f: Field) -> Any:
    return uint(1) if f.multiple else WRONG[primitive_of(f.type)]


@pytest.mark.parametrize(("cls", "f"), TYPED, ids=[_mid(p) for p in TYPED])
def test_wrong_field_type_on_decode(cls: type[Composite], f: Field) -> None:
    items = wire_list(minimal(cls))
    i = cls.FIELDS.index(f)
    items += [None] * (i + 1 - len(items))
    items[i] = _wrong(f)
    with pytest.raises(DecodeError, match=f.name):
        decode(described(cls, items))


@pytest.mark.parametrize(
    ("cls", "attr", "bad"),
    [
        (Attach, "snd_settle_mode", ubyte(3)),
        (Attach, "rcv_settle_mode", ubyte(2)),
        (Transfer, "rcv_settle_mode", ubyte(9)),
        (SaslOutcome, "code", ubyte(5)),
        (Source, "durable", uint(3)),
        (Target, "expiry_policy", symbol("forever")),
    ],
)
def test_value_outside_closed_choices_on_decode(cls: type[Composite], attr: str, bad: Any) -> None:
    items = wire_list(minimal(cls))
    i = [f.attr for f in cls.FIELDS].index(attr)
    items += [None] * (i + 1 - len(items))
    items[i] = bad
    with pytest.raises(DecodeError, match=attr.replace("_", "-")):
        decode(described(cls, items))


def test_lenient_decoding() -> None:
    # narrower unsigned encodings in wider fields, and a string where a symbol belongs
    v = decode(described(Flow, [None, ubyte(1), ushort(2), uint(3)]))
    assert (v.incoming_window, v.next_outgoing_id, v.outgoing_window) == (1, 2, 3)
    e = decode(described(Error, ["amqp:not-found"]))
    assert e.condition == "amqp:not-found" and type(e.condition) is symbol
    # an extension type where a delivery state belongs stays a Described
    ext = Described(symbol("com.example:state"), [])
    assert decode(described(Disposition, [True, uint(0), None, None, ext])).state == ext


def test_value_not_a_list_on_decode() -> None:
    for value in ("x", {1: 2}, Array(uint, [uint(1)])):
        with pytest.raises(DecodeError, match="open"):
            decode(described(Open, value))


def test_nested_composite_of_the_wrong_class() -> None:
    with pytest.raises(DecodeError, match="error"):
        decode(described(Close, [Accepted()]))
    with pytest.raises(DecodeError, match="state"):
        decode(described(Disposition, [True, uint(0), None, None, Open(container_id="x")]))
    with pytest.raises(DecodeError, match="source"):
        decode(described(Attach, ["l", uint(0), True, None, None, Target()]))


def test_extra_trailing_fields_are_ignored() -> None:
    assert decode(described(Close, [None, 5, "later versions"])) == Close()


# --- defaults ---------------------------------------------------------------------------------


def test_defaults_filled_on_decode() -> None:
    a = decode(described(Attach, ["l", uint(0), True]))
    assert a.snd_settle_mode == 2 and a.rcv_settle_mode == 0
    assert a.incomplete_unsettled is False and a.source is None
    o = decode(described(Open, ["c"]))
    assert o.max_frame_size == U32 and o.channel_max == 65535 and o.hostname is None
    s = decode(described(Source, []))
    assert (s.durable, s.expiry_policy, s.timeout, s.dynamic) == (0, "session-end", 0, False)
    f = decode(described(Flow, [None, uint(1), uint(2), uint(3), None, None, None, None, None]))
    assert f.drain is False and f.echo is False
    t = decode(described(Transfer, [uint(0), None, None, None, None, None]))
    assert (t.more, t.resume, t.aborted, t.batchable, t.settled) == (False, False, False, False, None)


@pytest.mark.parametrize("cls", COMPOSITES, ids=cid)
def test_every_default_filled_from_an_empty_tail(cls: type[Composite]) -> None:
    n = sum(1 for _ in cls.FIELDS)
    mand = [i for i, f in enumerate(cls.FIELDS) if f.mandatory]
    items = wire_list(minimal(cls))[: mand[-1] + 1 if mand else 0]
    v = decode(described(cls, items))
    for f in cls.FIELDS[len(items) : n]:
        assert getattr(v, f.attr) == f.default and type(getattr(v, f.attr)) is type(f.default)


# --- multiple fields ----------------------------------------------------------------------------

MULTIPLE = [(c, f) for c in COMPOSITES for f in c.FIELDS if f.multiple]


@pytest.mark.parametrize(("cls", "f"), MULTIPLE, ids=[_mid(p) for p in MULTIPLE])
def test_multiple_single_value_or_array_on_decode(cls: type[Composite], f: Field) -> None:
    items = wire_list(minimal(cls))
    i = cls.FIELDS.index(f)
    items += [None] * (i + 1 - len(items))
    for wire, expected in [
        (symbol("a"), ["a"]),
        (Array(symbol, [symbol("a"), symbol("b")]), ["a", "b"]),
        (Array(symbol, []), []),
        ("a", ["a"]),  # lenient: a string where a symbol belongs
    ]:
        items[i] = wire
        v = decode(described(cls, items))
        got = getattr(v, f.attr)
        assert type(got) is list and got == expected
        assert all(type(x) is symbol for x in got)
    items[i] = Array(uint, [uint(1)])
    with pytest.raises(DecodeError, match=f.name):
        decode(described(cls, items))


def test_multiple_on_construction_and_encode() -> None:
    # a single value becomes a one-element list (not a list of its characters)
    assert Open(container_id="x", offered_capabilities="ANONYMOUS-RELAY").offered_capabilities == [
        "ANONYMOUS-RELAY"
    ]
    o = Open(container_id="x", offered_capabilities=("a", symbol("b")))
    assert o.offered_capabilities == ["a", "b"]
    assert all(type(x) is symbol for x in o.offered_capabilities)
    assert Coordinator(capabilities=Array(symbol, [symbol("x")])).capabilities == ["x"]
    # a multiple field always travels as an array
    assert encode(Coordinator(capabilities="x")).hex() == "005330c00701e00401a30178"
    with pytest.raises(EncodeError, match="offered-capabilities"):
        encode(Open(container_id="x", offered_capabilities=[1]))  # type: ignore[list-item]
    o = Open(container_id="x")
    o.offered_capabilities = "abc"  # type: ignore[assignment]
    assert decode(encode(o)).offered_capabilities == ["abc"]


# --- descriptors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", described_types(), ids=cid)
def test_symbolic_descriptor(cls: type[Any]) -> None:
    if issubclass(cls, Composite):
        value: Any = minimal(cls)
        raw: Any = wire_list(value)
    else:
        value = cls({} if cls.SOURCE in ("map", "annotations") else b"x" if cls.SOURCE == "binary" else [])
        raw = value.value
    by_name = encode(Described(symbol(cls.DESCRIPTOR_NAME), raw))
    assert by_name.startswith(b"\x00\xa3")
    assert decode(by_name) == value == decode(encode(value))
    # a ulong descriptor in its 8-byte encoding
    long_code = b"\x00\x80" + cls.DESCRIPTOR_CODE.to_bytes(8, "big") + encode(value)[3:]
    assert decode(long_code) == value


def test_symbolic_descriptor_hand_encoded() -> None:
    name = b"amqp:open:list"
    data = b"\x00\xa3" + bytes([len(name)]) + name + bytes.fromhex("c00401a10178")
    assert decode(data) == Open(container_id="x")


@pytest.mark.parametrize(
    "descriptor",
    [
        ulong(0xFE),
        ulong((1 << 32) | 0x10),  # another domain's 0x10
        symbol("amqp:open:lists"),
        symbol("com.example:thing:list"),
        uint(0x10),  # a descriptor code must be a ulong
    ],
)
def test_unknown_descriptor_stays_described(descriptor: Any) -> None:
    value = Described(descriptor, ["x"])
    back = decode(encode(value))
    assert type(back) is Described and back == value


# --- encode errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        Transfer(handle=-1),
        Transfer(handle=1 << 32),
        Transfer(handle="0"),  # type: ignore[arg-type]
        Transfer(handle=0, delivery_tag="tag"),  # type: ignore[arg-type]
        Attach(name="l", handle=0, role=True, max_message_size=-1),
        Begin(remote_channel=1 << 16, next_outgoing_id=0, incoming_window=0, outgoing_window=0),
        Open(container_id=5),  # type: ignore[arg-type]
        Error(condition="amqp:é"),
    ],
    ids=repr,
)
def test_encode_rejects_bad_values(value: Any) -> None:
    with pytest.raises(EncodeError):
        encode(value)


# --- construction -----------------------------------------------------------------------------


def test_constructor_normalises() -> None:
    d = Disposition(role=Role.RECEIVER, first=0)
    assert d.role is True
    e = Error(condition="amqp:not-found")
    assert type(e.condition) is symbol
    assert Error(condition=ErrorCondition.NOT_FOUND).condition is ErrorCondition.NOT_FOUND
    assert Source(expiry_policy="never").expiry_policy == "never"
    assert type(Source().expiry_policy) is symbol


def test_equality_and_repr() -> None:
    assert Open(container_id="x") == Open(container_id="x")
    assert Open(container_id="x") != Open(container_id="y")
    assert Accepted() != Released()
    assert Accepted() == Accepted() and hash(Accepted()) == hash(Accepted())
    assert repr(Transfer(handle=1, more=False)) == "Transfer(handle=1)"
    assert repr(Accepted()) == "Accepted()"


def test_described_types_round_trip() -> None:
    for cls in described_types():
        if issubclass(cls, DescribedType):
            value = cls({symbol("k"): 1} if cls.SOURCE in ("map", "annotations") else b"x")
            if cls.SOURCE == "list":
                value = cls([1, "a"])
            assert decode(encode(value)) == value


# --- typing: declared attributes and constructor signatures ---------------------------------------


def _init_stub(cls: type[Any]) -> ast.FunctionDef | None:
    tree = ast.parse(inspect.getsource(cls))
    (node,) = tree.body
    assert isinstance(node, ast.ClassDef)
    for stmt in node.body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING":
            for sub in stmt.body:
                if isinstance(sub, ast.FunctionDef) and sub.name == "__init__":
                    return sub
    return None


@pytest.mark.parametrize("cls", COMPOSITES, ids=cid)
def test_annotations_and_init_stub_match_fields(cls: type[Composite]) -> None:
    attrs = [f.attr for f in cls.FIELDS]
    annotated = [k for k in inspect.get_annotations(cls) if not k.isupper()]
    assert annotated == attrs, "class-level annotations must list every field, in order"
    stub = _init_stub(cls)
    if not attrs:
        assert stub is None or not stub.args.kwonlyargs
        return
    assert stub is not None, f"{cls.__name__} needs an `if TYPE_CHECKING: def __init__` stub"
    assert [a.arg for a in stub.args.kwonlyargs] == attrs
    assert not stub.args.args[1:] and stub.args.vararg is None and stub.args.kwarg is None
    required = [f.attr for f in cls.FIELDS if f.mandatory]
    assert [
        a.arg for a, d in zip(stub.args.kwonlyargs, stub.args.kw_defaults, strict=True) if d is None
    ] == required
    sig = inspect.signature(cls.__init__)
    assert [p for p in sig.parameters if p != "self"] == attrs


def test_extension_value_in_requires_field_round_trips() -> None:
    ext = Described(symbol("com.example:source"), [uuid.UUID(int=1).bytes])
    a = Attach(name="l", handle=0, role=False, source=ext, target=Coordinator())
    assert decode(encode(a)) == a


# --- the raw decoders (straight from the bytes) agree with the codec's list + builder -------------


def decode_raw(data: bytes, limits: Limits = DEFAULT_LIMITS) -> Any:
    """``decode`` with a top-level composite read by its raw decoder (as a codec hook would)."""
    if data[:2] != b"\x00\x53" or len(data) < 3 or data[2] not in RAW_DECODERS:
        return decode(data, limits)
    try:
        value, end = RAW_DECODERS[data[2]](data, 3, 1, limits)  # the codec's value depth
    except (IndexError, struct.error):
        raise DecodeError("truncated value") from None
    if end != len(data):
        raise DecodeError("trailing bytes")
    return value


def _outcome(fn: Any, data: bytes, limits: Limits) -> Any:
    try:
        return ("value", fn(data, limits))
    except DecodeError:
        return ("error", None)


def test_raw_decoder_for_every_composite() -> None:
    assert set(RAW_DECODERS) == {c.DESCRIPTOR_CODE for c in COMPOSITES}


@pytest.mark.parametrize("cls", COMPOSITES, ids=cid)
@settings(max_examples=40)
@given(data=st.data())
def test_raw_decoder_agrees_with_codec(cls: type[Composite], data: st.DataObject) -> None:
    value = data.draw(composite(cls))
    encoded = encode(value)
    assert decode_raw(encoded) == decode(encoded) == value
    # the same verdict on damaged input, and under tight limits
    damaged = bytearray(encoded)
    if len(damaged) > 3:
        i = data.draw(st.integers(3, len(damaged) - 1))
        damaged[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(3, len(encoded)))
    limits = data.draw(
        st.sampled_from([DEFAULT_LIMITS, Limits(max_depth=1), Limits(max_depth=2), Limits(max_elements=2)])
    )
    for sample in (bytes(damaged), encoded[:cut], encoded):
        assert _outcome(decode_raw, sample, limits) == _outcome(decode, sample, limits)


@pytest.mark.parametrize(
    "hex_",
    [
        "005314c0020143",  # minimal
        "005314c00201",  # truncated inside the list
        "005314c0030143",  # size longer than the elements
        "005314c0020243",  # count larger than the bytes
        "005314c0000143",  # size too small for its count
        "005314c00401430000",  # an invalid constructor after the handle
        "005314c00302430a",  # an invalid constructor for delivery-id
        "005314c00a0243a00800010203",  # a delivery-tag running past the list
        "005314c00302437000",  # a truncated uint
        "005314d0000000050000000143",  # list32
        "005314c003024340",  # trailing null
        "005314c00a034352ffa004deadbeef",  # handle, delivery-id, delivery-tag
        "005314c00402435305",  # a ulong in a uint field
        "005318c0020142",  # close: a boolean in the error field
        "005318c00403404040",  # close with fields of a later version
        "00531845",
        "005324c0020140",  # accepted with a (later version's) field
    ],
)
def test_raw_decoder_on_edge_cases(hex_: str) -> None:
    data = bytes.fromhex(hex_)
    for limits in (DEFAULT_LIMITS, Limits(max_depth=1), Limits(max_elements=1)):
        assert _outcome(decode_raw, data, limits) == _outcome(decode, data, limits), hex_


@pytest.mark.parametrize("cls", COMPOSITES, ids=cid)
@settings(max_examples=40)
@given(data=st.data())
def test_raw_decoder_agrees_with_the_list_decoder(cls: type[Composite], data: st.DataObject) -> None:
    """The raw decoder checks only what it did not parse inline: its fields come out with
    the same values and the same types as the list decoder's, which checks every field."""
    value = data.draw(composite(cls))
    encoded = encode(value)
    assert encoded[:3] == bytes((0x00, 0x53, cls.DESCRIPTOR_CODE))
    raw, _ = RAW_DECODERS[cls.DESCRIPTOR_CODE](encoded, 3, 1, DEFAULT_LIMITS)
    listed = cls._decode_list(decode(encoded[3:]))
    assert raw == listed == value
    assert [type(getattr(raw, f.attr)) for f in cls.FIELDS] == [type(getattr(listed, f.attr)) for f in cls.FIELDS]


def test_raw_decoder_checks_a_closed_choice_parsed_inline() -> None:
    """A ubyte parsed inline is still held to its field's choices (rcv-settle-mode: 0 or 1)."""
    ok = bytes.fromhex("005314c009074340404040405001")
    assert decode_raw(ok).rcv_settle_mode == 1
    assert type(decode_raw(ok).rcv_settle_mode) is ubyte
    with pytest.raises(DecodeError, match="rcv-settle-mode"):
        decode_raw(bytes.fromhex("005314c009074340404040405005"))
    with pytest.raises(DecodeError, match="mandatory field handle"):
        decode_raw(bytes.fromhex("005314c0020140"))
