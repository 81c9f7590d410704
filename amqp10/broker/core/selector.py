"""Message selectors: the JMS selector language and the OASIS filter expressions, compiled once.

:func:`parse` reads a selector into a small tree of frozen nodes (:func:`unparse`
writes one back); :func:`compile_selector` turns the tree into a tree of
closures, so evaluating a message does no parsing and looks at nothing the
selector does not name. What an identifier reads is chosen at compile time
(:func:`jms_field`, :func:`sql_field`): application properties through
:attr:`QueuedMessage.headers`, the header and properties fields through
:meth:`QueuedMessage.field` (both read once per message, never the body).

Two dialects share the grammar:

``jms`` — the JMS 2.0 message selector (§3.8.1.1), as ``apache.org:selector-filter:string``
    carries it: identifiers are application properties, the JMS header names
    (``JMSPriority``, ``JMSCorrelationID``…), the JMSX names, and the ``amqp.FIELD``
    form of the header and properties fields (``amqp.correlation_id``).
``sql`` — the OASIS "AMQP Filter Expressions v1.0" SQL filter (``amqp:sql-filter``):
    sections are named (``header.priority``/``h.priority``, ``properties.group-id``/
    ``p.group-id``, ``application_properties.key``/``a.key``; a bare name is an
    application property), and ``%``, ``!=`` and ``UTC()`` are added.

Literals are JMS's: strings in single quotes (``''`` is a quote), exact numbers in Java's
integer syntax (``57``, ``10L``, ``0x1F``, octal ``017``; the range of a long), approximate
numbers in Java's floating-point syntax (``7E3``, ``-57.9E2``, ``.5``, ``2f``), ``TRUE``
and ``FALSE``. Keywords are case-insensitive, identifiers are not.

Evaluation follows SQL's three-valued logic: a missing property is NULL, which
makes comparisons and arithmetic *unknown*; ``AND``/``OR``/``NOT`` combine
true, false and unknown by the JMS truth tables; only *true* selects a message.
Comparing values of unlike types (a string with a number, a boolean with a
number) is *false*, not an error; arithmetic on non-numbers is unknown, and so
is division by zero. Exact numbers divide as Java's longs do (truncating).
Strings order by code point (an extension JMS leaves out and Artemis and
RabbitMQ allow); booleans compare only for equality.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "Between",
    "Binary",
    "Call",
    "Ident",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Node",
    "Selector",
    "SelectorError",
    "Unary",
    "compile_selector",
    "jms_field",
    "match_properties",
    "parse",
    "sql_field",
    "unparse",
]

LONG_MAX = 2**63 - 1


class SelectorError(ValueError):
    """A selector that does not parse: ``column`` (1-based) is where, ``expected`` what was wanted."""

    def __init__(self, text: str, column: int, expected: str, found: str) -> None:
        self.text = text
        self.column = column
        self.expected = expected
        self.found = found
        super().__init__(f"selector error at column {column}: expected {expected}, found {found}")


# -- the tree ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    """A string, exact (int) or approximate (float) number, or boolean."""

    value: str | int | float | bool


@dataclass(frozen=True, slots=True)
class Ident:
    """An identifier: a property or a message field (resolved when compiled)."""

    name: str


@dataclass(frozen=True, slots=True)
class Unary:
    """``-x``, ``+x`` or ``NOT x``."""

    op: str
    operand: Node


@dataclass(frozen=True, slots=True)
class Binary:
    """Arithmetic (``+ - * / %``), comparison (``= <> < <= > >=``) or ``AND``/``OR``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Between:
    """``expr [NOT] BETWEEN low AND high``."""

    expr: Node
    low: Node
    high: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    """``expr [NOT] IN (literal, ...)``."""

    expr: Node
    items: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    """``expr [NOT] LIKE 'pattern' [ESCAPE 'c']``."""

    expr: Node
    pattern: str
    escape: str | None = None
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    """``expr IS [NOT] NULL``."""

    expr: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """A function call (the SQL dialect's ``UTC()``: now, in ms since the epoch)."""

    name: str


