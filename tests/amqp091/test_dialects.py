"""0-9 and 0-8 as difference tables, derived from and checked against their XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from amqp10.amqp091 import methods as m
from amqp10.amqp091.dialects import AMQP_0_8, AMQP_0_9, AMQP_0_9_1, Dialect
from amqp10.amqp091.errors import ConnectionException
from amqp10.amqp091.methods import METHODS, ReplyCode

from .spec import AMQP_0_8 as XML_0_8
from .spec import AMQP_0_9 as XML_0_9
from .spec import EXTENDED, spec_file

SERVED = {"connection", "channel", "exchange", "queue", "basic", "tx", "confirm"}
# older-only methods of the served classes that the engine does not serve
NOT_SERVED = {
    "0-9": {
        ("connection", "redirect"),
        ("channel", "ok"),
        ("channel", "ping"),
        ("channel", "pong"),
        ("channel", "resume"),
    },
    "0-8": {("connection", "redirect"), ("channel", "alert")},
}
CASES = [(AMQP_0_9, XML_0_9), (AMQP_0_8, XML_0_8)]


def _load(path: str) -> tuple[ET.Element, dict[tuple[int, int], tuple[str, str, list[str]]]]:
    root = ET.parse(spec_file(path)).getroot()
    domains = {d.get("name"): d.get("type") for d in root.findall("domain")}
    out = {}
    for c in root.findall("class"):
        for mt in c.findall("method"):
            types = [
                str(f.get("type") or domains.get(f.get("domain"), f.get("domain")))
                for f in mt.findall("field")
            ]
            out[int(c.get("index", "")), int(mt.get("index", ""))] = (
                c.get("name", ""),
                mt.get("name", ""),
                types,
            )
    return root, out


@pytest.mark.parametrize(("dialect", "xml"), CASES, ids=["0-9", "0-8"])
def test_dialect_tables_match_the_xml(dialect: Dialect, xml: str) -> None:
    root, theirs = _load(xml)
    matched = set()
    for cls in METHODS.values():
        variant = next((v for v in dialect.variants if v.method is cls), None)
        mid = cls.METHOD_ID if variant is None else variant.method_id
        fields = [
            t
            for a, t in cls.FIELDS
            if variant is None or variant.fields is None or a in variant.fields
        ]
        key = (cls.CLASS_ID, mid)
        if cls in dialect.absent:
            assert not dialect.supports(cls)
            # absent: the older XML has no method at that id, or another method took it
            claimed = {(v.method.CLASS_ID, v.method_id) for v in dialect.variants}
            assert key not in theirs or key in claimed, cls.NAME
            continue
        assert dialect.supports(cls)
        assert key in theirs, f"{cls.NAME} has no {key} in {dialect.name}"
        assert theirs[key][2] == fields, cls.NAME
        matched.add(key)
    unmatched = {
        (cname, mname)
        for key, (cname, mname, _) in theirs.items()
        if cname in SERVED and key not in matched
    }
    assert unmatched == NOT_SERVED[dialect.name]


@pytest.mark.parametrize(("dialect", "xml"), CASES, ids=["0-9", "0-8"])
def test_dialect_reply_codes_and_header(dialect: Dialect, xml: str) -> None:
    root, _ = _load(xml)
    ours = {
        int(c.get("value", ""))
        for c in ET.parse(spec_file(EXTENDED)).getroot().findall("constant")
        if c.get("class")
    }
    codes = {
        int(c.get("value", "")): c.get("name") for c in root.findall("constant") if c.get("class")
    }
    assert ours - set(codes) == dialect.reply_codes_absent
    assert {(c, n) for c, n in codes.items() if c not in ours} == set(dialect.reply_codes_extra)
    major, minor = int(root.get("major", "")), int(root.get("minor", ""))
    assert dialect.version == (major, minor)
    assert dialect.header == b"AMQP\x01\x01" + bytes([major, minor])


def test_0_9_1_header_and_version_match_the_xml() -> None:
    root = ET.parse(spec_file(EXTENDED)).getroot()
    version = tuple(int(root.get(k, "")) for k in ("major", "minor", "revision"))
    assert AMQP_0_9_1.header == b"AMQP\x00" + bytes(version)
    assert AMQP_0_9_1.version == version[:2]


def test_0_8_wire_forms() -> None:
    close = m.ConnectionClose(reply_code=320, reply_text="bye", class_id=0, method_id=0)
    buf = bytearray()
    AMQP_0_8.encode_method(buf, close)
    assert bytes(buf[:4]) == b"\x00\x0a\x00\x3c"
    assert AMQP_0_8.decode_method(bytes(buf)) == close
    consume = m.BasicConsume(queue="q", consumer_tag="c", no_ack=True, exclusive=True)
    buf = bytearray()
    AMQP_0_8.encode_method(buf, consume)
    assert bytes(buf) == b"\x00\x3c\x00\x14\x00\x00\x01q\x01c" + bytes([0b0110])
    assert AMQP_0_8.decode_method(bytes(buf)) == consume
    buf = bytearray()
    AMQP_0_8.encode_method(buf, m.ChannelOpenOk())
    assert bytes(buf) == b"\x00\x14\x00\x0b"
    with pytest.raises(ValueError, match="does not exist"):
        AMQP_0_8.encode_method(bytearray(), m.ConfirmSelect())
    with pytest.raises(ConnectionException) as info:
        AMQP_0_8.decode_method(b"\x00\x55\x00\x0a\x00")  # confirm.select
    assert info.value.reply_code == ReplyCode.NOT_IMPLEMENTED


def test_decode_errors_carry_reply_codes() -> None:
    with pytest.raises(ConnectionException) as info:
        AMQP_0_9_1.decode_method(b"\x00\x14")
    assert info.value.reply_code == ReplyCode.FRAME_ERROR
    with pytest.raises(ConnectionException) as info:
        AMQP_0_9_1.decode_method(b"\x00\x14\x00\x28\x00")  # channel.close cut short
    assert info.value.reply_code == ReplyCode.SYNTAX_ERROR
    assert (info.value.class_id, info.value.method_id) == (20, 40)
    with pytest.raises(ConnectionException) as info:
        AMQP_0_9_1.decode_method(b"\x00\x14\x00\x0a\x00\xff")  # channel.open + a stray byte
    assert info.value.reply_code == ReplyCode.SYNTAX_ERROR
