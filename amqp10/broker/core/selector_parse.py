"""Selector text to a tree and back: the lexer, the grammar and the tree of frozen nodes.

:func:`parse` reads a JMS or SQL-dialect selector (see :mod:`amqp10.broker.core.selector`
for the language) into :data:`Node` values, raising :class:`SelectorError` naming the
column; :func:`unparse` writes a tree back. :func:`like_regex` translates a LIKE pattern
(the parser checks patterns with it; the compiler matches with it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LONG_MAX",
    "Between",
    "Binary",
    "Call",
    "Ident",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Node",
    "SelectorError",
    "Unary",
    "like_regex",
    "parse",
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
            like_regex(pattern.value, escape, self.text, pattern.pos)  # reject bad patterns now
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



# -- LIKE patterns ---------------------------------------------------------------------------


def like_regex(pattern: str, escape: str | None, text: str = "", pos: int = 0) -> re.Pattern[str]:
    """The regex of LIKE ``pattern`` (``%`` any run, ``_`` one character); a dangling ESCAPE is a
    :class:`SelectorError` at ``pos`` of ``text``."""
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
