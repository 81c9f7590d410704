"""RabbitMQ 4's management protocol: HTTP over AMQP 1.0 on ``/management`` ("management v2").

A client attaches a *link pair* to :data:`ADDRESS`: a sender and a receiver with the
same name, both with the link property ``paired: true`` (:data:`LINK_PROPERTIES`), the
sender's deliveries pre-settled. A request (:func:`request`) is a message on the
sender: ``message-id``, ``to`` the path, ``subject`` the HTTP method, ``reply-to``
:data:`REPLY_TO` (the paired receiver), the body an AMQP map or null. The reply
(:func:`reply`, read by :func:`parse_reply`) comes on the receiver: ``correlation-id``
the request's id, ``subject`` the status code as a string, application property
``http:response`` = ``1.1``, the body a map, a list, null, or the reason of a refusal
(a string).

=======  =========================================  ==========================================
method   path                                       answer
=======  =========================================  ==========================================
GET      :func:`queue_path`                         200 the queue (:func:`queue_map`)
PUT      :func:`queue_path` (:func:`queue_body`)    201 new, 200 the same exists; 409 differs
DELETE   :func:`queue_path`                         200 ``{message_count}`` (none: 0)
DELETE   :func:`purge_path`                         200 ``{message_count}``: purged
PUT      :func:`exchange_path` (:func:`exchange_    204; 409 an exchange that differs
         body`)
DELETE   :func:`exchange_path`                      204 (none: 204 too)
POST     :data:`BINDINGS` (:func:`binding_body`)    204
DELETE   :func:`binding_path`                       204 (none: 204 too)
GET      :func:`bindings_query`                     200 a list of :func:`binding_map`
PUT      :data:`TOKENS` (the new OAuth 2 token,     204; 401 a token that is not valid, or
         binary)                                    for another user (RabbitMQ 4.1)
=======  =========================================  ==========================================

Names in paths are percent-encoded, every byte but RFC 3986's unreserved characters
(:func:`segment`). Errors: 400 a bad request, 403 the default exchange or a reserved
``amq.`` name, 404 no such queue, 409 a declaration that differs from what exists.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from ..errors import ManagementError
from ..message import Message
from ..types import symbol
from .model import QueueInfo

__all__ = [
    "ADDRESS",
    "BINDINGS",
    "BINDING_FIELDS",
    "TOKENS",
    "EXCHANGE_FIELDS",
    "LINK_PROPERTIES",
    "QUEUE_FIELDS",
    "REPLY_TO",
    "BindingKey",
    "args_hash",
    "binding_body",
    "binding_map",
    "binding_path",
    "bindings_query",
    "check",
    "exchange_body",
    "exchange_path",
    "parse_binding_path",
    "parse_path",
    "parse_queue_map",
    "parse_reply",
    "purge_path",
    "queue_body",
    "queue_map",
    "queue_path",
    "reply",
    "request",
    "segment",
]

ADDRESS = "/management"
REPLY_TO = "$me"
"""The ``reply-to`` of a request whose answer goes to the paired receiver link."""
LINK_PROPERTIES = {symbol("paired"): True}
"""The link property both links of the pair carry (RabbitMQ refuses a pair without it)."""
RESPONSE_PROPERTY = "http:response"
HTTP_VERSION = "1.1"
BINDINGS = "/bindings"
TOKENS = "/auth/tokens"
"""Where a connection that logged in with an OAuth 2 token puts its renewed token."""

QUEUE_FIELDS = ("durable", "auto_delete", "exclusive", "arguments")
"""The keys of a queue declaration's body."""
EXCHANGE_FIELDS = ("durable", "auto_delete", "type", "internal", "arguments")
"""The keys of an exchange declaration's body."""
BINDING_FIELDS = ("source", "destination_queue", "destination_exchange", "binding_key", "arguments")
"""The keys of a binding's body."""


# -- paths ------------------------------------------------------------------------------------
def segment(name: str) -> str:
    """``name`` as one path segment: every byte percent-encoded but RFC 3986's unreserved."""
    return quote(name, safe="")


def queue_path(name: str) -> str:
    return f"/queues/{segment(name)}"


def purge_path(name: str) -> str:
    return f"{queue_path(name)}/messages"


def exchange_path(name: str) -> str:
    return f"/exchanges/{segment(name)}"


BindingKey = tuple[str, str, str, str, str]
"""A binding as its path names it: source, ``queue`` or ``exchange``, destination, key,
and the hash of its arguments (:func:`args_hash`)."""


def binding_path(source: str, destination_type: str, destination: str, key: str, hashed: str = "") -> str:
    """The path of one binding (``hashed``: :func:`args_hash` of its arguments, empty for none)."""
    dst = "dstq" if destination_type == "queue" else "dste"
    return (
        f"{BINDINGS}/src={segment(source)};{dst}={segment(destination)};"
        f"key={segment(key)};args={hashed}"
    )


