"""Generate ``methods.py`` from the 0-9-1 spec XML (with RabbitMQ's extensions).

``python -m amqp10.amqp091._generate ../shared/spec/amqp-0-9-1/amqp0-9-1.stripped.extended.xml
> amqp10/amqp091/methods.py``. A test runs this on the XML and compares the output
with the committed file, so the classes cannot drift from the spec.

Each method becomes a slotted class with keyword-only ``__init__`` and an
``encode``/``decode`` pair written out field by field: consecutive fixed-size
fields share one precompiled ``struct.Struct``, consecutive bits share octets.
The four methods RabbitMQ added outside the XML (``connection.blocked``,
``unblocked``, ``update-secret``, ``update-secret-ok``) come from ``EXTENSIONS``
below; a test holds them to pika's codec.
"""

from __future__ import annotations

import keyword
import struct
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass

__all__ = ["EXTENSIONS", "generate", "parse_spec"]

# field type -> (struct code or None, Python annotation, default)
_TYPES: dict[str, tuple[str | None, str, str]] = {
    "octet": ("B", "int", "0"),
    "short": ("H", "int", "0"),
    "long": ("I", "int", "0"),
    "longlong": ("Q", "int", "0"),
    "timestamp": ("Q", "int", "0"),
    "bit": (None, "bool", "False"),
    "shortstr": (None, "str", '""'),
    "longstr": (None, "bytes", 'b""'),
    "table": (None, "FieldTable", "None"),
}

# variable-size types: the fields.py helpers that write and read them
_PUT = {"shortstr": "put_shortstr", "longstr": "put_longstr", "table": "encode_table"}
_GET = {"shortstr": "get_shortstr", "longstr": "get_longstr", "table": "decode_table"}


@dataclass(frozen=True)
class FieldSpec:
    """One field: its spec name and resolved AMQP type."""

    name: str
    type: str


@dataclass(frozen=True)
class MethodSpec:
    """One method as the XML declares it."""

    class_name: str
    class_id: int
    name: str
    method_id: int
    synchronous: bool
    content: bool
    fields: tuple[FieldSpec, ...]
    responses: tuple[str, ...]
    received_by: tuple[str, ...]
    """The chassis that implement it (``server``, ``client``): who may receive it."""


@dataclass(frozen=True)
class ClassSpec:
    """One class: id, content properties, methods."""

    name: str
    class_id: int
    properties: tuple[FieldSpec, ...]
    methods: tuple[MethodSpec, ...]


@dataclass(frozen=True)
class Spec:
    """The parts of a spec XML the codec needs."""

    version: tuple[int, int, int]
    constants: tuple[tuple[str, int, str | None], ...]
    classes: tuple[ClassSpec, ...]


# RabbitMQ's additions to the connection class (its amqp-rabbitmq-0.9.1.json), absent
# from the XML: (method, id, synchronous, fields, responses, received by)
_Ext = tuple[str, int, bool, tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]]
EXTENSIONS: dict[str, tuple[_Ext, ...]] = {
    "connection": (
        ("blocked", 60, False, (("reason", "shortstr"),), (), ("client",)),
        ("unblocked", 61, False, (), (), ("client",)),
        (
            "update-secret",
            70,
            True,
            (("new-secret", "longstr"), ("reason", "shortstr")),
            ("update-secret-ok",),
            ("server",),
        ),
        ("update-secret-ok", 71, True, (), (), ("client",)),
    ),
}


def _fields(elem: ET.Element, domains: dict[str, str]) -> tuple[FieldSpec, ...]:
    out = []
    for f in elem.findall("field"):
        dom = f.get("domain")
        tp = domains[dom] if dom is not None else f.get("type")
        assert tp is not None, f.get("name")
        out.append(FieldSpec(str(f.get("name")), tp))
    return tuple(out)


