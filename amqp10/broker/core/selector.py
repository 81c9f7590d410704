"""Message selectors: the JMS selector language and the OASIS filter expressions, compiled once.

:func:`parse` (core/selector_parse.py) reads a selector into a small tree of frozen
nodes (:func:`unparse` writes one back); :func:`compile_selector` turns the tree into a tree of
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

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .selector_parse import (
    LONG_MAX,
    Between,
    Binary,
    Call,
    Ident,
    In,
    IsNull,
    Like,
    Literal,
    Node,
    SelectorError,
    Unary,
    like_regex,
    parse,
    unparse,
)

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
        match = like_regex(node.pattern, node.escape).fullmatch
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
