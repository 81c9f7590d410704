"""A Service Bus subscription's rules: what they keep, and the operations on them over AMQP.

A subscription keeps a message that any of its rules matches. A rule's filter is a SQL
filter (the broker's selectors, SQL dialect, with Service Bus's ``sys.`` system
properties), a correlation filter (the properties filter: each named field equals), or
a true/false filter (SQL ``1=1``/``1=0``, as the SDKs send them); its optional SQL rule
action (``SET name = expression``, ``REMOVE name``) runs on the subscription's record of
each message the rule matched. The rules of a subscription are its queue's
``admit`` (a :class:`RuleSet`), and are kept with the subscription's store record
(:attr:`~amqp10.broker.core.Queue.settings`), so rules changed over AMQP survive a
restart; the configured rules (``[servicebus] topics``) apply when the subscription is
made, and again when the configuration's rules for it change.

On ``TOPIC/Subscriptions/SUB/$management`` (the wire format of "AMQP 1.0 in Azure
Service Bus: request-response-based operations"):

- ``com.microsoft:add-rule``: ``rule-name`` and ``rule-description``, a map with
  ``sql-filter`` (``expression``) or ``correlation-filter`` (``correlation-id``,
  ``message-id``, ``to``, ``reply-to``, ``label``, ``session-id``,
  ``reply-to-session-id``, ``content-type``, ``properties``), and ``sql-rule-action``
  (``expression``, or null). 409 when the name is taken (names ignore case).
- ``com.microsoft:remove-rule``: ``rule-name``; 404 when there is none.
- ``com.microsoft:enumerate-rules``: ``skip``, ``top``; ``rules``, a list of maps each
  with a ``rule-description``, described ``com.microsoft:rule-description:list``
  (filter, action, name, created-at), the filter and action described as the SDKs
  decode them (:data:`DESCRIPTORS`); 204 when the page is empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ....types import Described, int32, timestamp, ulong
from ...config import ServiceBusRule
from ...core import Queue, QueuedMessage, Topic, VirtualHost
from ...core.subscription_rules import action_steps, rule_filter
from .consumer import REMOVE, rewrite

__all__ = ["DEFAULT_RULE", "DESCRIPTORS", "OperationError", "RuleSet", "apply_rules", "rule_action", "rules_of"]

DEFAULT_RULE = "$Default"
DESCRIPTORS = {
    "rule-description": ulong(0x0000013700000004),
    "empty-rule-action": ulong(0x0000013700000005),
    "sql-rule-action": ulong(0x0000013700000006),
    # the filters' codes have one hex digit fewer (so in the SDKs, and so on the wire)
    "sql-filter": ulong(0x000001370000006),
    "true-filter": ulong(0x000001370000007),
    "false-filter": ulong(0x000001370000008),
    "correlation-filter": ulong(0x000001370000009),
}
"""The descriptor codes of the described types of ``enumerate-rules`` (``com.microsoft:NAME:list``)."""
_COMPATIBILITY_LEVEL = int32(20)
_RULES = "servicebus-rules"
_CONFIGURED = "servicebus-configured-rules"
_TRUE, _FALSE = "1=1", "1=0"

# the same fields as add-rule's correlation-filter map names them, in the described list's order
_WIRE_CORRELATION = {
    "correlation-id": "correlation_id",
    "message-id": "message_id",
    "to": "to",
    "reply-to": "reply_to",
    "label": "subject",
    "session-id": "session_id",
    "reply-to-session-id": "reply_to_session_id",
    "content-type": "content_type",
}


class OperationError(Exception):
    """An entity operation that fails (a rule operation, a lost lock): its status code, error
    condition and description."""

    def __init__(self, status: int, condition: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.condition = condition
        self.description = description


Action = Callable[[QueuedMessage], None]


def rule_action(rule: ServiceBusRule) -> Action | None:
    """A rule's SQL action, compiled: ``SET name = expression`` and ``REMOVE name`` statements
    separated by ``;`` (``name``: an application property, or ``sys.X``); the expressions are
    the SQL filter language's, evaluated on the message as it arrived. None: no action.
    Raises ValueError (or the selector's error) naming the problem."""
    steps = action_steps(rule)
    if not steps:
        return None

    def run(msg: QueuedMessage) -> None:
        values = [REMOVE if evaluate is None else evaluate(msg) for _, _, evaluate in steps]
        if rewrite(msg, [(system, name, value) for (system, name, _), value in zip(steps, values, strict=True)]):
            msg.size = len(msg.data)  # (a subscription runs actions before it counts the message)

    return run


class RuleSet:
    """A subscription's rules, by name (ignoring case), as its queue's ``admit``."""

    def __init__(self, rules: list[tuple[ServiceBusRule, float]]) -> None:
        self.rules: dict[str, tuple[ServiceBusRule, float]] = {}
        """The rules and when each was made (epoch seconds), in the order they were added."""
        self._filters: list[Callable[[QueuedMessage], bool]] = []
        self._actions: list[tuple[Callable[[QueuedMessage], bool], Action]] = []
        for rule, created in rules:
            self.rules[rule.name.lower()] = (rule, created)
        self._compile()

    def _compile(self) -> None:
        self._filters = []
        self._actions = []
        for rule, _ in self.rules.values():
            self._take(rule)

    def _take(self, rule: ServiceBusRule) -> None:
        keep = rule_filter(rule)
        self._filters.append(keep)
        action = rule_action(rule)
        if action is not None:
            self._actions.append((keep, action))

    def __call__(self, msg: QueuedMessage) -> bool:
        """Whether the subscription keeps ``msg``; if so, the actions of the rules that
        matched it have run on it (the subscription's own record of the message)."""
        if not self._actions:
            return any(f(msg) for f in self._filters)
        if not any(f(msg) for f in self._filters):
            return False
        for run in [action for keep, action in self._actions if keep(msg)]:  # all matched first
            run(msg)
        return True

    def add(self, rule: ServiceBusRule, now: float) -> None:
        if rule.name.lower() in self.rules:
            raise OperationError(409, "com.microsoft:entity-already-exists", f"a rule named {rule.name!r} exists already")
        self.rules[rule.name.lower()] = (rule, now)
        self._take(rule)

    def remove(self, name: str) -> None:
        if self.rules.pop(name.lower(), None) is None:
            raise OperationError(404, "amqp:not-found", f"no rule named {name!r}")
        self._compile()

    def dump(self) -> list[dict[str, Any]]:
        return [{"rule": rule.model_dump(exclude_none=True), "created": created} for rule, created in self.rules.values()]


def _default() -> list[tuple[ServiceBusRule, float]]:
    return [(ServiceBusRule(name=DEFAULT_RULE), time.time())]


def _loaded(dumped: Any) -> list[tuple[ServiceBusRule, float]]:
    return [(ServiceBusRule.model_validate(e["rule"]), float(e["created"])) for e in dumped]


def _save(vhost: VirtualHost, queue: Queue, rules: RuleSet) -> None:
    queue.settings = {**queue.settings, _RULES: rules.dump()}
    vhost.save_subscription(queue)


def apply_rules(vhost: VirtualHost, queue: Queue, configured: list[ServiceBusRule] | None) -> None:
    """Give a subscription its rules at start: those kept in the store, unless ``configured``
    (its rules in the configuration) are new or changed since they were last applied."""
    kept = queue.settings.get(_RULES)
    if configured is None:
        if kept is not None:
            queue.admit = RuleSet(_loaded(kept))
        return
    wanted = [r.model_dump(exclude_none=True) for r in configured]
    if kept is not None and queue.settings.get(_CONFIGURED) == wanted:
        queue.admit = RuleSet(_loaded(kept))
        return
    now = vhost.now()
    rules = queue.admit = RuleSet([(r, now) for r in configured])
    queue.settings = {**queue.settings, _CONFIGURED: wanted}
    _save(vhost, queue, rules)


def rules_of(queue: Queue) -> RuleSet:
    """A subscription's rules (a subscription without any has the ``$Default`` rule);
    raises :class:`OperationError` for a queue whose admission its consumer's filters decide."""
    admit = queue.admit
    if isinstance(admit, RuleSet):
        return admit
    if admit is not None:
        raise OperationError(400, "com.microsoft:argument-error", f"{queue.name!r} is filtered by its link's source filters")
    rules = queue.admit = RuleSet(_default())
    return rules


def _subscription(vhost: VirtualHost, queue: Queue) -> bool:
    return any(queue in t.subscriptions.values() for t in vhost.nodes.values() if isinstance(t, Topic))


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise OperationError(400, "com.microsoft:argument-error", f"{key} is a non-empty string")
    return value


def _rule_from_wire(name: str, description: Any) -> ServiceBusRule:
    """The rule an add-rule request's ``rule-description`` map describes."""
    if not isinstance(description, Mapping):
        raise OperationError(400, "com.microsoft:argument-error", "rule-description is a map")
    sql = description.get("sql-filter")
    corr = description.get("correlation-filter")
    action = description.get("sql-rule-action")
    fields: dict[str, Any] = {"name": name}
    if (sql is None) == (corr is None):
        raise OperationError(400, "com.microsoft:argument-error", "rule-description has one of sql-filter and correlation-filter")
    if sql is not None:
        if not isinstance(sql, Mapping) or not isinstance(sql.get("expression"), str):
            raise OperationError(400, "com.microsoft:argument-error", "sql-filter is a map with the expression, a string")
        fields["sql"] = sql["expression"]
    else:
        if not isinstance(corr, Mapping):
            raise OperationError(400, "com.microsoft:argument-error", "correlation-filter is a map")
        unknown = [str(k) for k in corr if k not in _WIRE_CORRELATION and k != "properties"]
        if unknown:
            raise OperationError(400, "com.microsoft:argument-error", f"unknown correlation-filter field(s) {unknown}")
        spec = {_WIRE_CORRELATION[k]: v for k, v in corr.items() if k in _WIRE_CORRELATION and v is not None}
        props = corr.get("properties")
        if props:
            spec["properties"] = {str(k): v for k, v in dict(props).items()}
        if not spec:
            raise OperationError(400, "com.microsoft:argument-error", "a correlation-filter needs at least one field")
        fields["correlation"] = spec
    if action is not None:
        if not isinstance(action, Mapping) or not isinstance(action.get("expression"), str):
            raise OperationError(400, "com.microsoft:argument-error", "sql-rule-action is a map with the expression, a string")
        fields["action"] = action["expression"]
    try:
        return ServiceBusRule.model_validate(fields)
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]) for e in exc.errors())
        raise OperationError(400, "com.microsoft:argument-error", f"bad rule {name!r}: {reasons}") from None


