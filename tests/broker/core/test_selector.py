"""The selector language: parser round trip, evaluation against a reference interpreter,
three-valued logic, the JMS specification's examples, and the OASIS property filters."""

from __future__ import annotations

import math
import uuid
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.core.selector import (
    LONG_MAX,
    Between,
    Binary,
    Ident,
    In,
    IsNull,
    Like,
    Literal,
    Node,
    SelectorError,
    Unary,
    compile_selector,
    match_properties,
    parse,
    unparse,
)

# -- random trees ---------------------------------------------------------------------------

NAMES = ["a", "b", "s", "flag", "missing", "x_1", "$d", "amqp.subject"]
text = st.text(alphabet="ab%_'!\\ é", max_size=5)
numbers = st.one_of(
    st.integers(min_value=0, max_value=LONG_MAX),
    st.integers(min_value=0, max_value=20),
    st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 0.5, 2.0]),
)
literals = st.one_of(numbers, text, st.booleans()).map(Literal)
in_items = st.one_of(
    st.integers(min_value=-LONG_MAX - 1, max_value=LONG_MAX), st.integers(-3, 3), text, st.booleans()
).map(Literal)
leaves = st.one_of(literals, st.sampled_from(NAMES).map(Ident))


def _extend(children: st.SearchStrategy[Node], ops: list[str]) -> st.SearchStrategy[Node]:
    return st.one_of(
        st.builds(Unary, st.sampled_from(["-", "+", "NOT"]), children),
        st.builds(Binary, st.sampled_from(ops), children, children),
        st.builds(Between, children, children, children, st.booleans()),
        st.builds(In, children, st.lists(in_items, min_size=1, max_size=4).map(tuple), st.booleans()),
        st.builds(Like, children, text, st.sampled_from([None, "!", "\\", "'"]), st.booleans()).map(
            _valid_like
        ),
        st.builds(IsNull, children, st.booleans()),
    )


def _valid_like(node: Like) -> Like:
    try:  # a pattern that ends in its escape character does not parse: complete it
        compile_selector(unparse(Like(Literal("x"), node.pattern, node.escape)))
    except SelectorError:
        return Like(node.expr, node.pattern + "%", node.escape, node.negated)
    return node


JMS_OPS = ["+", "-", "*", "/", "=", "<>", "<", "<=", ">", ">=", "AND", "OR"]
trees = st.recursive(leaves, lambda c: _extend(c, JMS_OPS), max_leaves=12)
sql_trees = st.recursive(leaves, lambda c: _extend(c, [*JMS_OPS, "%"]), max_leaves=12)
values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(-5, 5), st.floats(), text
)
envs = st.fixed_dictionaries({}, optional={n: values for n in NAMES})


@settings(max_examples=400, deadline=None)
@given(trees)
def test_printing_and_parsing_a_tree_gives_it_back(tree: Node) -> None:
    assert parse(unparse(tree)) == tree


@settings(max_examples=200, deadline=None)
@given(sql_trees)
def test_the_sql_dialect_round_trips_too(tree: Node) -> None:
    assert parse(unparse(tree), "sql") == tree


# -- a reference interpreter, written as plainly as the JMS text reads ----------------------


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "other"


