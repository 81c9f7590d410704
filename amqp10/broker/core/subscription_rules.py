"""A subscription's rule (Azure Service Bus's), compiled: its filter and its SQL action.

A rule's filter is a SQL filter (the selectors of :mod:`.selector`, SQL dialect, with
Service Bus's ``sys.`` system properties), a correlation filter (each named properties
field, and each application property under ``properties``, equals), or neither (it
matches everything). Its optional SQL action is ``SET name = expression`` and ``REMOVE
name`` statements separated by ``;``, ``name`` an application property (``user.``
prefix optional) or ``sys.X``.

The configuration compiles its rules with these to check them (a bad rule stops the
broker with the selector's reason); the 1.0 front end's Service Bus plug-in
(:mod:`amqp10.broker.amqp1.servicebus.rules`) runs them on a subscription's messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .message import QueuedMessage
from .selector import compile_selector, match_properties, sql_field

__all__ = ["ActionStep", "RuleText", "action_steps", "rule_filter"]


class RuleText(Protocol):
    """What a rule is made of (``[servicebus]`` rules, and rules added over AMQP)."""

    @property
    def sql(self) -> str | None: ...

    @property
    def correlation(self) -> Mapping[str, Any] | None: ...

    @property
    def action(self) -> str | None: ...


# a correlation filter's names, as the properties fields they match
_CORRELATION = {
    "correlation_id": "correlation-id",
    "message_id": "message-id",
    "to": "to",
    "reply_to": "reply-to",
    "subject": "subject",
    "label": "subject",
    "session_id": "group-id",
    "reply_to_session_id": "reply-to-group-id",
    "content_type": "content-type",
}
# Service Bus's sys.X names (lower case), as the properties fields they are
_SYSTEM = {
    "messageid": "message-id",
    "correlationid": "correlation-id",
    "label": "subject",
    "to": "to",
    "replyto": "reply-to",
    "sessionid": "group-id",
    "replytosessionid": "reply-to-group-id",
    "contenttype": "content-type",
}


def _sql_field(name: str) -> Any:
    """A SQL filter's identifier: Service Bus's ``sys.X`` system properties, else the SQL dialect's."""
    if name.lower().startswith("sys."):
        field = _SYSTEM.get(name[4:].lower())
        if field is None:
            raise KeyError(name)
        return sql_field("properties." + field)
    return sql_field(name)


def rule_filter(rule: RuleText) -> Callable[[QueuedMessage], bool]:
    """What a rule keeps; raises ValueError (or the selector's error) for a bad filter."""
    checks: list[Callable[[Any], bool]] = []
    if rule.sql is not None:
        checks.append(compile_selector(rule.sql, "sql", resolve=_sql_field))
    if rule.correlation is not None:
        spec: dict[str, Any] = dict(rule.correlation)
        app = spec.pop("properties", None) or {}
        if not isinstance(app, dict):
            raise ValueError("a correlation filter's properties is a table")
        unknown = [k for k in spec if k not in _CORRELATION]
        if unknown:
            raise ValueError(f"unknown correlation filter field(s) {unknown}; known: {sorted(_CORRELATION)}")
        checks.append(match_properties({_CORRELATION[k]: v for k, v in spec.items()}, section="properties"))
        if app:
            checks.append(match_properties(app, section="application-properties"))
    if len(checks) == 1:
        return checks[0]
    return lambda m: all(c(m) for c in checks)


# the message fields a rule action's sys.X names, as the message model's accessors
_SYSTEM_ATTRIBUTES = {
    "messageid": "id",
    "correlationid": "correlation_id",
    "label": "subject",
    "to": "to",
    "replyto": "reply_to",
    "sessionid": "group_id",
    "replytosessionid": "reply_to_group_id",
    "contenttype": "content_type",
}

ActionStep = tuple[bool, str, Callable[[Any], Any] | None]
"""One statement of a rule action: (a message field? the field's accessor on
:class:`~amqp10.message.Message`, else an application property's name; the SET's
expression, evaluated on the message as it arrived, or None for a REMOVE)."""


def _target(name: str) -> tuple[bool, str]:
    """What a SET or REMOVE names: (True, a message field's accessor) for ``sys.X``, else
    (False, an application property; a ``user.`` prefix is Service Bus's spelling)."""
    if name.lower().startswith("sys."):
        attribute = _SYSTEM_ATTRIBUTES.get(name[4:].lower())
        if attribute is None:
            raise ValueError(
                f"a rule action cannot set {name!r}; system properties: sys.{', sys.'.join(sorted(_SYSTEM))}"
            )
        return True, attribute
    if name.lower().startswith("user."):
        name = name[5:]
    if not name:
        raise ValueError("a rule action names a property")
    return False, name


def action_steps(rule: RuleText) -> list[ActionStep]:
    """A rule's SQL action, compiled into its statements (empty: no action). Raises
    ValueError (or the selector's error) naming the problem."""
    steps: list[ActionStep] = []
    for statement in (s.strip() for s in (rule.action or "").split(";")):
        if not statement:
            continue
        verb, _, rest = statement.partition(" ")
        if verb.upper() == "SET":
            name, eq, expression = rest.partition("=")
            if not eq or not name.strip() or not expression.strip():
                raise ValueError(f"a SET statement is SET name = expression, not {statement!r}")
            evaluate = compile_selector(expression.strip(), "sql", resolve=_sql_field).evaluate
            steps.append((*_target(name.strip()), evaluate))
        elif verb.upper() == "REMOVE":
            steps.append((*_target(rest.strip()), None))
        else:
            raise ValueError(f"a rule action's statements are SET or REMOVE, not {statement!r}")
    return steps