def _filter_on_wire(rule: ServiceBusRule) -> Described:
    if rule.correlation is not None:
        spec = rule.correlation
        values: list[Any] = [spec.get(k, spec.get("label") if k == "subject" else None) for k in _WIRE_CORRELATION.values()]
        props = spec.get("properties")
        return Described(DESCRIPTORS["correlation-filter"], [*values, dict(props) if isinstance(props, dict) else {}])
    sql = (rule.sql or _TRUE).strip()
    if sql.replace(" ", "") == _TRUE:
        return Described(DESCRIPTORS["true-filter"], [])
    if sql.replace(" ", "") == _FALSE:
        return Described(DESCRIPTORS["false-filter"], [])
    return Described(DESCRIPTORS["sql-filter"], [sql, _COMPATIBILITY_LEVEL])


def _on_wire(rule: ServiceBusRule, created: float) -> Described:
    if rule.action:
        action = Described(DESCRIPTORS["sql-rule-action"], [rule.action, _COMPATIBILITY_LEVEL])
    else:
        action = Described(DESCRIPTORS["empty-rule-action"], [])
    return Described(DESCRIPTORS["rule-description"], [_filter_on_wire(rule), action, rule.name, timestamp(int(created * 1000))])


Reply = tuple[int, str, Any]


def add_rule(vhost: VirtualHost, queue: Queue, body: Mapping[str, Any]) -> Reply:
    """``com.microsoft:add-rule``."""
    rule = _rule_from_wire(_text(body, "rule-name"), body.get("rule-description"))
    rules = rules_of(queue)
    rules.add(rule, vhost.now())
    _save(vhost, queue, rules)
    return 200, "OK", {}


