"""The code generated for composite types at import time.

From a composite class's ``FIELDS`` this module writes the source of a keyword-only
``__init__``, an encoder, a decoder from the described list the codec decoded, and
a decoder straight from the bytes, and ``exec``s it once per class (:func:`compile_composite`;
:mod:`.composite` installs and registers the results). :func:`generated_source`
shows that code for a class.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import codec
from ._typeinfo import (
    ACCEPT,
    COMPOSITES_BY_NAME,
    EXACT,
    PENDING_NAMES,
    Field,
    closed_choices,
    primitive_of,
    provider_set,
)
from .codec import TYPED_ENCODERS, Encoder
from .errors import DecodeError, EncodeError
from .primitives import Array, Described, symbol, ubyte, uint, ulong

if TYPE_CHECKING:
    from .composite import Composite

__all__ = ["compile_composite", "generated_source"]


# --- conversions done by the generated ``__init__`` -----------------------------------


def _to_symbol(v: Any) -> Any:
    """A ``str`` as a ``symbol``; anything else is left for the encoder to reject."""
    return symbol(v) if isinstance(v, str) and not isinstance(v, symbol) else v


def _to_bool(v: Any) -> Any:
    """A 0/1 ``int`` (such as :class:`~amqp10.types.Role`) as a ``bool``."""
    return bool(v) if type(v) is not bool and isinstance(v, int) and v in (0, 1) else v


def _multiple_init(prim: str) -> Callable[[Any], Any]:
    """Normalise a ``multiple`` field's value: a single value or a sequence -> a list."""
    elem = _to_symbol if prim == "symbol" else None

    def convert(v: Any) -> Any:
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, Array)):
            v = [v]
        return [elem(x) for x in v] if elem is not None else list(v)

    return convert


# --- encoding ---------------------------------------------------------------------------

_BI = struct.Struct(">BI").pack
_BQ = struct.Struct(">BQ").pack
_BB = struct.Struct(">BB").pack
_BH = struct.Struct(">BH").pack
_BII = struct.Struct(">BII").pack
# uint / ulong values 0..255 in their smallest encodings, ready to append
_UINT8 = [b"\x43"] + [bytes((0x52, i)) for i in range(1, 256)]
_ULONG8 = [b"\x44"] + [bytes((0x53, i)) for i in range(1, 256)]

_ARRAY_ELEMENT: dict[str, type] = {"symbol": symbol, "string": str, "uint": uint}
_UINTS = [uint(i) for i in range(256)]
_UBYTES = [ubyte(i) for i in range(256)]


def _typed_encoder(f: Field) -> Encoder:
    prim = primitive_of(f.type)
    enc = TYPED_ENCODERS.get(prim)
    if enc is None:  # a composite type such as ``error``: encoded as itself
        enc = TYPED_ENCODERS["*"]
    if not f.multiple:
        return enc
    elem_type = _ARRAY_ELEMENT.get(prim)
    check: tuple[type, ...]
    if prim in ("symbol", "string"):
        check = (str,)  # a str element of a symbol field travels as a symbol
    elif prim in ("ubyte", "ushort", "uint", "ulong"):
        check = (int,)
    else:
        check = ACCEPT.get(prim, (object,))

    def enc_multiple(buf: bytearray, v: Any) -> None:
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, Array)):
            v = [v]
        for x in v:
            if not isinstance(x, check) or (isinstance(x, bool) and bool not in check):
                raise EncodeError(f"{f.name} holds {f.type} values, not {type(x).__name__}")
        if elem_type is None:
            codec.encode_value(buf, list(v))
        else:
            codec.encode_value(buf, Array(elem_type, [elem_type(x) for x in v]))

    return enc_multiple


