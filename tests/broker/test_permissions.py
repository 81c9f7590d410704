"""Permissions with RabbitMQ's meaning: full-match patterns, "" matches nothing,
``amq.default`` for the default exchange, no entry means no access to the vhost."""

from __future__ import annotations

import logging

import pytest

from amqp10.broker import permissions as perm_module
from amqp10.broker.permissions import (
    FULL_ACCESS,
    NO_ACCESS,
    PermissionChecker,
    PermissionDenied,
    VhostAccessDenied,
    VhostPermissions,
    check_tags,
)
from amqp10.types import ErrorCondition

ORDERS = VhostPermissions(
    configure=r"^orders\.", write=r"^(orders\..*|amq\.default)$", read="^orders$"
)
TABLE = {
    "alice": {"/": FULL_ACCESS, "orders": ORDERS},
    "nobody": {"/": NO_ACCESS},
    "guest": {"/": VhostPermissions("", "", ".*")},
}


@pytest.fixture
def checker() -> PermissionChecker:
    return PermissionChecker(TABLE)


@pytest.mark.parametrize(
    ("action", "kind", "name", "allowed"),
    [
        ("configure", "queue", "orders.eu", True),  # ^orders\. : a prefix
        ("configure", "queue", "orders.eu.1", True),
        ("configure", "queue", "orders", False),  # the pattern needs the dot
        ("configure", "queue", "xorders.eu", False),  # anchored at the start
        ("read", "queue", "orders", True),  # ^orders$ : that name only
        ("read", "queue", "orders.eu", False),
        ("write", "exchange", "", True),  # the default exchange is checked as amq.default
        ("write", "exchange", "amq.default", True),
        ("write", "topic", "", True),
        ("write", "exchange", "amq.topic", False),
        ("write", "exchange", "xamq.default", False),
        ("write", "queue", "", False),  # a queue named "" is not the default exchange
    ],
)
def test_anchored_patterns(
    checker: PermissionChecker, action: str, kind: str, name: str, allowed: bool
) -> None:
    assert checker.allowed("alice", "orders", action, kind, name) is allowed  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pattern", "name", "allowed"),
    [
        ("orders", "orders", True),
        ("orders", "my-orders-archive", True),  # found anywhere, as RabbitMQ's re:run
        ("orders", "order", False),
        ("a|b", "xbx", True),
        ("^a|b$", "ab", True),  # each alternative anchored on its own side
        ("^(a|b)$", "ab", False),
        ("^$", "q", False),
        (".*", "", True),
    ],
)
def test_unanchored_patterns_match_anywhere_as_in_rabbitmq(
    pattern: str, name: str, allowed: bool
) -> None:
    c = PermissionChecker({"u": {"/": VhostPermissions(pattern, "", "")}})
    assert c.allowed("u", "/", "configure", "queue", name) is allowed


def test_empty_pattern_matches_nothing_not_even_the_empty_name(checker: PermissionChecker) -> None:
    for action in ("configure", "write", "read"):
        assert not checker.allowed("nobody", "/", action, "queue", "")  # type: ignore[arg-type]
        assert not checker.allowed("nobody", "/", action, "queue", "q")  # type: ignore[arg-type]
    assert not checker.allowed("guest", "/", "write", "exchange", "")
    assert checker.allowed("guest", "/", "read", "queue", "anything")


def test_vhost_access_needs_an_entry(checker: PermissionChecker) -> None:
    assert checker.vhost_access("alice", "orders")
    assert checker.vhost_access("nobody", "/")  # an entry, even one allowing nothing
    assert not checker.vhost_access("nobody", "orders")
    assert not checker.vhost_access("stranger", "/")
    with pytest.raises(VhostAccessDenied) as info:
        checker.check_vhost_access("nobody", "orders")
    assert str(info.value) == "access to vhost 'orders' refused for user 'nobody'"
    assert info.value.reply_code == 530


def test_denial_is_one_line_names_everything_and_carries_protocol_codes(
    checker: PermissionChecker, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="amqp10.broker.permissions"),
        pytest.raises(PermissionDenied) as info,
    ):
        checker.check("alice", "orders", "configure", "queue", "billing")
    exc = info.value
    assert str(exc) == (
        "configure access to queue 'billing' in vhost 'orders' refused for user 'alice'"
    )
    assert (exc.user, exc.vhost, exc.action, exc.kind, exc.name) == (
        "alice",
        "orders",
        "configure",
        "queue",
        "billing",
    )
    assert exc.condition == ErrorCondition.UNAUTHORIZED_ACCESS.value
    assert (exc.reply_code, exc.reply_text) == (403, "ACCESS_REFUSED")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "billing" in caplog.text and "alice" in caplog.text and "orders" in caplog.text