def _ref_compare(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None  # comparison with NULL is unknown
    if _kind(a) != _kind(b):
        return False  # unlike types: false
    if op == "=":
        return bool(a == b)
    if op == "<>":
        return bool(a != b)
    if _kind(a) not in ("number", "string"):
        return False  # booleans compare only for equality
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _java_div(a: Any, b: Any) -> Any:
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return math.trunc(Fraction(a, b))
    return a / b


def _ref_arith(op: str, a: Any, b: Any) -> Any:
    if _kind(a) != "number" or _kind(b) != "number":
        return None
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return _java_div(a, b)
        if not (isinstance(a, int) and isinstance(b, int)) or b == 0:
            return None
        return a - b * math.trunc(Fraction(a, b))
    except OverflowError:
        return None


def _ref_like(s: str, pattern: str, escape: str | None) -> bool:
    tokens: list[tuple[str, str]] = []  # ("lit", c), ("one", ""), ("any", "")
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            tokens.append(("lit", pattern[i + 1]))
            i += 2
            continue
        tokens.append(("any", "") if c == "%" else ("one", "") if c == "_" else ("lit", c))
        i += 1
    memo: dict[tuple[int, int], bool] = {}

    def m(ti: int, si: int) -> bool:
        if (ti, si) not in memo:
            if ti == len(tokens):
                r = si == len(s)
            elif tokens[ti][0] == "any":
                r = m(ti + 1, si) or (si < len(s) and m(ti, si + 1))
            elif si < len(s) and (tokens[ti][0] == "one" or tokens[ti][1] == s[si]):
                r = m(ti + 1, si + 1)
            else:
                r = False
            memo[(ti, si)] = r
        return memo[(ti, si)]

    return m(0, 0)


def _not(v: Any) -> bool | None:
    return None if v is None else not v


def _tv(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def ref(node: Node, env: dict[str, Any]) -> Any:
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Ident):
        return env.get(node.name)
    if isinstance(node, Unary):
        v = ref(node.operand, env)
        if node.op == "NOT":
            return _not(_tv(v))
        if _kind(v) != "number":
            return None
        return -v if node.op == "-" else v
    if isinstance(node, Binary):
        if node.op in ("AND", "OR"):
            a, b = _tv(ref(node.left, env)), _tv(ref(node.right, env))
            if node.op == "AND":
                return False if False in (a, b) else True if (a, b) == (True, True) else None
            return True if True in (a, b) else False if (a, b) == (False, False) else None
        a, b = ref(node.left, env), ref(node.right, env)
        if node.op in ("=", "<>", "<", "<=", ">", ">="):
            return _ref_compare(node.op, a, b)
        return _ref_arith(node.op, a, b)
    if isinstance(node, Between):  # defined as expr >= low AND expr <= high
        r = ref(Binary("AND", Binary(">=", node.expr, node.low), Binary("<=", node.expr, node.high)), env)
        return _not(r) if node.negated else r
    if isinstance(node, In):
        v = ref(node.expr, env)
        if v is None:
            return None
        r = any(_ref_compare("=", v, i.value) is True for i in node.items)
        return not r if node.negated else r
    if isinstance(node, Like):
        v = ref(node.expr, env)
        if v is None:
            return None
        if not isinstance(v, str):
            return False
        r = _ref_like(v, node.pattern, node.escape)
        return not r if node.negated else r
    assert isinstance(node, IsNull)
    r = ref(node.expr, env) is None
    return not r if node.negated else r


def _from_env(name: str) -> Any:
    return lambda env: env.get(name)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@settings(max_examples=600, deadline=None)
@given(trees, envs)
def test_the_compiled_selector_agrees_with_the_reference(tree: Node, env: dict[str, Any]) -> None:
    selector = compile_selector(unparse(tree), resolve=_from_env)
    expected = ref(tree, env)
    got = selector.evaluate(env)
    assert _same(got, expected), (unparse(tree), env, got, expected)
    assert selector(env) is (expected is True)


@settings(max_examples=300, deadline=None)
@given(sql_trees, envs)
def test_the_sql_dialect_agrees_with_the_reference(tree: Node, env: dict[str, Any]) -> None:
    selector = compile_selector(unparse(tree), "sql", resolve=_from_env)
    assert _same(selector.evaluate(env), ref(tree, env))


# -- three-valued logic ------------------------------------------------------------------------

T, F, U = "TRUE", "FALSE", "(missing > 0)"  # the last is unknown: a missing property is NULL
TRUTH = {T: True, F: False, U: None}
AND_TABLE = {(T, T): True, (T, F): False, (T, U): None, (F, F): False, (F, U): False, (U, U): None}
OR_TABLE = {(T, T): True, (T, F): True, (T, U): True, (F, F): False, (F, U): None, (U, U): None}


@pytest.mark.parametrize(("op", "table"), [("AND", AND_TABLE), ("OR", OR_TABLE)])
def test_and_or_truth_tables(op: str, table: dict[tuple[str, str], bool | None]) -> None:
    for (a, b), want in table.items():
        for left, right in ((a, b), (b, a)):  # both are symmetric
            s = compile_selector(f"{left} {op} {right}", resolve=_from_env)
            assert s.evaluate({}) is want, f"{left} {op} {right}"


def test_not_truth_table() -> None:
    for operand, value in TRUTH.items():
        s = compile_selector(f"NOT {operand}", resolve=_from_env)
        assert s.evaluate({}) is (None if value is None else not value)


def test_only_true_selects() -> None:
    env = {"n": 5}
    assert compile_selector("n > 3", resolve=_from_env)(env)
    assert not compile_selector("n < 3", resolve=_from_env)(env)
    assert not compile_selector("missing < 3", resolve=_from_env)(env)
    assert not compile_selector("NOT (missing < 3)", resolve=_from_env)(env)  # NOT unknown is unknown
    assert compile_selector("missing IS NULL AND n IS NOT NULL", resolve=_from_env)(env)


# -- the JMS specification's examples (§3.8.1.1) -----------------------------------------------


class Msg:
    """A message as a selector sees it: application properties and 1.0 fields."""

    def __init__(self, headers: dict[str, Any] | None = None, **fields: Any) -> None:
        self.headers = headers or {}
        self.fields = fields

    def field(self, name: str) -> Any:
        return self.fields.get(name)


@pytest.mark.parametrize(
    ("selector", "props", "want"),
    [
        ("JMSType = 'car' AND color = 'blue' AND weight > 2500", {"color": "blue", "weight": 2600}, True),
        ("JMSType = 'car' AND color = 'blue' AND weight > 2500", {"color": "blue", "weight": 2500}, False),
        ("age BETWEEN 15 AND 19", {"age": 15}, True),
        ("age BETWEEN 15 AND 19", {"age": 20}, False),
        ("age NOT BETWEEN 15 AND 19", {"age": 20}, True),
        ("Country IN (' UK', 'US', 'France')", {"Country": "US"}, True),
        ("Country IN (' UK', 'US', 'France')", {"Country": "Peru"}, False),
        ("Country NOT IN (' UK', 'US', 'France')", {"Country": "Peru"}, True),
        ("Country NOT IN (' UK', 'US', 'France')", {}, False),  # NULL: unknown
        ("phone LIKE '12%3'", {"phone": "123"}, True),
        ("phone LIKE '12%3'", {"phone": "12993"}, True),
        ("phone LIKE '12%3'", {"phone": "1234"}, False),
        ("word LIKE 'l_se'", {"word": "lose"}, True),
        ("word LIKE 'l_se'", {"word": "loose"}, False),
        ("underscored LIKE '\\_%' ESCAPE '\\'", {"underscored": "_foo"}, True),
        ("underscored LIKE '\\_%' ESCAPE '\\'", {"underscored": "bar"}, False),
        ("phone NOT LIKE '12%3'", {"phone": "1234"}, True),
        ("prop_name IS NULL", {}, True),
        ("prop_name IS NOT NULL", {"prop_name": 1}, True),
        ("'literal''s' = s", {"s": "literal's"}, True),
        ("s = 1", {"s": "1"}, False),  # unlike types
        ("NOT (s = 1)", {"s": "1"}, True),
        ("s <> 1", {"s": "1"}, False),
        ("flag", {"flag": True}, True),
        ("flag = TRUE", {"flag": True}, True),
        ("flag = 1", {"flag": True}, False),
        ("n + 1 = 2", {"n": "1"}, False),  # arithmetic on a string: unknown
        ("n * 2 > 5.5", {"n": 3}, True),
        ("n / 2 = 3", {"n": 7}, True),  # exact division truncates
        ("n / 2 = -3", {"n": -7}, True),
        ("n / 2.0 = 3.5", {"n": 7}, True),
        ("n / 0 = 1 OR TRUE", {"n": 1}, True),
        ("-n = -3 AND +n = 3", {"n": 3}, True),
        ("1.5e3 = 1500 AND 10L = 0xA AND 017 = 15 AND .5 = 0.5 AND 2f = 2.0", {}, True),
        ("x > 7E3 AND x < -(-57.9E2) * 2", {"x": 8000}, True),
        ("color = 'blue' and weight between 1 and 3", {"color": "blue", "weight": 2}, True),
    ],
)
def test_jms_examples(selector: str, props: dict[str, Any], want: bool) -> None:
    assert compile_selector(selector)(Msg(props, subject="car")) is want


def test_jms_headers_and_amqp_fields() -> None:
    m = Msg(
        {"JMSPriority": 99},  # a header name is the header, not a property of the same name
        message_id="ID:1",
        correlation_id=uuid.UUID(int=7),
        priority=7,
        durable=True,
        creation_time=1234,
        subject="t",
        to="q",
        reply_to="r",
        delivery_count=2,
        group_id="g",
        group_sequence=3,
        user_id=b"bob",
    )
    cases = {
        "JMSMessageID = 'ID:1'": True,
        "JMSCorrelationID = 'ID:AMQP_UUID:00000000-0000-0000-0000-000000000007'": True,
        "JMSPriority = 7": True,
        "JMSDeliveryMode = 'PERSISTENT'": True,
        "JMSTimestamp = 1234 AND JMSExpiration = 0": True,
        "JMSType = 't' AND JMSDestination = 'q' AND JMSReplyTo = 'r'": True,
        "JMSRedelivered AND JMSXDeliveryCount = 3": True,
        "JMSXGroupID = 'g' AND JMSXGroupSeq = 3 AND JMSXUserID = 'bob'": True,
        "amqp.priority = 7 AND amqp.durable AND amqp.subject = 't' AND amqp.delivery_count = 2": True,
        "amqp.message_id = 'ID:1' AND amqp.creation_time = 1234": True,
        "amqp.correlation_id = 'x'": False,  # a uuid is not a string
    }
    for text, want in cases.items():
        assert compile_selector(text)(m) is want, text
    assert compile_selector("JMSDeliveryMode = 'NON_PERSISTENT'")(Msg(durable=False))
    assert compile_selector("JMSCorrelationID = 'ID:AMQP_ULONG:5'")(Msg(correlation_id=5))


def test_sql_dialect_names_sections() -> None:
    m = Msg({"k": 5, "p.x": 1}, priority=6, group_id="g-1", subject="s")
    assert compile_selector("h.priority = 6 AND header.priority > 5", "sql")(m)
    assert compile_selector("p.group-id = 'g-1' AND properties.subject = 's'", "sql")(m)
    assert compile_selector("a.k % 2 = 1 AND application_properties.k = 5 AND k != 4", "sql")(m)
    assert compile_selector("UTC() > 1600000000000", "sql")(m)
    with pytest.raises(SelectorError):
        compile_selector("h.subject = 's'", "sql")  # subject is not a header field
    with pytest.raises(SelectorError):
        compile_selector("k % 2 = 1")  # % is the SQL dialect's


@pytest.mark.parametrize(
    ("text", "column", "expected"),
    [
        ("", 1, "an expression"),
        ("a =", 4, "a literal, an identifier or '('"),
        ("a = 'x", 5, "a closing quote"),
        ("a IN ()", 7, "a literal in the IN list"),
        ("a LIKE b", 8, "a string literal (the LIKE pattern)"),
        ("a LIKE 'x' ESCAPE 'ab'", 19, "a single ESCAPE character"),
        ("a BETWEEN 1 OR 2", 13, "AND (of BETWEEN"),
        ("(a = 1", 7, "')'"),
        ("a = 1 b", 7, "an operator, AND, OR or the end"),
        ("a = 08", 5, "an octal number"),
        ("a = 9223372036854775808", 5, "a number in the range of a long"),
        ("a = 1e999", 5, "a number in the range of a double"),
        ("a = 10x", 7, "an operator or the end of the number"),
        ("a # 1", 3, "a literal, an identifier, an operator"),
        ("a IS 1", 6, "NULL"),
        ("a NOT 1", 7, "BETWEEN, IN or LIKE after NOT"),
    ],
)
def test_parse_errors_name_the_column_and_what_was_expected(text: str, column: int, expected: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse(text)
    assert info.value.column == column
    assert expected in info.value.expected
    assert f"column {column}" in str(info.value)


def test_keywords_are_case_insensitive_identifiers_are_not() -> None:
    lower = "a between 1 and 3 and not b in ('x') or c like 'y%' escape '!' or d is not null or true"
    upper = "a BETWEEN 1 AND 3 AND NOT b IN ('x') OR c LIKE 'y%' ESCAPE '!' OR d IS NOT NULL OR TRUE"
    assert parse(lower) == parse(upper)
    assert compile_selector("A = 1")(Msg({"A": 1}))
    assert not compile_selector("A = 1")(Msg({"a": 1}))


# -- OASIS property filters ---------------------------------------------------------------------


def test_properties_filter_matches_every_entry() -> None:
    m = Msg({"region": "emea-west", "n": 3}, subject="orders.eu", message_id=5, group_id="&x")
    assert match_properties({"subject": "orders.eu", "message-id": 5}, section="properties")(m)
    assert match_properties({"subject": "&p:orders."}, section="properties")(m)
    assert match_properties({"subject": "&s:.eu"}, section="properties")(m)
    assert not match_properties({"subject": "&s:.us"}, section="properties")(m)
    assert match_properties({"group-id": "&&x"}, section="properties")(m)  # && escapes a leading &
    assert match_properties({"reply-to": None}, section="properties")(m)  # null matches anything
    assert not match_properties({"subject": "orders.eu", "to": "x"}, section="properties")(m)
    assert match_properties({"region": "&p:emea", "n": 3.0}, section="application-properties")(m)
    assert not match_properties({"absent": None}, section="application-properties")(m)
    with pytest.raises(ValueError):
        match_properties({"priority": 1}, section="properties")  # a header field
    with pytest.raises(ValueError):
        match_properties({"subject": "&q:x"}, section="properties")