def remove_rule(vhost: VirtualHost, queue: Queue, body: Mapping[str, Any]) -> Reply:
    """``com.microsoft:remove-rule``."""
    rules = rules_of(queue)
    rules.remove(_text(body, "rule-name"))
    _save(vhost, queue, rules)
    return 200, "OK", {}


def enumerate_rules(vhost: VirtualHost, queue: Queue, body: Mapping[str, Any]) -> Reply:
    """``com.microsoft:enumerate-rules``."""
    skip, top = body.get("skip", 0), body.get("top", 100)
    if any(not isinstance(v, int) or isinstance(v, bool) for v in (skip, top)) or skip < 0 or top <= 0:
        raise OperationError(400, "com.microsoft:argument-error", "skip is an integer >= 0 and top one > 0")
    page = list(rules_of(queue).rules.values())[skip : skip + top]
    if not page:
        return 204, "No Content", None
    return 200, "OK", {"rules": [{"rule-description": _on_wire(rule, created)} for rule, created in page]}


OPERATIONS: dict[str, Callable[[VirtualHost, Queue, Mapping[str, Any]], Reply]] = {
    "com.microsoft:add-rule": add_rule,
    "com.microsoft:remove-rule": remove_rule,
    "com.microsoft:enumerate-rules": enumerate_rules,
}
"""The rule operations, by operation name (a subscription's ``$management``)."""


def rule_operation(vhost: VirtualHost, queue: Queue, op: str, body: Mapping[str, Any]) -> Reply:
    """Run a rule operation on ``queue``; raises :class:`OperationError` (a queue that is no
    topic's subscription, a bad request, a name taken or unknown)."""
    if not _subscription(vhost, queue):
        raise OperationError(400, "com.microsoft:argument-error", f"{queue.name!r} is not a subscription: rules are a subscription's")
    return OPERATIONS[op](vhost, queue, body)
