"""Methods and content properties: held to the spec XML, round-tripped, and cross-checked with pika."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pika.frame
import pika.spec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.amqp091 import methods
from amqp10.amqp091._generate import EXTENSIONS, attr_name, class_name, generate
from amqp10.amqp091.base import Method
from amqp10.amqp091.dialects import AMQP_0_9_1
from amqp10.amqp091.framing import encode_content
from amqp10.amqp091.methods import METHODS, PROPERTIES, BasicProperties, ReplyCode

from .spec import EXTENDED, PLAIN, spec_file
from .strategies import methods_of, pika_tables, shortstr, tables

ALL = sorted(METHODS.values(), key=lambda c: c.INDEX)
ids = [c.NAME for c in ALL]
# 70 methods of a few fields each: a quarter of the profile's examples per method
per_method = settings(max_examples=max(20, settings.default.max_examples // 4))


def test_committed_module_is_the_generator_output() -> None:
    """methods.py is exactly what the generator makes of the XML: regenerate it, never edit."""
    # the source next to the module (the compiled build's module file is the .so)
    committed = Path(methods.__file__).with_name("methods.py").read_text()
    assert generate(str(spec_file(EXTENDED))) == committed


def _xml_methods(path: Path) -> dict[tuple[str, str], tuple[ET.Element, ET.Element]]:
    root = ET.parse(path).getroot()
    return {
        (c.get("name", ""), mt.get("name", "")): (c, mt)
        for c in root.findall("class")
        for mt in c.findall("method")
    }


def test_every_xml_method_field_by_field() -> None:
    """Class and method ids, field names, order and types, synchronous, content, chassis."""
    path = spec_file(EXTENDED)
    root = ET.parse(path).getroot()
    domains = {d.get("name"): d.get("type") for d in root.findall("domain")}
    xml = _xml_methods(path)
    extensions = {("connection", e[0]) for e in EXTENSIONS["connection"]}
    assert len(METHODS) == len(xml) + len(extensions)
    for (cname, mname), (c, mt) in xml.items():
        cls = getattr(methods, class_name(cname, mname))
        assert int(c.get("index", "")) == cls.CLASS_ID
        assert int(mt.get("index", "")) == cls.METHOD_ID
        assert cls.INDEX == cls.CLASS_ID << 16 | cls.METHOD_ID
        assert f"{cname}.{mname}" == cls.NAME
        assert (mt.get("synchronous") == "1") == cls.SYNCHRONOUS
        assert (mt.get("content") == "1") == cls.CONTENT
        assert {ch.get("name") for ch in mt.findall("chassis")} == cls.RECEIVED_BY
        expected = [
            (attr_name(f.get("name", "")), f.get("type") or domains[f.get("domain")])
            for f in mt.findall("field")
        ]
        assert list(cls.FIELDS) == expected, cls.NAME
        assert [r.NAME for r in cls.RESPONSES] == [
            f"{cname}.{r.get('name')}" for r in mt.findall("response")
        ]


def test_plain_xml_is_a_subset_of_the_extended_one() -> None:
    """Every method of the unextended 0-9-1 XML is here with the same ids and field types."""
    path = spec_file(PLAIN)
    root = ET.parse(path).getroot()
    domains = {d.get("name"): d.get("type") for d in root.findall("domain")}
    for (cname, mname), (_c, mt) in _xml_methods(path).items():
        cls = getattr(methods, class_name(cname, mname))
        types = [f.get("type") or domains[f.get("domain")] for f in mt.findall("field")]
        assert [t for _, t in cls.FIELDS] == types


def test_constants_and_reply_codes_match_the_xml() -> None:
    root = ET.parse(spec_file(EXTENDED)).getroot()
    for const in root.findall("constant"):
        name = attr_name(const.get("name", "")).upper()
        value = int(const.get("value", ""))
        kind = const.get("class")
        if kind is None:
            assert getattr(methods, name) == value
        else:
            code = ReplyCode[name]
            assert code == value
            assert (code in methods.SOFT_ERRORS) == (kind == "soft-error")
            assert (code in methods.HARD_ERRORS) == (kind == "hard-error")


def test_properties_match_the_xml() -> None:
    root = ET.parse(spec_file(EXTENDED)).getroot()
    domains = {d.get("name"): d.get("type") for d in root.findall("domain")}
    with_props = [c for c in root.findall("class") if c.findall("field")]
    assert sorted(PROPERTIES) == [int(c.get("index", "")) for c in with_props]
    for c in with_props:
        cls = PROPERTIES[int(c.get("index", ""))]
        assert list(cls.FIELDS) == [
            (attr_name(f.get("name", "")), f.get("type") or domains[f.get("domain")])
            for f in c.findall("field")
        ]


def wire(method: Method) -> bytes:
    buf = bytearray()
    AMQP_0_9_1.encode_method(buf, method)
    return bytes(buf)


@pytest.mark.parametrize("cls", ALL, ids=ids)
@per_method
@given(data=st.data())
def test_every_method_round_trips(cls: type[Method], data: st.DataObject) -> None:
    method = data.draw(methods_of(cls))
    payload = wire(method)
    assert AMQP_0_9_1.decode_method(payload) == method


def test_bits_pack_into_shared_octets() -> None:
    """Consecutive bits share an octet, first field in the lowest bit."""
    m = methods.QueueDeclare(
        queue="q", passive=False, durable=True, exclusive=False, auto_delete=True, no_wait=True
    )
    assert (
        wire(m)
        == b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x01q" + bytes([0b11010]) + b"\x00\x00\x00\x00"
    )


# pika's decoder has bugs we must not copy: update-secret decodes into ``mechanisms``
PIKA_DECODE_BROKEN = {methods.ConnectionUpdateSecret}


@pytest.mark.parametrize("cls", ALL, ids=ids)
@per_method
@given(data=st.data())
def test_every_method_against_pika(cls: type[Method], data: st.DataObject) -> None:
    """Ours → pika decodes and re-encodes the same bytes; pika's bytes → ours decodes the same method."""
    method = data.draw(methods_of(cls, pika_tables))
    ours = wire(method)
    pika_cls = pika.spec.methods[cls.INDEX]
    if cls in PIKA_DECODE_BROKEN:
        values = [getattr(method, a) for a, _ in cls.FIELDS]
        theirs = pika_cls(*values)
    else:
        theirs = pika_cls().decode(ours[4:])
    assert theirs.INDEX == cls.INDEX
    frame = pika.frame.Method(1, theirs).marshal()
    assert frame[-1:] == b"\xce"
    pika_bytes = frame[7:-1]
    assert pika_bytes == ours
    assert AMQP_0_9_1.decode_method(pika_bytes) == method