def _encode_lines(i: int, f: Field, prim: str, ns: dict[str, Any], ind: str) -> list[str]:
    """Code appending the encoding of the present (non-null, non-default) value ``a{i}``."""
    a = f"a{i}"
    if f.multiple:
        ns[f"_E{i}"] = _typed_encoder(f)
        return [f"{ind}_E{i}(buf, {a})"]
    if prim == "boolean":
        return [f"{ind}buf.append(0x41 if {a} else 0x42)"]
    if prim == "uint":
        return [
            f"{ind}if 0 <= {a} < 256:",
            f"{ind}    buf += _UINT8[{a}]",
            f"{ind}else:",
            f"{ind}    buf += _BI(0x70, {a})",
        ]
    if prim == "ulong":
        return [
            f"{ind}if 0 <= {a} < 256:",
            f"{ind}    buf += _ULONG8[{a}]",
            f"{ind}else:",
            f"{ind}    buf += _BQ(0x80, {a})",
        ]
    if prim == "ubyte":
        return [f"{ind}buf += _BB(0x50, {a})"]
    if prim == "ushort":
        return [f"{ind}buf += _BH(0x60, {a})"]
    if prim == "binary":
        ns[f"_E{i}"] = _typed_encoder(f)
        return [
            f"{ind}if type({a}) is bytes and len({a}) < 256:",
            f"{ind}    buf.append(0xA0)",
            f"{ind}    buf.append(len({a}))",
            f"{ind}    buf += {a}",
            f"{ind}else:",
            f"{ind}    _E{i}(buf, {a})",
        ]
    ns[f"_E{i}"] = _typed_encoder(f)
    return [f"{ind}_E{i}(buf, {a})"]


