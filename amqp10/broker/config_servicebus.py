"""The ``[servicebus]`` section of the broker configuration (the Azure Service Bus
conventions: amqp1/servicebus/); part of :mod:`amqp10.broker.config`, which re-exports it.

``emulator_config`` names the Service Bus emulator's ``Config.json``
(:func:`read_emulator_config`): its file (``UserConfig.Namespaces[0]``) lists ``Queues``
and ``Topics`` with ``Subscriptions`` and their ``Rules``; each becomes the corresponding
:class:`ServiceBusQueue`, :class:`ServiceBusTopic` and :class:`ServiceBusRule`. Read are
``Name``, ``MaxDeliveryCount``, ``LockDuration`` (ISO 8601 ``PT…``) and the rules'
``SqlFilter.SqlExpression``, ``CorrelationFilter`` and ``Action.SqlExpression``; the other
properties are not applied.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from .config_model import StrictModel as _Model
from .core.subscription_rules import action_steps, rule_filter

__all__ = [
    "ServiceBusConfig",
    "ServiceBusQueue",
    "ServiceBusRule",
    "ServiceBusSubscription",
    "ServiceBusTopic",
    "SharedAccessKey",
    "read_emulator_config",
]


class SharedAccessKey(_Model):
    """A Service Bus shared-access key (a namespace's authorization rule)."""

    name: str = Field(min_length=1, description="the key's name (SharedAccessKeyName in a connection string)")
    key: str = Field(min_length=1, description="the key (SharedAccessKey); SAS tokens are signed with its text")
    rights: list[Literal["Listen", "Send", "Manage"]] = Field(
        default=["Listen", "Send", "Manage"], description="what a token signed with it may do"
    )


class ServiceBusQueue(_Model):
    """A Service Bus queue declared at start, with its dead-letter queue."""

    name: str = Field(min_length=1, description="the queue's name")
    max_delivery_count: int = Field(
        default=10, ge=1, description="deliveries after which a message goes to QUEUE/$deadletterqueue"
    )
    lock_duration: float = Field(
        default=60.0,
        gt=0,
        description="seconds a peek-locked delivery stays locked (x-opt-locked-until); unless renewed, "
        "the message then goes back to the queue, its delivery count one up",
    )


class ServiceBusRule(_Model):
    """A subscription's rule: a message that matches any of its subscription's rules is kept."""

    name: str = Field(min_length=1, description="the rule's name")
    sql: str | None = Field(
        default=None,
        description="a SQL filter (the broker's selector language, SQL dialect: bare names are "
        "application properties); with neither sql nor correlation the rule matches everything",
    )
    correlation: dict[str, str | int | float | bool | dict[str, str | int | float | bool]] | None = Field(
        default=None,
        description="a correlation filter: correlation_id, message_id, to, reply_to, subject (label), "
        "session_id, reply_to_session_id, content_type, and properties (application properties); all must match",
    )
    action: str | None = Field(
        default=None,
        description="a SQL rule action (SET name = expression and REMOVE name statements, separated by ;; "
        "name an application property or sys.X), run on the subscription's copy of a message the rule matched",
    )


    @model_validator(mode="after")
    def _compiles(self) -> ServiceBusRule:
        if self.sql is None and self.correlation is None and self.action is None:
            return self
        rule_filter(self)
        action_steps(self)  # a bad filter is a configuration error, with the selector's reason
        return self


class ServiceBusSubscription(_Model):
    """A topic's subscription, addressed TOPIC/Subscriptions/NAME."""

    name: str = Field(min_length=1, description="the subscription's name")
    max_delivery_count: int = Field(default=10, ge=1, description="as a queue's")
    rules: list[ServiceBusRule] = Field(
        default=[ServiceBusRule(name="$Default")], description="its rules (by default one that matches everything)"
    )


class ServiceBusTopic(_Model):
    """A Service Bus topic declared at start."""

    name: str = Field(min_length=1, description="the topic's name")
    subscriptions: list[ServiceBusSubscription] = Field(default=[], description="its subscriptions")


class ServiceBusConfig(_Model):
    """The Azure Service Bus conventions: claims-based security on $cbs, entities."""

    enabled: bool = Field(
        default=False,
        description="offer SASL ANONYMOUS and MSSBCBS; such a connection's links need tokens put on $cbs",
    )
    shared_access_keys: list[SharedAccessKey] = Field(
        default=[], description="keys that SAS tokens (servicebus.windows.net:sastoken) are checked against"
    )
    jwt_secret: str | None = Field(
        default=None, description="the HS256 key that JWTs (token type jwt) are checked against; None: no JWTs"
    )
    queues: list[ServiceBusQueue] = Field(default=[], description="queues declared at start")
    topics: list[ServiceBusTopic] = Field(default=[], description="topics declared at start, with subscriptions")
    emulator_config: Path | None = Field(
        default=None,
        description="the Service Bus emulator's Config.json: its first namespace's queues and topics "
        "(with subscriptions and rules) are declared too",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_emulator_config(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("emulator_config") is None:
            return data
        data = dict(data)
        # read once, into queues and topics (validating the result again adds nothing)
        queues, topics = read_emulator_config(Path(data.pop("emulator_config")))
        data["queues"] = [*data.get("queues", []), *(q.model_dump() for q in queues)]
        data["topics"] = [*data.get("topics", []), *(t.model_dump() for t in topics)]
        return data


# -- the emulator's Config.json -------------------------------------------------------------
_DURATION = re.compile(r"^PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?$")
_EMULATOR_CORRELATION = {
    "ContentType": "content_type",
    "CorrelationId": "correlation_id",
    "Label": "subject",
    "MessageId": "message_id",
    "ReplyTo": "reply_to",
    "ReplyToSessionId": "reply_to_session_id",
    "SessionId": "session_id",
    "To": "to",
    "Properties": "properties",
}


def _seconds(text: Any) -> float:
    m = _DURATION.match(str(text))
    if m is None or not any(m.groups()):
        raise ValueError(f"LockDuration {text!r} is not an ISO 8601 duration like PT1M")
    h, mi, s = (float(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + s


def _rule(r: dict[str, Any]) -> ServiceBusRule:
    props = r.get("Properties") or {}
    sql = (props.get("SqlFilter") or {}).get("SqlExpression")
    corr = props.get("CorrelationFilter")
    correlation = {_EMULATOR_CORRELATION[k]: v for k, v in corr.items() if k in _EMULATOR_CORRELATION} if corr else None
    action = (props.get("Action") or {}).get("SqlExpression")
    return ServiceBusRule(name=r["Name"], sql=sql, correlation=correlation, action=action)


def _queue_fields(props: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "MaxDeliveryCount" in props:
        out["max_delivery_count"] = props["MaxDeliveryCount"]
    if "LockDuration" in props:
        out["lock_duration"] = _seconds(props["LockDuration"])
    return out


def read_emulator_config(path: Path) -> tuple[list[ServiceBusQueue], list[ServiceBusTopic]]:
    """The queues and topics of the emulator's config file; raises ValueError naming the problem."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        ns = doc["UserConfig"]["Namespaces"][0]
        queues = [ServiceBusQueue(name=q["Name"], **_queue_fields(q.get("Properties") or {})) for q in ns.get("Queues", [])]
        topics = []
        for t in ns.get("Topics", []):
            subs = []
            for sub in t.get("Subscriptions", []):
                fields = _queue_fields(sub.get("Properties") or {})
                fields.pop("lock_duration", None)
                if sub.get("Rules"):
                    fields["rules"] = [_rule(r) for r in sub["Rules"]]
                subs.append(ServiceBusSubscription(name=sub["Name"], **fields))
            topics.append(ServiceBusTopic(name=t["Name"], subscriptions=subs))
    except (OSError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a Service Bus emulator config: {type(exc).__name__}: {exc}") from None
    return queues, topics