def test_denied_default_exchange_is_named_amq_default(checker: PermissionChecker) -> None:
    with pytest.raises(PermissionDenied, match=r"exchange 'amq\.default'") as info:
        checker.check("guest", "/", "write", "exchange", "")
    assert info.value.name == "amq.default"


def test_check_on_a_vhost_without_entry_says_vhost(checker: PermissionChecker) -> None:
    with pytest.raises(VhostAccessDenied):
        checker.check("alice", "elsewhere", "read", "queue", "q")
    checker.check("alice", "/", "read", "queue", "q")  # allowed: no exception


def test_anonymous_default_is_full_access_to_slash_only() -> None:
    c = PermissionChecker(TABLE)
    assert c.allowed(None, "/", "configure", "queue", "anything")
    assert not c.vhost_access(None, "orders")
    with pytest.raises(VhostAccessDenied, match="user 'anonymous'"):
        c.check_vhost_access(None, "orders")


def test_anonymous_user_takes_that_users_permissions() -> None:
    c = PermissionChecker(TABLE, anonymous_user="guest")
    assert c.allowed(None, "/", "read", "queue", "q")
    assert not c.allowed(None, "/", "write", "exchange", "x")
    with pytest.raises(PermissionDenied, match=r"user 'anonymous \(guest\)'"):
        c.check(None, "/", "write", "exchange", "x")
    # an anonymous_user missing from the table gets nothing
    assert not PermissionChecker(TABLE, anonymous_user="ghost").vhost_access(None, "/")


def test_allow_all_refuses_nothing() -> None:
    c = PermissionChecker.allow_all()
    assert c.vhost_access("anyone", "any")
    c.check("anyone", "any", "configure", "queue", "q")
    c.check(None, "any", "write", "exchange", "")


def test_update_replaces_compiled_entries(checker: PermissionChecker) -> None:
    assert checker.allowed("alice", "/", "read", "queue", "q")
    checker.update({"alice": {"/": NO_ACCESS}}, anonymous_user=None)
    assert not checker.allowed("alice", "/", "read", "queue", "q")


def test_answer_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perm_module, "_CACHE_SIZE", 8)
    c = PermissionChecker({"u": {"/": VhostPermissions("", "", "q[0-9]+")}})
    for i in range(100):
        assert c.allowed("u", "/", "read", "queue", f"q{i}")
        assert not c.allowed("u", "/", "read", "queue", f"x{i}")
    entry = c._compiled["u", "/"]
    assert entry is not None and len(entry.cache) <= 8


def test_bad_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="not a valid regular expression"):
        VhostPermissions("(", ".*", ".*")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("administrator", ("administrator",)),
        ("management, monitoring", ("management", "monitoring")),
        (["policymaker", "policymaker"], ("policymaker",)),
        ("", ()),
        ([], ()),
    ],
)
def test_tags_accept_lists_and_comma_strings(given: object, expected: tuple[str, ...]) -> None:
    assert check_tags(given) == expected


def test_unknown_tag_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tag"):
        check_tags(["admin"])


def test_denial_returns_the_refusal_for_bool_style_callers(
    checker: PermissionChecker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="amqp10.broker.permissions"):
        assert checker.denial("alice", "orders", "read", "queue", "orders") is None
        assert caplog.records == []
        refused = checker.denial("alice", "orders", "read", "queue", "billing")
        assert isinstance(refused, PermissionDenied) and refused.kind == "queue"
        assert len(caplog.records) == 1
        assert isinstance(
            checker.denial("alice", "nowhere", "read", "queue", "q"), VhostAccessDenied
        )
        assert checker.vhost_denial("alice", "orders") is None


def test_made_up_vhosts_do_not_grow_the_compiled_entries(checker: PermissionChecker) -> None:
    for i in range(100):
        assert not checker.vhost_access("alice", f"vhost-{i}")
        assert not checker.allowed("stranger", f"vhost-{i}", "read", "queue", "q")
    assert checker.allowed("alice", "/", "read", "queue", "q")
    assert set(checker._compiled) == {("alice", "/")}


def test_tags() -> None:
    tags = {"alice": ("administrator",), "guest": ("monitoring",)}
    c = PermissionChecker(TABLE, tags=tags)
    assert c.has_tag("alice", "administrator") and not c.has_tag("alice", "monitoring")
    assert not c.has_tag("stranger", "management")
    assert c.has_tag(None, "administrator")  # anonymous by default: as before, everything
    c = PermissionChecker(TABLE, tags=tags, anonymous_user="guest")
    assert c.has_tag(None, "monitoring") and not c.has_tag(None, "administrator")
    assert PermissionChecker.allow_all().has_tag("anyone", "administrator")
