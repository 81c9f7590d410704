"""The OASIS AMQP Management draft's messages: requests to ``$management`` and their replies.

A request (:func:`request`, read by :func:`parse_request`) is a message to
:data:`ADDRESS` with ``reply-to`` set, the operation in its application properties
— ``operation`` (``CREATE``, ``READ``, ``UPDATE``, ``DELETE``, ``QUERY``; our broker
adds ``PURGE`` and ``PEEK``), ``type`` (the entity type: ``queue``, ``stream``,
``exchange``, ``binding``, ...), ``name`` or ``identity``, and for QUERY
``entityType``, ``offset``, ``count`` — and a map body (attributes, or QUERY's
``attributeNames``). The reply (:func:`reply_properties`, read by
:func:`parse_response`) correlates by the request's ``message-id`` and carries
``statusCode`` and ``statusDescription`` (HTTP's codes: 200, 201 created, 204
deleted; 400, 403, 404, 409, 501) in its application properties (:func:`reply_status`
reads them, and the ``status-code`` spelling too: ``$cbs`` replies read it here).

The attribute maps of our broker's entity types: :func:`queue_attributes`,
:func:`exchange_attributes`, :func:`binding_attributes` (a binding is named by
:func:`binding_name`), and what a READ answers, :func:`parse_queue`, :func:`parse_exchange`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..message import Message
from .model import ExchangeInfo, QueueInfo, queue_type

__all__ = [
    "ADDRESS",
    "EXCHANGE_READ",
    "QUEUE_READ",
    "STANDARD_PROPERTIES",
    "STATUS_PROPERTIES",
    "Request",
    "Response",
    "binding_attributes",
    "binding_name",
    "exchange_attributes",
    "parse_exchange",
    "parse_queue",
    "parse_request",
    "parse_response",
    "queue_attributes",
    "reply_properties",
    "reply_status",
    "request",
]

ADDRESS = "$management"
STANDARD_PROPERTIES = ("operation", "type", "name", "identity", "locales")
"""The draft's application properties of a request; the others are the operation's own."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """A management request in the draft's terms, whatever protocol carried it."""

    operation: Any
    type: Any = None
    name: Any = None
    identity: Any = None
    properties: Mapping[str, Any] = field(default_factory=dict)
    """The other application properties (``entityType``, ``offset``, ``count``, ...)."""
    body: Any = None


@dataclass(kw_only=True)
class Response:
    """``status`` (the draft's ``statusCode``), ``description``, ``body`` and extra properties."""

    status: int
    description: str = "OK"
    body: Any = None
    properties: dict[str, Any] = field(default_factory=dict)


def request(req: Request) -> Message:
    """The request message (the caller's request/reply machinery sets its id and reply-to)."""
    props: dict[str, Any] = {"operation": req.operation}
    for key in ("type", "name", "identity"):
        value = getattr(req, key)
        if value is not None:
            props[key] = value
    props.update(req.properties)
    return Message(body=req.body, application_properties=props)


def parse_request(props: Mapping[str, Any] | None, body: Any) -> Request:
    """The request a message's application properties and body make."""
    props = dict(props) if isinstance(props, Mapping) else {}
    return Request(
        operation=props.get("operation"),
        type=props.get("type"),
        name=props.get("name"),
        identity=props.get("identity"),
        properties={k: v for k, v in props.items() if k not in STANDARD_PROPERTIES},
        body=body,
    )


def reply_properties(response: Response) -> dict[str, Any]:
    """A reply's application properties (``status-code`` too, as some clients read it)."""
    return {
        **response.properties,
        "statusCode": response.status,
        "statusDescription": response.description,
        "status-code": response.status,
    }


STATUS_PROPERTIES = ("statusCode", "statusDescription", "status-code", "status-description")
"""The application properties a reply's status may come in: the draft's spelling, and the
one of the CBS draft (``$cbs``) and of some clients."""


def reply_status(props: Mapping[str, Any]) -> tuple[int, str] | None:
    """The status code and description (none: ``""``) a reply's application properties
    carry, in either spelling (:data:`STATUS_PROPERTIES`; the draft's first); None if they
    carry no integer status code."""
    status = props.get("statusCode", props.get("status-code"))
    if not isinstance(status, int) or isinstance(status, bool):
        return None
    description = props.get("statusDescription", props.get("status-description"))
    return int(status), "" if description is None else str(description)


def parse_response(message: Message) -> Response:
    """The response a reply carries; a reply without a status code is a 500."""
    props = dict(message.application_properties or {})
    status = reply_status(props)
    others = {k: v for k, v in props.items() if k not in STATUS_PROPERTIES}
    if status is None:
        return Response(status=500, description=f"the reply has no statusCode ({others!r})"[:300], body=message.body)
    return Response(status=status[0], description=status[1], body=message.body, properties=others)


# -- entities ---------------------------------------------------------------------------------
def queue_attributes(*, durable: bool, auto_delete: bool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {"durable": durable, "auto_delete": auto_delete, "arguments": dict(arguments)}


def exchange_attributes(
    kind: str, *, durable: bool, auto_delete: bool, internal: bool, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "exchange_type": kind,
        "durable": durable,
        "auto_delete": auto_delete,
        "internal": internal,
        "arguments": dict(arguments),
    }


def binding_attributes(
    source: str, destination_type: str, destination: str, key: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "source": source,
        "destination": destination,
        "destination_type": destination_type,
        "routing_key": key,
        "arguments": dict(arguments),
    }


def binding_name(source: str, destination_type: str, destination: str, key: str, arguments: Mapping[str, Any]) -> str:
    """A binding's name: the JSON list ``[source, destination_type, destination, routing_key, arguments]``."""
    return json.dumps([source, destination_type, destination, key, dict(arguments)], separators=(",", ":"), sort_keys=True)


QUEUE_READ = ("name", "type", "vhost", "durable", "auto_delete", "exclusive", "arguments", "depth", "consumers")
"""The attributes :func:`parse_queue` reads (what a QUERY of queues asks for)."""
EXCHANGE_READ = ("name", "exchange_type", "durable", "auto_delete", "internal", "arguments")
"""The attributes :func:`parse_exchange` reads."""


def parse_queue(attrs: Mapping[str, Any]) -> QueueInfo:
    """A queue (or stream) from the attributes a READ or QUERY answers."""
    arguments = dict(attrs.get("arguments") or {})
    return QueueInfo(
        name=str(attrs.get("name")),
        type=queue_type(arguments, stream=attrs.get("type") == "stream"),
        durable=bool(attrs.get("durable", True)),
        auto_delete=bool(attrs.get("auto_delete", False)),
        exclusive=bool(attrs.get("exclusive", False)),
        arguments=arguments,
        message_count=int(attrs.get("depth") or 0),
        consumer_count=int(attrs.get("consumers") or 0),
        vhost=str(attrs.get("vhost", "/")),
    )


def parse_exchange(attrs: Mapping[str, Any]) -> ExchangeInfo:
    """An exchange from the attributes a READ or QUERY answers."""
    return ExchangeInfo(
        name=str(attrs.get("name")),
        type=str(attrs.get("exchange_type", "direct")),
        durable=bool(attrs.get("durable", True)),
        auto_delete=bool(attrs.get("auto_delete", False)),
        internal=bool(attrs.get("internal", False)),
        arguments=dict(attrs.get("arguments") or {}),
    )
