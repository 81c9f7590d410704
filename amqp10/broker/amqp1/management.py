"""``$management``: request/response operations on a virtual host, over 1.0 messages.

A request is a message to ``$management`` with ``reply-to`` set, the operation
in the application property ``operation`` and its arguments in a map body.
The reply carries ``status-code`` (200 done, 201 created, 400 bad request,
403 refused, 404 not found, 409 conflicting declaration) and a map body.

Operations: ``stream-info`` (``address``); ``declare-exchange`` (``name``,
``type``, ``durable``, ``auto_delete``, ``internal``, ``alternate_exchange``,
``arguments``); ``delete-exchange`` (``name``); ``declare-queue`` (``name``,
``durable``, ``type``: queue or stream, ``arguments``: RabbitMQ's ``x-`` queue
arguments); ``delete-queue`` (``name``); ``bind`` and
``unbind`` (``source``, ``destination``, ``destination_type``: queue or
exchange, ``routing_key``, ``arguments``).

Policies (RabbitMQ's, see :mod:`amqp10.broker.core.policies`), for users with the
``administrator`` or ``policymaker`` tag: ``declare-policy`` (``name``, ``pattern``,
``apply-to``, ``definition``: a map, ``priority``) and ``delete-policy`` (``name``).

Definitions (the whole broker's, in RabbitMQ's JSON format; see
:mod:`amqp10.broker.definitions`), for users with the ``administrator`` tag only
(403 for others): ``export-definitions`` replies with the JSON text as the body;
``import-definitions`` takes the document as the body (JSON text, or a map) and
replies with a map: ``imported`` (counts per kind), ``warnings`` (what is read but
not applied, unknown fields) and ``skipped`` (entries that could not be applied,
each with its reason); 400 if the document cannot be read at all, 501 if the
broker offers no definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...message import Message
from ...types import DecodeError
from ..config import QueuePolicy
from ..core import (
    AccessRefused,
    ModelError,
    Node,
    NotFound,
    PartitionedStream,
    QueuedMessage,
    RuntimePolicy,
    Stream,
    VirtualHost,
)
from .message import Amqp1Message

__all__ = ["MANAGEMENT_ADDRESS", "Management"]

MANAGEMENT_ADDRESS = "$management"

Reply = tuple[int, Any]


class Management(Node):
    """``$management`` of one virtual host (each connection has its own)."""

    kind = "management"

    def __init__(
        self,
        vhost: VirtualHost,
        may_configure: Callable[[str], bool] = lambda resource: True,
        *,
        has_tag: Callable[[str], bool] = lambda tag: False,
    ) -> None:
        super().__init__(MANAGEMENT_ADDRESS, QueuePolicy())
        self.vhost = vhost
        self.may_configure = may_configure
        """The permission check for declaring, deleting and binding (the connection's user)."""
        self.has_tag = has_tag
        """Whether the connection's user has a tag (``administrator``: definitions and policies)."""
        self._operations: dict[str, Callable[[Mapping[str, Any]], Reply]] = {
            "stream-info": self._stream_info,
            "declare-exchange": self._declare_exchange,
            "delete-exchange": self._delete_exchange,
            "declare-queue": self._declare_queue,
            "delete-queue": self._delete_queue,
            "bind": self._bind,
            "unbind": self._unbind,
        }

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> bool:
        on_stored()
        try:
            request = Message.decode(msg.form(Amqp1Message.format))
        except (DecodeError, LookupError):
            return True
        props = request.application_properties or {}
        op = str(props.get("operation"))
        try:
            if op in ("export-definitions", "import-definitions"):
                status, body = self._definitions(op, request.body)
            elif op in ("declare-policy", "delete-policy"):
                status, body = self._policy(op, {**props, **(request.body if isinstance(request.body, Mapping) else {})})
            else:
                status, body = self._operation(op, props, request.body)
        except NotFound as exc:
            status, body = 404, {"error": str(exc)}
        except AccessRefused as exc:
            status, body = 403, {"error": str(exc)}
        except ModelError as exc:
            status, body = 409, {"error": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            status, body = 400, {"error": f"bad request: {exc}"}
        reply_to = request.reply_to
        if reply_to:
            target = self.vhost.lookup(reply_to, create=False)
            if target is not None:
                reply = Message(body=body, correlation_id=request.id if request.correlation_id is None else request.correlation_id)
                reply.application_properties = {"status-code": status}
                target.publish(Amqp1Message(reply.encode(), arrival=self.vhost.now()), lambda: None)
        return True

    def _operation(self, op: str, props: Mapping[str, Any], request_body: Any) -> Reply:
        handler = self._operations.get(op)
        if handler is None:
            return 400, {"error": f"unknown operation {op!r}"}
        args = request_body if isinstance(request_body, Mapping) else {}
        merged = {**{k: v for k, v in props.items() if k != "operation"}, **args}
        if handler != self._stream_info:
            self._check(merged)
        return handler(merged)

    def _definitions(self, op: str, request_body: Any) -> Reply:
        if not self.has_tag("administrator"):
            raise AccessRefused(f"{op} needs the administrator tag")
        port = self.vhost.broker.definitions
        if port is None:
            return 501, {"error": "this broker offers no definitions"}
        if op == "export-definitions":
            return 200, port.export_json()
        if not isinstance(request_body, str | bytes | Mapping):
            raise ValueError("the body must be the definitions document (JSON text or a map)")
        return 200, port.import_document(request_body)

    def _policy(self, op: str, args: Mapping[str, Any]) -> Reply:
        if not (self.has_tag("administrator") or self.has_tag("policymaker")):
            raise AccessRefused(f"{op} needs the administrator or policymaker tag")
        name = str(args["name"])
        if op == "delete-policy":
            self.vhost.delete_policy(name)
            return 200, {}
        existed = name in self.vhost.policies
        definition = args.get("definition") or {}
        if not isinstance(definition, Mapping):
            raise ValueError("definition must be a map")
        apply_to = args.get("apply-to", args.get("apply_to", "all"))
        policy = RuntimePolicy(name, str(args["pattern"]), str(apply_to), dict(definition), int(args.get("priority", 0)))
        self.vhost.declare_policy(policy)
        return (200 if existed else 201), {}

    def _check(self, args: Mapping[str, Any]) -> None:
        for key in ("name", "destination"):
            if key in args and not self.may_configure(str(args[key])):
                raise AccessRefused(f"configure access to {args[key]!r} in vhost {self.vhost.name!r} refused")

    # -- operations ------------------------------------------------------------------------
    def _stream_info(self, args: Mapping[str, Any]) -> Reply:
        node = self.vhost.nodes.get(str(args.get("address")))
        if isinstance(node, (Stream, PartitionedStream)):
            return 200, node.info()
        return 404, {"error": f"no stream at {args.get('address')!r}"}

    def _declare_exchange(self, args: Mapping[str, Any]) -> Reply:
        name = str(args["name"])
        existed = name in self.vhost.exchanges
        self.vhost.declare_exchange(
            name,
            str(args.get("type", "direct")),
            durable=bool(args.get("durable", True)),
            auto_delete=bool(args.get("auto_delete", False)),
            internal=bool(args.get("internal", False)),
            alternate=_opt_str(args.get("alternate_exchange")),
            arguments=dict(args.get("arguments") or {}),
        )
        return (200 if existed else 201), {}

    def _delete_exchange(self, args: Mapping[str, Any]) -> Reply:
        self.vhost.delete_exchange(str(args["name"]), if_unused=bool(args.get("if_unused", False)))
        return 200, {}

    def _declare_queue(self, args: Mapping[str, Any]) -> Reply:
        name = str(args["name"])
        existed = name in self.vhost.nodes
        arguments = dict(args.get("arguments") or {})
        kind = args.get("type")
        q = self.vhost.declare_queue(
            name,
            durable=bool(args.get("durable", True)),
            kind=None if kind is None else str(kind),
            arguments=arguments,
        )
        return (200 if existed else 201), {"name": q.name, "message_count": q.count}

    def _delete_queue(self, args: Mapping[str, Any]) -> Reply:
        name = str(args["name"])
        if self.vhost.queue(name) is None:
            raise NotFound(f"no queue {name!r} in vhost {self.vhost.name!r}")
        self.vhost.delete_node(name)
        return 200, {}

    def _binding_args(self, args: Mapping[str, Any]) -> tuple[str, str, str, dict[str, Any], str]:
        return (
            str(args["source"]),
            str(args["destination"]),
            str(args.get("routing_key", "")),
            dict(args.get("arguments") or {}),
            str(args.get("destination_type", "queue")),
        )

    def _bind(self, args: Mapping[str, Any]) -> Reply:
        source, dest, key, arguments, kind = self._binding_args(args)
        self.vhost.bind(source, dest, key, arguments, destination_kind=kind)
        return 201, {}

    def _unbind(self, args: Mapping[str, Any]) -> Reply:
        source, dest, key, arguments, kind = self._binding_args(args)
        self.vhost.unbind(source, dest, key, arguments, destination_kind=kind)
        return 200, {}


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)