def parse_spec(path: str, extensions: bool = True) -> Spec:
    """Classes, methods, fields (domains resolved to types) and constants of a spec XML."""
    root = ET.parse(path).getroot()
    domains = {str(d.get("name")): str(d.get("type")) for d in root.findall("domain")}
    version = (int(root.get("major", 0)), int(root.get("minor", 0)), int(root.get("revision", 0)))
    constants = tuple(
        (str(c.get("name")), int(str(c.get("value"))), c.get("class"))
        for c in root.findall("constant")
    )
    classes = []
    for c in root.findall("class"):
        cname, cid = str(c.get("name")), int(str(c.get("index")))
        methods = [
            MethodSpec(
                cname, cid, str(m.get("name")), int(str(m.get("index"))),
                m.get("synchronous") == "1", m.get("content") == "1",
                _fields(m, domains), tuple(str(r.get("name")) for r in m.findall("response")),
                tuple(sorted(str(ch.get("name")) for ch in m.findall("chassis"))),
            )
            for m in c.findall("method")
        ]  # fmt: skip
        if extensions:
            for name, mid, sync, fields, responses, receivers in EXTENSIONS.get(cname, ()):
                methods.append(
                    MethodSpec(
                        cname, cid, name, mid, sync, False,
                        tuple(FieldSpec(n, t) for n, t in fields), responses, receivers,
                    )
                )  # fmt: skip
        classes.append(ClassSpec(cname, cid, _fields(c, domains), tuple(methods)))
    return Spec(version, constants, tuple(classes))


def attr_name(name: str) -> str:
    """A spec field name as a Python attribute (``no-wait`` → ``no_wait``, ``global`` → ``global_``)."""
    out = name.replace("-", "_").replace(" ", "_")
    return out + "_" if keyword.iskeyword(out) else out


def class_name(*names: str) -> str:
    """``("basic", "get-ok")`` → ``BasicGetOk``."""
    return "".join(p.capitalize() for n in names for p in n.replace(" ", "-").split("-"))