Node = Literal | Ident | Unary | Binary | Between | In | Like | IsNull | Call

# -- the lexer --------------------------------------------------------------------------------

KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"})
_OPERATORS = ("<>", "<=", ">=", "!=", "=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ",")
# longest first: "<>" before "<"
_DIALECT_OPS = {"jms": tuple(o for o in _OPERATORS if o not in ("!=", "%")), "sql": _OPERATORS}
# Java literal syntax (JMS says exact and approximate literals use it): decimal, hex and
# octal longs with an optional L; doubles with an optional exponent and f/d suffix
_NUMBER = re.compile(
    r"""(?P<hex>0[xX][0-9a-fA-F]+[lL]?)
      | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?|\d+[eE][+-]?\d+[fFdD]?|\d+[fFdD])
      | (?P<int>\d+[lL]?)""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "num", "str", "ident", "kw", "op", "end"
    value: Any
    pos: int  # 0-based offset in the text
    text: str  # as written, for messages


def _describe(t: _Token) -> str:
    return "the end of the selector" if t.kind == "end" else repr(t.text)


def _tokens(text: str, dialect: str) -> list[_Token]:
    ops = _DIALECT_OPS[dialect]
    out: list[_Token] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "'":
            j = i + 1
            parts: list[str] = []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise SelectorError(text, i + 1, "a closing quote for the string", "the end of the selector")
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == "'":  # '' is a quote inside the string
                    parts.append("'")
                    j = k + 2
                    continue
                break
            out.append(_Token("str", "".join(parts), i, text[i : k + 1]))
            i = k + 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m = _NUMBER.match(text, i)
            assert m is not None
            word = m.group()
            if m.lastgroup == "float":
                value: int | float = float(word.rstrip("fFdD"))
                if value == float("inf"):
                    raise SelectorError(text, i + 1, "a number in the range of a double", repr(word))
            elif m.lastgroup == "hex":
                value = int(word.rstrip("lL")[2:], 16)
            else:
                digits = word.rstrip("lL")
                if len(digits) > 1 and digits[0] == "0":
                    if any(d in "89" for d in digits):
                        raise SelectorError(text, i + 1, "an octal number (digits 0-7)", repr(word))
                    value = int(digits, 8)
                else:
                    value = int(digits)
            end = m.end()
            if end < n and (text[end].isalnum() or text[end] in "_$."):
                raise SelectorError(text, end + 1, "an operator or the end of the number", repr(text[i : end + 1]))
            out.append(_Token("num", value, i, word))
            i = end
            continue
        if c.isalpha() or c in "_$":
            j = i + 1
            while j < n:
                d = text[j]
                if d.isalnum() or d in "_$.":
                    j += 1
                elif d == "-" and dialect == "sql" and "." in text[i:j] and j + 1 < n and text[j + 1].isalpha():
                    j += 1  # properties.group-id: the SQL dialect's section field names
                else:
                    break
            word = text[i:j]
            upper = word.upper()
            if upper in KEYWORDS:
                out.append(_Token("kw", upper, i, word))
            else:
                out.append(_Token("ident", word, i, word))
            i = j
            continue
        for op in ops:
            if text.startswith(op, i):
                out.append(_Token("op", "<>" if op == "!=" else op, i, op))
                i += len(op)
                break
        else:
            raise SelectorError(text, i + 1, "a literal, an identifier, an operator or a parenthesis", repr(c))
    out.append(_Token("end", None, n, ""))
    return out


# -- the parser -------------------------------------------------------------------------------

_COMPARISONS = frozenset({"=", "<>", "<", "<=", ">", ">="})


class _Parser:
    def __init__(self, text: str, dialect: str) -> None:
        self.text = text
        self.dialect = dialect
        self.toks = _tokens(text, dialect)
        self.i = 0

    @property
    def tok(self) -> _Token:
        return self.toks[self.i]

    def fail(self, expected: str) -> SelectorError:
        t = self.tok
        return SelectorError(self.text, t.pos + 1, expected, _describe(t))

    def accept(self, kind: str, value: Any = None) -> _Token | None:
        t = self.tok
        if t.kind == kind and (value is None or t.value == value):
            self.i += 1
            return t
        return None

    def expect(self, kind: str, value: Any, expected: str) -> _Token:
        t = self.accept(kind, value)
        if t is None:
            raise self.fail(expected)
        return t

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise self.fail("an expression")
        node = self.or_()
        if self.tok.kind != "end":
            raise self.fail("an operator, AND, OR or the end of the selector")
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.accept("kw", "OR"):
            node = Binary("OR", node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.accept("kw", "AND"):
            node = Binary("AND", node, self.not_())
        return node

    def not_(self) -> Node:
        if self.accept("kw", "NOT"):
            return Unary("NOT", self.not_())
        return self.predicate()

    def predicate(self) -> Node:
        left = self.additive()
        t = self.tok
        if t.kind == "op" and t.value in _COMPARISONS:
            self.i += 1
            return Binary(t.value, left, self.additive())
        if self.accept("kw", "IS"):
            negated = self.accept("kw", "NOT") is not None
            self.expect("kw", "NULL", "NULL")
            return IsNull(left, negated)
        negated = False
        if t.kind == "kw" and t.value == "NOT":
            nxt = self.toks[self.i + 1]
            if nxt.kind == "kw" and nxt.value in ("BETWEEN", "IN", "LIKE"):
                self.i += 1
                negated = True
            else:
                raise SelectorError(self.text, nxt.pos + 1, "BETWEEN, IN or LIKE after NOT", _describe(nxt))
        if self.accept("kw", "BETWEEN"):
            low = self.additive()
            self.expect("kw", "AND", "AND (of BETWEEN ... AND ...)")
            return Between(left, low, self.additive(), negated)
        if self.accept("kw", "IN"):
            self.expect("op", "(", "'(' to open the IN list")
            items = [self.in_item()]
            while self.accept("op", ","):
                items.append(self.in_item())
            self.expect("op", ")", "',' or ')' to close the IN list")
            return In(left, tuple(items), negated)
        if self.accept("kw", "LIKE"):
            pattern = self.expect("str", None, "a string literal (the LIKE pattern)")
            escape: str | None = None
            if self.accept("kw", "ESCAPE"):
                e = self.expect("str", None, "a string literal (the ESCAPE character)")
                if len(e.value) != 1:
                    raise SelectorError(self.text, e.pos + 1, "a single ESCAPE character", repr(e.text))
                escape = e.value
            _like_regex(pattern.value, escape, self.text, pattern.pos)  # reject bad patterns now
            return Like(left, pattern.value, escape, negated)
        if negated:  # pragma: no cover - handled above
            raise self.fail("BETWEEN, IN or LIKE")
        return left

    def in_item(self) -> Literal:
        t = self.tok
        sign = 1
        if t.kind == "op" and t.value in ("+", "-"):
            sign = -1 if t.value == "-" else 1
            self.i += 1
            t = self.tok
            if t.kind != "num":
                raise self.fail("a number")
        if t.kind in ("str", "num"):
            self.i += 1
            value = t.value * sign if t.kind == "num" else t.value
            if t.kind == "num" and type(value) is int and not (-LONG_MAX - 1 <= value <= LONG_MAX):
                raise SelectorError(self.text, t.pos + 1, "a number in the range of a long", repr(t.text))
            return Literal(value)
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            self.i += 1
            return Literal(t.value == "TRUE")
        raise self.fail("a literal in the IN list")

    def additive(self) -> Node:
        node = self.multiplicative()
        while True:
            t = self.tok
            if t.kind == "op" and t.value in ("+", "-"):
                self.i += 1
                node = Binary(t.value, node, self.multiplicative())
            else:
                return node

    def multiplicative(self) -> Node:
        node = self.unary()
        while True:
            t = self.tok
            if t.kind == "op" and t.value in ("*", "/", "%"):
                self.i += 1
                node = Binary(t.value, node, self.unary())
            else:
                return node

    def unary(self) -> Node:
        t = self.tok
        if t.kind == "op" and t.value in ("+", "-"):
            self.i += 1
            nxt = self.tok
            if t.value == "-" and nxt.kind == "num" and nxt.value == LONG_MAX + 1:
                self.i += 1  # -9223372036854775808: Long.MIN_VALUE is written this way
                return Unary("-", Literal(LONG_MAX + 1))
            return Unary(t.value, self.unary())
        return self.primary()

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "num":
            if type(t.value) is int and t.value > LONG_MAX:
                raise SelectorError(self.text, t.pos + 1, "a number in the range of a long", repr(t.text))
            self.i += 1
            return Literal(t.value)
        if t.kind == "str":
            self.i += 1
            return Literal(t.value)
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            self.i += 1
            return Literal(t.value == "TRUE")
        if t.kind == "ident":
            self.i += 1
            if self.dialect == "sql" and self.tok.kind == "op" and self.tok.value == "(":
                if t.value.upper() != "UTC":
                    raise SelectorError(self.text, t.pos + 1, "a known function (UTC)", repr(t.text))
                self.i += 1
                self.expect("op", ")", "')' (UTC takes no arguments)")
                return Call("UTC")
            return Ident(t.value)
        if self.accept("op", "("):
            node = self.or_()
            self.expect("op", ")", "')'")
            return node
        raise self.fail("a literal, an identifier or '('")


def parse(text: str, dialect: str = "jms") -> Node:
    """The tree of selector ``text``; raises :class:`SelectorError` naming the column."""
    if dialect not in _DIALECT_OPS:
        raise ValueError(f"unknown selector dialect {dialect!r}")
    return _Parser(text, dialect).parse()


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _literal_text(v: str | int | float | bool) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return _quote(v)
    return repr(v)


def unparse(node: Node) -> str:
    """Selector text for ``node`` (fully parenthesised: ``parse(unparse(n)) == n``)."""
    if isinstance(node, Literal):
        return _literal_text(node.value)
    if isinstance(node, Ident):
        return node.name
    if isinstance(node, Call):
        return f"{node.name}()"
    if isinstance(node, Unary):
        sep = " " if node.op == "NOT" else ""
        return f"({node.op}{sep}{unparse(node.operand)})"
    if isinstance(node, Binary):
        return f"({unparse(node.left)} {node.op} {unparse(node.right)})"
    neg = "NOT " if getattr(node, "negated", False) else ""
    if isinstance(node, Between):
        return f"({unparse(node.expr)} {neg}BETWEEN {unparse(node.low)} AND {unparse(node.high)})"
    if isinstance(node, In):
        items = ", ".join(_literal_text(i.value) for i in node.items)
        return f"({unparse(node.expr)} {neg}IN ({items}))"
    if isinstance(node, Like):
        esc = f" ESCAPE {_quote(node.escape)}" if node.escape is not None else ""
        return f"({unparse(node.expr)} {neg}LIKE {_quote(node.pattern)}{esc})"
    assert isinstance(node, IsNull)
    return f"({unparse(node.expr)} IS {'NOT ' if node.negated else ''}NULL)"


# -- values -----------------------------------------------------------------------------------
# a value is None (NULL: unknown), bool, a number (int or float, never bool), str, or
# something else (uuid, bytes...), which equals only a value of its own type


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _eq(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str):
        return isinstance(b, str) and str.__eq__(a, b)
    if _is_num(a):
        return _is_num(b) and a == b
    return type(a) is type(b) and bool(a == b)


def _ordering(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool | None]:
    def compare(a: Any, b: Any) -> bool | None:
        if a is None or b is None:
            return None
        if _is_num(a):
            return _is_num(b) and op(a, b)
        if isinstance(a, str) and isinstance(b, str):
            return op(str(a), str(b))
        return False

    return compare


def _kind(v: Any) -> type:
    if isinstance(v, bool):
        return bool
    if isinstance(v, str):
        return str
    if _is_num(v):
        return float
    return type(v)


def _ne(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if _kind(a) is not _kind(b):
        return False  # unlike types: the comparison is false, whichever way it is put
    return not _eq(a, b)


_COMPARE: dict[str, Callable[[Any, Any], bool | None]] = {
    "=": _eq,
    "<>": _ne,
    "<": _ordering(lambda a, b: a < b),
    "<=": _ordering(lambda a, b: a <= b),
    ">": _ordering(lambda a, b: a > b),
    ">=": _ordering(lambda a, b: a >= b),
}


def _div(a: Any, b: Any) -> Any:
    if not b:
        return None
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # Java's long division truncates toward zero
        return q if (a < 0) == (b < 0) else -q
    return a / b


def _mod(a: Any, b: Any) -> Any:
    if not b or not (isinstance(a, int) and isinstance(b, int)):
        return None
    r = abs(a) % abs(b)  # Java's remainder takes the dividend's sign
    return -r if a < 0 else r


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _div,
    "%": _mod,
}


def _truth(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _like_regex(pattern: str, escape: str | None, text: str = "", pos: int = 0) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape:
            i += 1
            if i == len(pattern):
                raise SelectorError(text, pos + 1, "a character after the ESCAPE character", "the end of the pattern")
            out.append(re.escape(pattern[i]))
        elif c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


# -- compiling --------------------------------------------------------------------------------

Eval = Callable[[Any], Any]
"""A compiled node: message in, value (None for NULL/unknown) out."""
Resolver = Callable[[str], Eval]
"""What an identifier reads, chosen once at compile time."""


class Fields(Protocol):
    """What a selector reads from a message (the broker's :class:`QueuedMessage` has both)."""

    @property
    def headers(self) -> Mapping[str, Any]: ...

    def field(self, name: str) -> Any: ...


def _app_property(name: str) -> Eval:
    def read(m: Any) -> Any:
        return m.headers.get(name)

    return read


def _field(name: str) -> Eval:
    def read(m: Any) -> Any:
        return m.field(name)

    return read


def _ms(name: str) -> Eval:
    """A timestamp field as JMS shows it: ms since the epoch, 0 when absent."""

    def read(m: Any) -> Any:
        v = m.field(name)
        return 0 if v is None else int(v)

    return read


def _jms_id(name: str) -> Eval:
    """message-id/correlation-id as a JMS string (Qpid JMS's ``ID:AMQP_*:`` forms for non-strings)."""

    def read(m: Any) -> Any:
        v = m.field(name)
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, int):
            return f"ID:AMQP_ULONG:{v}"
        if isinstance(v, bytes):
            return f"ID:AMQP_BINARY:{v.hex().upper()}"
        return f"ID:AMQP_UUID:{v}"

    return read


def _delivery_mode(m: Any) -> Any:
    return "PERSISTENT" if m.field("durable") else "NON_PERSISTENT"


def _redelivered(m: Any) -> Any:
    return bool(m.field("delivery_count"))


def _delivery_count_jmsx(m: Any) -> Any:
    return int(m.field("delivery_count") or 0) + 1


def _user_id(m: Any) -> Any:
    v = m.field("user_id")
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


FIELDS = (
    "message_id",
    "user_id",
    "to",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "absolute_expiry_time",
    "creation_time",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
    "durable",
    "priority",
    "ttl",
    "first_acquirer",
    "delivery_count",
)
"""The header and properties fields (1.0 names, underscored) :meth:`Fields.field` answers."""
HEADER_FIELDS = frozenset({"durable", "priority", "ttl", "first_acquirer", "delivery_count"})

_JMS_HEADERS: dict[str, Eval] = {
    "JMSMessageID": _jms_id("message_id"),
    "JMSCorrelationID": _jms_id("correlation_id"),
    "JMSPriority": _field("priority"),
    "JMSTimestamp": _ms("creation_time"),
    "JMSExpiration": _ms("absolute_expiry_time"),
    "JMSType": _field("subject"),
    "JMSDeliveryMode": _delivery_mode,
    "JMSDestination": _field("to"),
    "JMSReplyTo": _field("reply_to"),
    "JMSRedelivered": _redelivered,
    "JMSXUserID": _user_id,
    "JMSXGroupID": _field("group_id"),
    "JMSXGroupSeq": _field("group_sequence"),
    "JMSXDeliveryCount": _delivery_count_jmsx,
}


def jms_field(name: str) -> Eval:
    """What identifier ``name`` reads in a JMS selector: a JMS header, ``amqp.FIELD``, or an
    application property."""
    reader = _JMS_HEADERS.get(name)
    if reader is not None:
        return reader
    if name.startswith("amqp."):
        f = name[5:]
        if f in FIELDS:
            return _user_id if f == "user_id" else _field(f)
    return _app_property(name)


_SECTIONS = {"header": "h", "h": "h", "properties": "p", "p": "p", "application_properties": "a", "a": "a"}


def sql_field(name: str) -> Eval:
    """What identifier ``name`` reads in an OASIS SQL filter: ``header.F``/``h.F``,
    ``properties.F``/``p.F``, ``application_properties.K``/``a.K``, or (bare) a property."""
    section, dot, rest = name.partition(".")
    kind = _SECTIONS.get(section) if dot else None
    if kind is None:
        return _app_property(name)
    if kind == "a":
        return _app_property(rest)
    f = rest.replace("-", "_")
    if f in FIELDS and (f in HEADER_FIELDS) == (kind == "h"):
        return _user_id if f == "user_id" else _field(f)
    raise KeyError(rest)


_RESOLVERS: dict[str, Resolver] = {"jms": jms_field, "sql": sql_field}


def _compile(node: Node, resolve: Resolver) -> Eval:
    if isinstance(node, Literal):
        value = node.value
        return lambda m: value
    if isinstance(node, Ident):
        return resolve(node.name)
    if isinstance(node, Call):
        return lambda m: int(time.time() * 1000)
    if isinstance(node, Unary):
        f = _compile(node.operand, resolve)
        if node.op == "NOT":

            def not_(m: Any) -> Any:
                v = _truth(f(m))
                return None if v is None else not v

            return not_
        neg = node.op == "-"

        def sign(m: Any) -> Any:
            v = f(m)
            if not _is_num(v):
                return None
            return -v if neg else v

        return sign
    if isinstance(node, Binary):
        lf = _compile(node.left, resolve)
        rf = _compile(node.right, resolve)
        op = node.op
        if op == "AND":

            def and_(m: Any) -> Any:
                a = _truth(lf(m))
                if a is False:
                    return False
                b = _truth(rf(m))
                if b is False:
                    return False
                return True if a and b else None

            return and_
        if op == "OR":

            def or_(m: Any) -> Any:
                a = _truth(lf(m))
                if a is True:
                    return True
                b = _truth(rf(m))
                if b is True:
                    return True
                return False if a is False and b is False else None

            return or_
        if op in _COMPARE:
            cmp = _COMPARE[op]
            return lambda m: cmp(lf(m), rf(m))
        arith = _ARITH[op]

        def arithmetic(m: Any) -> Any:
            a = lf(m)
            if not _is_num(a):
                return None
            b = rf(m)
            if not _is_num(b):
                return None
            try:
                return arith(a, b)
            except OverflowError:  # an exact number too big to mix with a double
                return None

        return arithmetic
    if isinstance(node, Between):
        ef = _compile(node.expr, resolve)
        lo = _compile(node.low, resolve)
        hi = _compile(node.high, resolve)
        ge = _COMPARE[">="]
        le = _COMPARE["<="]
        negated = node.negated

        def between(m: Any) -> Any:
            v = ef(m)
            a = ge(v, lo(m))
            b = le(v, hi(m))
            r = False if (a is False or b is False) else (True if (a and b) else None)
            return r if r is None or not negated else not r

        return between
    if isinstance(node, In):
        ef = _compile(node.expr, resolve)
        items = tuple(i.value for i in node.items)
        negated = node.negated

        def in_(m: Any) -> Any:
            v = ef(m)
            if v is None:
                return None
            r = any(_eq(v, i) for i in items)
            return not r if negated else r

        return in_
    if isinstance(node, Like):
        ef = _compile(node.expr, resolve)
        match = _like_regex(node.pattern, node.escape).fullmatch
        negated = node.negated

        def like(m: Any) -> Any:
            v = ef(m)
            if v is None:
                return None
            if not isinstance(v, str):
                return False
            r = match(v) is not None
            return not r if negated else r

        return like
    assert isinstance(node, IsNull)
    ef = _compile(node.expr, resolve)
    if node.negated:
        return lambda m: ef(m) is not None
    return lambda m: ef(m) is None


class Selector:
    """A compiled selector: call it with a message; true only if the selector is true for it."""

    __slots__ = ("_eval", "dialect", "source", "tree")

    def __init__(self, source: str, tree: Node, evaluate: Eval, dialect: str) -> None:
        self.source = source
        self.tree = tree
        self.dialect = dialect
        self._eval = evaluate

    def evaluate(self, msg: Any) -> Any:
        """The selector's value for ``msg``: True, False or None (unknown)."""
        return self._eval(msg)

    def __call__(self, msg: Any) -> bool:
        return self._eval(msg) is True

    def __repr__(self) -> str:
        return f"Selector({self.source!r})"


def compile_selector(text: str, dialect: str = "jms", *, resolve: Resolver | None = None) -> Selector:
    """Parse and compile ``text``; raises :class:`SelectorError` (naming the column) if it does
    not parse, or names a field its dialect does not have."""
    tree = parse(text, dialect)
    try:
        evaluate = _compile(tree, resolve or _RESOLVERS[dialect])
    except KeyError as exc:
        name = exc.args[0]
        col = text.find(name) + 1
        raise SelectorError(text, max(col, 1), "a header or properties field", repr(name)) from None
    return Selector(text, tree, evaluate, dialect)


# -- property filters (OASIS filter expressions §4) ---------------------------------------------


def _affix_matcher(ref: Any) -> Callable[[Any], bool]:
    """How one reference value of a properties or application-properties filter matches."""
    if ref is None:
        return lambda v: True
    if isinstance(ref, str):
        if ref.startswith("&p:"):
            prefix = ref[3:]
            return lambda v: isinstance(v, str) and v.startswith(prefix)
        if ref.startswith("&s:"):
            suffix = ref[3:]
            return lambda v: isinstance(v, str) and v.endswith(suffix)
        if ref.startswith("&&"):
            ref = ref[1:]
        elif ref.startswith("&"):
            raise ValueError(f"unknown string modifier in {ref!r} (use &p:, &s: or && to escape)")
    return lambda v: _eq(v, ref) is True


_MISSING: Any = object()


def _present(name: str) -> Eval:
    def read(m: Any) -> Any:
        return m.headers.get(name, _MISSING)

    return read


def _present_and(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is not _MISSING and ok(v)


def match_properties(spec: Mapping[str, Any], *, section: str) -> Callable[[Any], bool]:
    """A predicate for an OASIS properties filter (``section="properties"``: keys are
    properties field names, ``message-id``…) or application-properties filter
    (``section="application-properties"``): every entry must match; a string
    reference value may be a prefix (``&p:``) or suffix (``&s:``) pattern.
    Raises ValueError for an unknown field or modifier."""
    checks: list[tuple[Eval, Callable[[Any], bool]]] = []
    for key, ref in spec.items():
        if section == "properties":
            f = str(key).replace("-", "_")
            if f not in FIELDS or f in HEADER_FIELDS:
                raise ValueError(f"{key!r} is not a properties field")
            reader = _field(f)
            checks.append((reader, _affix_matcher(ref)))
        else:  # an application property must be present, even to match a null reference
            checks.append((_present(str(key)), _present_and(_affix_matcher(ref))))

    def matches(m: Any) -> bool:
        return all(ok(reader(m)) for reader, ok in checks)

    return matches