def bindings_query(source: str, destination_type: str, destination: str, key: str) -> str:
    """The path that lists the bindings from ``source`` to ``destination`` with ``key``."""
    dst = "dstq" if destination_type == "queue" else "dste"
    return f"{BINDINGS}?{urlencode({'src': source, dst: destination, 'key': key}, quote_via=quote, safe='')}"


def args_hash(arguments: Mapping[str, Any]) -> str:
    """A binding's arguments in its path: empty without arguments, else a digest (ours:
    the server chooses it; a client finds a binding's path with :func:`bindings_query`)."""
    if not arguments:
        return ""
    digest = hashlib.sha256(json.dumps(dict(arguments), sort_keys=True, default=repr).encode())
    return base64.urlsafe_b64encode(digest.digest()[:6]).decode().rstrip("=")


def parse_path(path: str) -> tuple[list[str], dict[str, str]]:
    """A request's path: its segments (decoded) and its query."""
    split = urlsplit(path)
    segments = [unquote(s) for s in split.path.split("/")[1:]]
    return segments, dict(parse_qsl(split.query, keep_blank_values=True))


def parse_binding_path(raw: str) -> BindingKey | None:
    """The binding a path's last segment (``src=X;dstq=Q;key=K;args=H``, still encoded)
    names; None if it is not one."""
    parts = dict(p.partition("=")[::2] for p in raw.split(";"))
    kind = "queue" if "dstq" in parts else "exchange" if "dste" in parts else None
    if kind is None or "src" not in parts or "key" not in parts or "args" not in parts:
        return None
    destination = parts["dstq" if kind == "queue" else "dste"]
    return unquote(parts["src"]), kind, unquote(destination), unquote(parts["key"]), parts["args"]


# -- bodies -----------------------------------------------------------------------------------
def queue_body(
    *, durable: bool, auto_delete: bool, exclusive: bool, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {"durable": durable, "auto_delete": auto_delete, "exclusive": exclusive, "arguments": dict(arguments)}


def exchange_body(
    kind: str, *, durable: bool, auto_delete: bool, internal: bool, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {"type": kind, "durable": durable, "auto_delete": auto_delete, "internal": internal, "arguments": dict(arguments)}


def binding_body(
    source: str, destination_type: str, destination: str, key: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "source": source,
        f"destination_{destination_type}": destination,
        "binding_key": key,
        "arguments": dict(arguments),
    }


def queue_map(q: QueueInfo) -> dict[str, Any]:
    """A queue as the node answers it (``GET``/``PUT`` :func:`queue_path`)."""
    return {
        "message_count": q.message_count,
        "consumer_count": q.consumer_count,
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "type": q.type,
        "arguments": dict(q.arguments),
        "leader": q.leader,
        "replicas": list(q.replicas),
    }


def parse_queue_map(body: Any) -> QueueInfo:
    """The queue a :func:`queue_map` describes (:class:`ManagementError` if it is none)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("name"), str):
        raise ManagementError(f"the queue's description is not a map with its name: {body!r}"[:300])
    return QueueInfo(
        name=body["name"],
        type=str(body.get("type", "classic")),
        durable=bool(body.get("durable", True)),
        auto_delete=bool(body.get("auto_delete", False)),
        exclusive=bool(body.get("exclusive", False)),
        arguments=dict(body.get("arguments") or {}),
        message_count=int(body.get("message_count", 0)),
        consumer_count=int(body.get("consumer_count", 0)),
        vhost=str(body.get("vhost", "/")),
        leader=None if body.get("leader") is None else str(body["leader"]),
        replicas=[str(r) for r in body.get("replicas") or []],
    )


def binding_map(source: str, destination_type: str, destination: str, key: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A binding as the node lists it (``GET`` :func:`bindings_query`), with its path."""
    return {
        "source": source,
        f"destination_{destination_type}": destination,
        "binding_key": key,
        "arguments": dict(arguments),
        "location": binding_path(source, destination_type, destination, key, args_hash(arguments)),
    }


# -- messages ---------------------------------------------------------------------------------
def request(method: str, path: str, body: Any = None) -> Message:
    """A request (the caller's request/reply machinery sets its ``message-id``)."""
    return Message(body=body, to=path, subject=method, reply_to=REPLY_TO)


def reply(status: int) -> tuple[dict[str, Any], str]:
    """A reply's application properties and subject (its body is the answer)."""
    return {RESPONSE_PROPERTY: HTTP_VERSION}, str(status)


def parse_reply(message: Message) -> tuple[int, Any]:
    """A reply's status code and body (a reply without a numeric subject is a 500)."""
    try:
        status = int(str(message.subject))
    except ValueError:
        return 500, f"the reply's subject is no status code: {message.subject!r}"
    return status, message.body


def check(status: int, body: Any, ok: tuple[int, ...], what: str) -> Any:
    """The body of a reply whose status is one of ``ok``; else the
    :class:`~amqp10.errors.ManagementError` for its status, with its reason."""
    if status in ok:
        return body
    raise ManagementError.for_status(status, body if isinstance(body, str) else repr(body), what)