class _Emitter:
    def __init__(self) -> None:
        self.structs: dict[str, str] = {}

    def struct(self, fmt: str) -> str:
        return self.structs.setdefault(fmt, f"_S_{fmt}")

    def method(self, m: MethodSpec) -> list[str]:
        cls = class_name(m.class_name, m.name)
        attrs = [(attr_name(f.name), f.type) for f in m.fields]
        assert not {"data", "off", "buf", "cls", "self"} & {a for a, _ in attrs}
        lines = [
            "",
            "",
            f"class {cls}(Method):",
            f'    """``{m.class_name}.{m.name}`` ({m.class_id}, {m.method_id})."""',
            "",
            f"    __slots__ = ({''.join(repr(a) + ', ' for a in sorted(a for a, _ in attrs)).rstrip()})",
            f"    CLASS_ID = {m.class_id}",
            f"    METHOD_ID = {m.method_id}",
            f"    INDEX = 0x{(m.class_id << 16) | m.method_id:08X}",
            f'    NAME = "{m.class_name}.{m.name}"',
            f"    SYNCHRONOUS = {m.synchronous}",
            f"    CONTENT = {m.content}",
            f"    RECEIVED_BY = frozenset({{{', '.join(map(repr, m.received_by))}}})",
            f"    FIELDS = ({''.join(f'({a!r}, {t!r}), ' for a, t in attrs).rstrip()})",
        ]
        for a, t in attrs:
            lines.append(f"    {a}: {_TYPES[t][1]}")
        lines.append("")
        if attrs:
            params = ", ".join(
                f"{a}: {_TYPES[t][1]}{' | None' if t == 'table' else ''} = {_TYPES[t][2]}"
                for a, t in attrs
            )
            lines.append(f"    def __init__(self, *, {params}) -> None:")
            for a, t in attrs:
                value = f"{{}} if {a} is None else {a}" if t == "table" else a
                lines.append(f"        self.{a} = {value}")
        else:
            lines.append("    def __init__(self) -> None:")
            lines.append("        pass")
        enc, dec = self._codec(attrs)
        lines += ["", "    def encode(self, buf: bytearray) -> None:"]
        lines += [f"        {line}" for line in enc] or ["        pass"]
        lines += [
            "",
            "    @classmethod",
            "    def decode(cls, data: bytes, off: int) -> tuple[Method, int]:",
        ]
        lines += [f"        {line}" for line in dec]
        args = ", ".join(f"{a}={a}" for a, _ in attrs)
        lines.append(f"        return {cls}({args}), off")  # (the class itself: a compiled call, no keywords parsed)
        return lines

    def _codec(self, attrs: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
        enc: list[str] = []
        dec: list[str] = []
        i = 0
        nbits = 0
        while i < len(attrs):
            a, t = attrs[i]
            code = _TYPES[t][0]
            if code is not None:
                group = []
                while i < len(attrs) and _TYPES[attrs[i][1]][0] is not None:
                    group.append(attrs[i])
                    i += 1
                fmt = "".join(str(_TYPES[gt][0]) for _, gt in group)
                st = self.struct(fmt)
                names = ", ".join(f"self.{ga}" for ga, _ in group)
                enc.append(f"buf += {st}.pack({names})")
                targets = ", ".join(ga for ga, _ in group) + ("," if len(group) == 1 else "")
                dec.append(f"{targets} = {st}.unpack_from(data, off)")
                dec.append(f"off += {struct.calcsize('>' + fmt)}")  # ({st}'s size: no lookup)
            elif t == "bit":
                bits: list[str] = []
                while i < len(attrs) and attrs[i][1] == "bit" and len(bits) < 8:
                    bits.append(attrs[i][0])
                    i += 1
                parts = " | ".join(f"({1 << k} if self.{ga} else 0)" for k, ga in enumerate(bits))
                if len(bits) == 1:
                    parts = parts[1:-1]
                enc.append(f"buf.append({parts})")
                var = f"bits{nbits}"
                nbits += 1
                dec.append(f"{var} = data[off]")
                dec.append("off += 1")
                for k, ga in enumerate(bits):
                    dec.append(f"{ga} = bool({var} & {1 << k})")
            else:
                put, get = _PUT[t], _GET[t]
                enc.append(f"{put}(buf, self.{a})")
                dec.append(f"{a}, off = {get}(data, off)")
                i += 1
        return enc, dec

    def properties(self, c: ClassSpec) -> list[str]:
        cls = class_name(c.name, "properties")
        attrs = [(attr_name(f.name), f.type) for f in c.properties]
        assert len(attrs) <= 15 and all(t != "bit" for _, t in attrs), c.name
        lines = [
            "",
            "",
            f"class {cls}(Properties):",
            f'    """Content header properties of class ``{c.name}`` ({c.class_id})."""',
            "",
            f"    __slots__ = ({''.join(repr(a) + ', ' for a in sorted(a for a, _ in attrs)).rstrip()})",
            f"    CLASS_ID = {c.class_id}",
            f"    FIELDS = ({''.join(f'({a!r}, {t!r}), ' for a, t in attrs).rstrip()})",
        ]
        for a, t in attrs:
            lines.append(f"    {a}: {_TYPES[t][1]} | None")
        lines.append("")
        params = ", ".join(f"{a}: {_TYPES[t][1]} | None = None" for a, t in attrs)
        lines.append(f"    def __init__(self, *, {params}) -> None:")
        for a, _ in attrs:
            lines.append(f"        self.{a} = {a}")
        lines += [
            "",
            "    def encode(self, buf: bytearray) -> None:",
            "        start = len(buf)",
            '        buf += b"\\x00\\x00"',
            "        flags = 0",
        ]
        for k, (a, t) in enumerate(attrs):
            bit = 1 << (15 - k)
            lines.append(f"        if self.{a} is not None:")
            lines.append(f"            flags |= 0x{bit:04X}")
            code = _TYPES[t][0]
            if code is not None:
                lines.append(f"            buf += {self.struct(code)}.pack(self.{a})")
            else:
                put = _PUT[t]
                lines.append(f"            {put}(buf, self.{a})")
        unused = sum(1 << (15 - k) for k in range(len(attrs), 15))
        lines += [
            "        _S_H.pack_into(buf, start, flags)",
            "",
            "    @classmethod",
            "    def decode(cls, data: bytes, off: int) -> tuple[Properties, int]:",
            "        (flags,) = _S_H.unpack_from(data, off)",
            "        off += 2",
            f"        if flags & 0x{unused:04X}:",
            '            raise DecodeError("property flag set for no property")',
            "        more = flags & 1",
            "        while more:  # continuation words: no properties of this class live there",
            "            (more,) = _S_H.unpack_from(data, off)",
            "            off += 2",
            "            if more & 0xFFFE:",
            '                raise DecodeError("property flag set for no property")',
        ]
        self.struct("H")
        for k, (a, t) in enumerate(attrs):
            bit = 1 << (15 - k)
            lines.append(f"        {a}: {_TYPES[t][1]} | None = None")
            lines.append(f"        if flags & 0x{bit:04X}:")
            code = _TYPES[t][0]
            if code is not None:
                st = self.struct(code)
                lines.append(f"            ({a},) = {st}.unpack_from(data, off)")
                lines.append(f"            off += {struct.calcsize('>' + code)}")  # ({st}'s size)
            else:
                get = _GET[t]
                lines.append(f"            {a}, off = {get}(data, off)")
        args = ", ".join(f"{a}={a}" for a, _ in attrs)
        lines.append(f"        return {cls}({args}), off")  # (the class itself: a compiled call, no keywords parsed)
        return lines


def generate(path: str) -> str:
    """The source of ``methods.py`` for the spec XML at ``path``."""
    spec = parse_spec(path)
    em = _Emitter()
    body: list[str] = []
    names: list[str] = []
    responses: list[str] = []
    for c in spec.classes:
        if c.properties:
            body += em.properties(c)
            names.append(class_name(c.name, "properties"))
        for m in c.methods:
            body += em.method(m)
            names.append(class_name(m.class_name, m.name))
            if m.responses:
                rs = "".join(class_name(c.name, r) + ", " for r in m.responses).rstrip()
                responses.append(f"{class_name(c.name, m.name)}.RESPONSES = ({rs})")
    consts = []
    for name, value, kind in spec.constants:
        if kind is None:
            consts.append(f"{attr_name(name).upper()}: Final = {value}")
    codes = [(n, v, k) for n, v, k in spec.constants if k is not None]
    head = [
        f'"""AMQP {".".join(map(str, spec.version))} classes, methods, properties and constants.',
        "",
        "GENERATED by ``python -m amqp10.amqp091._generate`` from",
        "``amqp0-9-1.stripped.extended.xml`` (plus RabbitMQ's connection extensions); do not edit.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "import struct",
        "from typing import Final",
        "",
        "from .base import Method, Properties",
        "from .fields import (",
        "    DecodeError,",
        "    FieldTable,",
        "    decode_table,",
        "    encode_table,",
        "    get_longstr,",
        "    get_shortstr,",
        "    put_longstr,",
        "    put_shortstr,",
        ")",
        "",
        "__all__ = [",
        '    "HARD_ERRORS",',
        '    "METHODS",',
        '    "PROPERTIES",',
        '    "SOFT_ERRORS",',
        '    "ReplyCode",',
    ]
    head += [f'    "{n}",' for n in names]
    head += ["]", ""]
    head += consts
    head += [
        "",
        "",
        "class ReplyCode(enum.IntEnum):",
        '    """The spec\'s reply codes (``class`` soft-error: channel, hard-error: connection)."""',
        "",
    ]
    head += [f"    {attr_name(n).upper()} = {v}" for n, v, _ in codes]
    head += [
        "",
        "",
        "SOFT_ERRORS: Final = frozenset({"
        + ", ".join(f"ReplyCode.{attr_name(n).upper()}" for n, _, k in codes if k == "soft-error")
        + "})",
        '"""Channel-level errors: they close the channel only."""',
        "HARD_ERRORS: Final = frozenset({"
        + ", ".join(f"ReplyCode.{attr_name(n).upper()}" for n, _, k in codes if k == "hard-error")
        + "})",
        '"""Connection-level errors: they close the connection."""',
        "",
    ]
    # Final: a static in the compiled build, not a module dict lookup at each use
    head += [f'{st}: Final = struct.Struct(">{fmt}")' for fmt, st in sorted(em.structs.items())]
    tail = ["", ""]
    tail += responses
    tail += [
        "",
        "METHODS: Final[dict[int, type[Method]]] = {",
    ]
    tail += [f"    {n}.INDEX: {n}," for n in names if not n.endswith("Properties")]
    tail += [
        "}",
        '"""Every method class by ``INDEX`` (``class_id << 16 | method_id``)."""',
        "PROPERTIES: Final[dict[int, type[Properties]]] = {",
    ]
    tail += [f"    {n}.CLASS_ID: {n}," for n in names if n.endswith("Properties")]
    tail += ["}", '"""The content header properties class by class id."""', ""]
    return "\n".join(head + body + tail)


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(generate(sys.argv[1]))