def test_pika_knows_no_method_we_lack() -> None:
    """Only 0-8's ``access.request``/``request-ok`` (class 30), which 0-9-1 dropped."""
    assert set(METHODS) <= set(pika.spec.methods)
    assert set(pika.spec.methods) - set(METHODS) == {30 << 16 | 10, 30 << 16 | 11}


properties = st.builds(
    BasicProperties,
    content_type=st.none() | shortstr,
    content_encoding=st.none() | shortstr,
    headers=st.none() | tables,
    delivery_mode=st.none() | st.integers(0, 255),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | shortstr,
    reply_to=st.none() | shortstr,
    expiration=st.none() | shortstr,
    message_id=st.none() | shortstr,
    timestamp=st.none() | st.integers(0, 2**64 - 1),
    type=st.none() | shortstr,
    user_id=st.none() | shortstr,
    app_id=st.none() | shortstr,
    reserved=st.none() | shortstr,
)


@given(properties)
def test_properties_round_trip(props: BasicProperties) -> None:
    buf = bytearray()
    props.encode(buf)
    decoded, end = BasicProperties.decode(bytes(buf), 0)
    assert end == len(buf)
    assert decoded == props


@given(
    properties.filter(lambda p: (p.timestamp or 0) < 2**40),
    st.none() | pika_tables,
    st.binary(max_size=9000),
)
def test_content_header_frames_against_pika(
    props: BasicProperties, headers: dict[str, Any] | None, body: bytes
) -> None:
    """Our content frames are pika's, byte for byte, and decode back both ways."""
    props.headers = headers
    ours = bytearray()
    encode_content(ours, 3, 60, props, body, 4096)
    theirs = pika.spec.BasicProperties()
    buf = bytearray()
    props.encode(buf)
    theirs.decode(bytes(buf))
    for attr, _ in BasicProperties.FIELDS:
        value: Any = getattr(theirs, "cluster_id" if attr == "reserved" else attr)
        if attr == "timestamp" and value is not None:
            value = int(value)
        assert value == getattr(props, attr), attr
    pika_frames = pika.frame.Header(3, len(body), theirs).marshal()
    step = 4096 - 8
    for pos in range(0, len(body), step):
        pika_frames += pika.frame.Body(3, body[pos : pos + step]).marshal()
    assert pika_frames == bytes(ours)


def test_property_flags_and_continuation() -> None:
    props = BasicProperties(content_type="t", delivery_mode=2)
    buf = bytearray()
    props.encode(buf)
    assert bytes(buf) == b"\x90\x00\x01t\x02"
    # a continuation word with no flags is accepted; a flag for no property is not
    assert BasicProperties.decode(b"\x90\x01\x00\x00\x01t\x02", 0)[0] == props
    with pytest.raises(ValueError):
        BasicProperties.decode(b"\x00\x02", 0)
    with pytest.raises(ValueError):
        BasicProperties.decode(b"\x00\x01\x80\x00", 0)