def _build_encoder(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of ``_encode(buf, self)``: descriptor, list header, the fields up to the last
    one present (an absent field, or one equal to its default, travels as null)."""
    fields = cls.FIELDS
    name = cls.AMQP_NAME
    code = cls.DESCRIPTOR_CODE
    desc = bytes((0x00, 0x53, code)) if code <= 0xFF else b"\x00\x80" + code.to_bytes(8, "big")
    n = len(fields)
    ns["_LIST0"] = desc + b"\x45"
    ns["_PFX"] = desc + b"\xc0\x00\x00"  # list8 header, size and count patched at the end
    d = len(desc)
    src = ["def _encode(buf, self):"]
    if n == 0:
        return [*src, "    buf += _LIST0"]
    mand = [i for i, f in enumerate(fields) if f.mandatory]
    n_min = mand[-1] + 1 if mand else 0  # every mandatory field is written (or reported)
    src += [f"    a{i} = self.{f.attr}" for i, f in enumerate(fields)]

    def is_false_default(f: Field) -> bool:
        return primitive_of(f.type) == "boolean" and f.default is False and not f.multiple

    def present(i: int) -> str:
        f = fields[i]
        if f.default is None:
            return f"a{i} is not None"
        if is_false_default(f):
            return f"a{i}"
        ns[f"_D{i}"] = f.default
        return f"(a{i} is not None and a{i} != _D{i})"

    # how many fields to write: up to the last present one, and every mandatory one
    if n > n_min:
        for k, i in enumerate(reversed(range(n_min, n))):
            src.append(f"    {'if' if k == 0 else 'elif'} {present(i)}:")
            src.append(f"        n = {i + 1}")
        src.append("    else:")
        if n_min == 0:
            src.append("        buf += _LIST0")
            src.append("        return")
        else:
            src.append(f"        n = {n_min}")
    else:
        src.append(f"    n = {n}")
    src.append("    start = len(buf)")
    src.append("    buf += _PFX")
    ind = "    "
    for i, f in enumerate(fields):
        if i >= n_min and i > 0:
            src.append(f"{ind}if n > {i}:")
            ind += "    "
        prim = primitive_of(f.type)
        if f.mandatory:
            src.append(f"{ind}if a{i} is None:")
            src.append(f"{ind}    raise EncodeError('{name}: {f.name} is mandatory')")
            src.append(f"{ind}else:")
            src += _encode_lines(i, f, prim, ns, ind + "    ")
        elif is_false_default(f):
            src.append(f"{ind}buf.append(0x41 if a{i} else 0x40)")
        else:
            absent = f"a{i} is None" if f.default is None else f"a{i} is None or a{i} == _D{i}"
            if f.default is not None:
                ns[f"_D{i}"] = f.default
            src.append(f"{ind}if {absent}:")
            src.append(f"{ind}    buf.append(0x40)")
            src.append(f"{ind}else:")
            src += _encode_lines(i, f, prim, ns, ind + "    ")
    src.append(f"    size = len(buf) - start - {d + 2}")
    src.append("    if size < 256:")
    src.append(f"        buf[start + {d + 1}] = size")
    src.append(f"        buf[start + {d + 2}] = n")
    src.append("    else:")
    src.append(f"        buf[start + {d}:start + {d + 3}] = _BII(0xD0, size + 3, n)")
    return src


# --- decoding -----------------------------------------------------------------------------


def _field_check(cls: type[Composite], i: int, f: Field, ns: dict[str, Any], ind: str) -> list[str]:
    """Code that checks the local ``a{i}`` (field ``f``) and fills in its default.

    The common case costs one ``type(x) is T`` test; a checker function runs only for
    a value of another type (to accept it leniently, or to raise :class:`DecodeError`
    naming the field). Empty when there is nothing to check or fill in.
    """
    name = cls.AMQP_NAME
    a = f"a{i}"
    prim = primitive_of(f.type)
    src: list[str] = []
    if f.mandatory:
        src.append(f"{ind}if {a} is None:")
        src.append(f"{ind}    raise DecodeError('{name}: mandatory field {f.name} is missing')")
    elif f.default is not None:
        ns[f"_D{i}"] = f.default
        src.append(f"{ind}if {a} is None:")
        src.append(f"{ind}    {a} = _D{i}")
    else:
        src.append(f"{ind}if {a} is None:")
        src.append(f"{ind}    pass")
    checks_from = len(src)
    if f.multiple:
        ns[f"_M{i}"] = _multiple_checker(name, f, prim)
        if prim in EXACT:
            ns[f"_P{i}"] = EXACT[prim]
            src.append(f"{ind}elif type({a}) is _P{i}:")
            src.append(f"{ind}    {a} = [{a}]")
        src.append(f"{ind}else:")
        src.append(f"{ind}    {a} = _M{i}({a})")
    elif prim in EXACT:
        ns[f"_P{i}"] = EXACT[prim]
        ns[f"_C{i}"] = _single_checker(name, f, prim)
        choices = closed_choices(f.type)
        if choices is None:
            src.append(f"{ind}elif type({a}) is not _P{i}:")
        else:
            ns[f"_V{i}"] = choices
            src.append(f"{ind}elif type({a}) is not _P{i} or {a} not in _V{i}:")
        src.append(f"{ind}    {a} = _C{i}({a})")
    elif prim in COMPOSITES_BY_NAME or prim in PENDING_NAMES:
        ns[f"_C{i}"] = _composite_checker(name, f, prim)
        known = COMPOSITES_BY_NAME.get(prim)
        if known is not None:
            ns[f"_P{i}"] = known
            src.append(f"{ind}elif type({a}) is not _P{i}:")
        else:
            src.append(f"{ind}else:")
        src.append(f"{ind}    {a} = _C{i}({a})")
    elif prim == "*" and f.requires is not None:
        ns[f"_R{i}"] = providers = provider_set(f.requires)
        ns[f"_C{i}"] = _requires_checker(name, f, providers)
        src.append(f"{ind}elif type({a}) not in _R{i}:")
        src.append(f"{ind}    {a} = _C{i}({a})")
    if len(src) == checks_from and src[-1] == f"{ind}    pass":
        del src[-2:]  # nothing to check, nothing to fill in
    return src


def _check_lines(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Code that checks the locals ``a0``, ``a1``, ... (:func:`_field_check`), then
    makes the instance ``self`` of them."""
    src: list[str] = []
    for i, f in enumerate(cls.FIELDS):
        src += _field_check(cls, i, f, ns, "    ")
    return [*src, *_make_lines(cls)]


def _make_lines(cls: type[Composite]) -> list[str]:
    """Code that makes the instance ``self`` of the checked locals ``a0``, ``a1``, ..."""
    return ["    self = _new(_cls)", *(f"    self.{f.attr} = a{i}" for i, f in enumerate(cls.FIELDS))]


def _build_decoder(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of ``_decode(v)``: the described list ``v`` -> an instance of ``cls``."""
    name = cls.AMQP_NAME
    n = len(cls.FIELDS)
    src = [
        "def _decode(v):",
        "    if type(v) is not list:",
        f"        raise DecodeError('{name}: expected a list, got ' + type(v).__name__)",
    ]
    if n == 0:
        return [*src, "    return _new(_cls)"]
    ns["_PAD"] = [[None] * (n - k) for k in range(n)]
    src += [
        "    n = len(v)",
        f"    if n < {n}:",
        "        v = v + _PAD[n]",
        f"    elif n > {n}:",  # fields of a later version of the spec: ignored
        f"        v = v[:{n}]",
        f"    {', '.join(f'a{i}' for i in range(n))}{',' if n == 1 else ''} = v",
        *_check_lines(cls, ns),
        "    return self",
    ]
    return src


# Inline parsing of the common encodings of a field's type; any other constructor
# goes through the codec's table (which also raises for invalid ones).
_RAW_PARSE: dict[str, list[tuple[int, list[str]]]] = {
    "uint": [
        (0x52, ["{a} = _UINTS[data[p + 1]]", "p += 2"]),
        (0x43, ["{a} = _UINT0", "p += 1"]),
        (0x70, ["{a} = _int_new(_uint, _unpack_I(data, p + 1)[0])", "p += 5"]),
    ],
    "ulong": [
        (0x53, ["{a} = _int_new(_ulong, data[p + 1])", "p += 2"]),
        (0x44, ["{a} = _ULONG0", "p += 1"]),
        (0x80, ["{a} = _int_new(_ulong, _unpack_Q(data, p + 1)[0])", "p += 9"]),
    ],
    "ubyte": [(0x50, ["{a} = _UBYTES[data[p + 1]]", "p += 2"])],
    "boolean": [(0x41, ["{a} = True", "p += 1"]), (0x42, ["{a} = False", "p += 1"])],
    "binary": [(0xA0, ["q = p + 2", "p = q + data[p + 1]", "{a} = bytes(data[q:p])"])],
}


def _build_raw_decoder(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of ``_decode_raw(data, pos, depth, lim) -> (value, end)``.

    It decodes the described list straight from the bytes (``pos`` is its
    constructor; ``depth`` is the depth the codec would decode the list at), without
    building the intermediate list: common encodings are parsed inline, and anything
    else (a list32, an invalid or unusual encoding, a header that breaks a limit) is
    handed to the codec, so that errors and limits stay the codec's own.
    """
    fields = cls.FIELDS
    n = len(fields)
    src = [
        "def _decode_raw(data, pos, depth, lim):",
        "    if data[pos] == 0x45:",  # list0: every field absent
        f"        return {'_new(_cls)' if n == 0 else '_decode([])'}, pos + 1",
        "    if data[pos] != 0xC0:",
        "        v, end = _DECODERS[data[pos]](data, pos + 1, depth, lim)",
        "        return _decode(v), end",
        "    size = data[pos + 1]",
        "    count = data[pos + 2]",
        "    end = pos + 2 + size",
        "    if count >= size or end > len(data) or count > lim.max_elements or depth >= lim.max_depth:",
        "        v, end = _DECODERS[0xC0](data, pos + 1, depth, lim)  # let the codec say why",
        "        return _decode(v), end",
        "    p = pos + 3",
        "    d = depth + 1",
    ]
    if n == 0:
        src += [
            "    for _ in range(count):",
            "        _, p = _DECODERS[data[p]](data, p + 1, d, lim)",
        ]
    else:
        # a field starts at its default (None if it has none), which a null leaves; a value
        # parsed inline has its exact type already (only a closed choice is checked), and
        # one from the codec's table is checked as the list decoder checks it
        nones = []
        for i, f in enumerate(fields):
            if f.mandatory or f.default is None:
                nones.append(f"a{i}")
            else:
                ns[f"_D{i}"] = f.default
                src.append(f"    a{i} = _D{i}")
        if nones:
            src.append(f"    {' = '.join(nones)} = None")
        ind = "    "
        for i, f in enumerate(fields):
            a = f"a{i}"
            check = _field_check(cls, i, f, ns, ind + "        ")
            src.append(f"{ind}if count > {i}:")
            ind += "    "
            src.append(f"{ind}c = data[p]")
            src.append(f"{ind}if c == 0x40:")
            src.append(f"{ind}    p += 1")
            parse = [] if f.multiple else _RAW_PARSE.get(primitive_of(f.type), [])
            for code, stmts in parse:
                src.append(f"{ind}elif c == {code:#04x}:")
                src += [f"{ind}    {st.format(a=a)}" for st in stmts]
                if f"_V{i}" in ns:  # a closed choice (its checker raises for any other value)
                    src.append(f"{ind}    if {a} not in _V{i}:")
                    src.append(f"{ind}        {a} = _C{i}({a})")
            src.append(f"{ind}else:")
            src.append(f"{ind}    {a}, p = _DECODERS[c](data, p + 1, d, lim)")
            src += check
        src.append(f"{ind}if count > {n}:")  # fields of a later version of the spec: ignored
        src.append(f"{ind}    for _ in range(count - {n}):")
        src.append(f"{ind}        _, p = _DECODERS[data[p]](data, p + 1, d, lim)")
    src += [
        "    if p != end:",
        "        raise DecodeError(f'list elements take {p - end:+d} bytes more than its size')",
    ]
    if n == 0:
        return [*src, "    return _new(_cls), end"]
    for i, f in enumerate(fields):
        if f.mandatory:  # (absent, or null)
            src.append(f"    if a{i} is None:")
            src.append(f"        raise DecodeError('{cls.AMQP_NAME}: mandatory field {f.name} is missing')")
    return [*src, *_make_lines(cls), "    return self, end"]


def _single_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    accept = ACCEPT[prim]
    choices = closed_choices(f.type)

    def check(x: Any) -> Any:
        if type(x) not in accept:
            if prim == "symbol" and type(x) is str:
                x = symbol(x)  # lenient: a string where a symbol belongs
            else:
                raise DecodeError(
                    f"{owner}: field {f.name} must be {f.type}, got {type(x).__name__}"
                )
        if choices is not None and x not in choices:
            raise DecodeError(f"{owner}: field {f.name} has no {f.type} choice {x!r}")
        return x

    return check


def _composite_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    def check(x: Any) -> Any:
        cls = COMPOSITES_BY_NAME.get(prim)
        if cls is not None and type(x) is not cls:
            raise DecodeError(f"{owner}: field {f.name} must be {f.type}, got {type(x).__name__}")
        return x

    return check


def _requires_checker(owner: str, f: Field, providers: set[type]) -> Callable[[Any], Any]:
    def check(x: Any) -> Any:
        # a described value of a type we do not know may be an extension that provides
        # the archetype; with no known providers at all, anything goes
        if type(x) is Described or not providers:
            return x
        raise DecodeError(
            f"{owner}: field {f.name} must be a {f.requires}, got {type(x).__name__}"
        )

    return check


def _multiple_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    accept = ACCEPT.get(prim)
    exact = EXACT.get(prim)

    def check(x: Any) -> Any:
        if type(x) is Array:
            if x.element_type is exact and x.descriptor is None:
                return list(x.elements)  # every element already has the exact type
            items = list(x.elements)
        else:
            items = [x]
        if accept is not None:
            for i, e in enumerate(items):
                if type(e) not in accept:
                    if prim == "symbol" and type(e) is str:
                        items[i] = symbol(e)
                    else:
                        raise DecodeError(
                            f"{owner}: field {f.name} must hold {f.type} values, "
                            f"got {type(e).__name__}"
                        )
        return items

    return check


def _build_init(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of the keyword-only ``__init__`` (mandatory fields have no default).

    ``None`` for a field with a default means the default, as on the wire; symbols
    given as ``str``, roles given as :class:`~amqp10.types.Role` and single values of
    ``multiple`` fields are normalised, so that a value compares equal to its decoding.
    """
    params, body = [], []
    for i, f in enumerate(cls.FIELDS):
        ns[f"_D{i}"] = f.default
        x = f.attr
        params.append(x if f.mandatory else f"{x}=_D{i}")
        prim = primitive_of(f.type)
        # (condition, statement) pairs of one if/elif chain, run on the argument
        fix: list[tuple[str, str]] = []
        if f.default is not None:
            fix.append((f"{x} is None", f"{x} = _D{i}"))
        not_none = "" if fix else f"{x} is not None and "
        if f.multiple:
            ns[f"_I{i}"] = _multiple_init(prim)
            fix.append((f"{x} is not None", f"{x} = _I{i}({x})"))
        elif prim == "symbol":
            fix.append((f"{not_none}type({x}) is not _symbol", f"{x} = _to_symbol({x})"))
        elif prim == "boolean":
            fix.append(
                (f"{not_none}{x} is not True and {x} is not False", f"{x} = _to_bool({x})")
            )
        for k, (cond, stmt) in enumerate(fix):
            body.append(f"    {'elif' if k else 'if'} {cond}:")
            body.append(f"        {stmt}")
        body.append(f"    self.{x} = {x}")
    if not params:
        return ["def __init__(self):", "    pass"]
    return [f"def __init__(self, *, {', '.join(params)}):", *body]


def compile_composite(cls: type[Composite]) -> tuple[Callable[..., None], Encoder, Any, Any]:
    """Generate ``__init__``, the encoder, the decoder from a list and the decoder from
    bytes of a composite class (:mod:`.composite` installs and registers them)."""
    ns: dict[str, Any] = {
        "DecodeError": DecodeError,
        "EncodeError": EncodeError,
        "_new": object.__new__,
        "_cls": cls,
        "_symbol": symbol,
        "_to_symbol": _to_symbol,
        "_to_bool": _to_bool,
        "_BI": _BI,
        "_BQ": _BQ,
        "_BB": _BB,
        "_BH": _BH,
        "_BII": _BII,
        "_UINT8": _UINT8,
        "_ULONG8": _ULONG8,
        "_DECODERS": codec.DECODERS,
        "_UINTS": _UINTS,
        "_UBYTES": _UBYTES,
        "_UINT0": _UINTS[0],
        "_ULONG0": ulong(0),
        "_int_new": int.__new__,
        "_uint": uint,
        "_ulong": ulong,
        "_unpack_I": struct.Struct(">I").unpack_from,
        "_unpack_Q": struct.Struct(">Q").unpack_from,
    }
    init_ns = dict(ns)
    exec("\n".join(_build_init(cls, init_ns)), init_ns)
    enc_ns = dict(ns)
    exec("\n".join(_build_encoder(cls, enc_ns)), enc_ns)
    dec_ns = dict(ns)
    exec("\n".join(_build_decoder(cls, dec_ns)), dec_ns)
    exec("\n".join(_build_raw_decoder(cls, dec_ns)), dec_ns)
    init = init_ns["__init__"]
    init.__qualname__ = f"{cls.__name__}.__init__"
    return init, enc_ns["_encode"], dec_ns["_decode"], dec_ns["_decode_raw"]


def generated_source(cls: type[Composite]) -> str:
    """The generated ``__init__``, encoder and decoder of ``cls`` (for debugging)."""
    ns: dict[str, Any] = {}
    builders = (_build_init, _build_encoder, _build_decoder, _build_raw_decoder)
    return "\n\n".join("\n".join(build(cls, ns)) for build in builders)
