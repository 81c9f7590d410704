"""The Service Bus emulator's ``Config.json``, read as ``[servicebus]`` entities.

The emulator's file (``UserConfig.Namespaces[0]``) lists ``Queues`` and ``Topics``
with ``Subscriptions`` and their ``Rules``; each becomes the corresponding
:class:`~amqp10.broker.config.ServiceBusQueue`, ``ServiceBusTopic`` and
``ServiceBusRule``. Read are ``Name``, ``MaxDeliveryCount``, ``LockDuration``
(ISO 8601 ``PT…``) and the rules' ``SqlFilter.SqlExpression``,
``CorrelationFilter`` and ``Action.SqlExpression``; the other properties are not applied.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...config import ServiceBusQueue, ServiceBusRule, ServiceBusSubscription, ServiceBusTopic

__all__ = ["read_emulator_config"]

_DURATION = re.compile(r"^PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?$")
_CORRELATION = {
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
    correlation = {_CORRELATION[k]: v for k, v in corr.items() if k in _CORRELATION} if corr else None
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
