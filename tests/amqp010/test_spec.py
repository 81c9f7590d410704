"""spec.py is the generator's output for the 0-10 XML, and it says what the XML says."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from amqp10.amqp010 import spec
from amqp10.amqp010._generate import generate

from ..amqp091.spec import spec_file

XML = "amqp-0-10/amqp.0-10.stripped.xml"


def _root() -> ET.Element:
    root = ET.parse(spec_file(XML)).getroot()
    for elem in root.iter():
        elem.tag = elem.tag.rpartition("}")[2]
    return root


def test_committed_module_is_the_generator_output() -> None:
    """spec.py is exactly what the generator makes of the XML: regenerate it, never edit."""
    assert generate(str(spec_file(XML))) == Path(spec.__file__).read_text()


def test_every_type_with_its_code_and_width() -> None:
    for t in _root().findall("type"):
        mine = spec.TYPES[t.get("name", "")]
        assert mine.code == (int(t.get("code", ""), 0) if t.get("code") else None)
        assert mine.fixed == (int(t.get("fixed-width", ""), 0) if t.get("fixed-width") else None)
        assert mine.variable == (
            int(t.get("variable-width", ""), 0) if t.get("variable-width") else None
        )


def test_every_control_and_command_of_the_implemented_classes() -> None:
    root = _root()
    for c in root.findall("class"):
        if c.get("name") in ("file", "stream"):
            continue
        ccode = int(c.get("code", ""), 0)
        for kind, table in (("control", spec.CONTROLS), ("command", spec.COMMANDS)):
            for item in c.findall(kind):
                code = (ccode << 8) | int(item.get("code", ""), 0)
                mine = table[code]
                assert mine.name == f"{c.get('name')}.{item.get('name')}"
                assert [f.name for f in mine.fields] == [
                    f.get("name", "").replace("-", "_") for f in item.findall("field")
                ]
                assert (mine.size, mine.pack) == (0, 2)


def test_domains_are_resolved_to_types_or_structs() -> None:
    known = set(spec.TYPES) | set(spec.STRUCTS)
    for table in (spec.CONTROLS, spec.COMMANDS):
        for item in table.values():
            for f in item.fields:
                assert f.type in known, (item.name, f.name, f.type)
    transfer = spec.OPS["message.transfer"]
    assert [(f.name, f.type) for f in transfer.fields] == [
        ("destination", "str8"),
        ("accept_mode", "uint8"),
        ("acquire_mode", "uint8"),
    ]
    assert transfer.segments
    assert spec.OPS["queue.query"].result == "queue-query-result"
    assert spec.STRUCTS["message-properties"].code == 0x0403
    assert spec.ENUMS["execution.error-code"]["not-found"] == 404


def test_the_xid_struct_follows_qpids_errata() -> None:
    """``dtx.xid`` has a code and a 4-octet size, as Qpid's errata and every 0-10 peer have it."""
    xid = spec.STRUCTS["xid"]
    assert (xid.code, xid.size, xid.pack) == (0x0604, 4, 2)
