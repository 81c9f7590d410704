"""``$management``: the AMQP Management request/response node, over 1.0 messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...message import Message
from ...types import DecodeError
from ..config import QueuePolicy
from ..core import Broker, Node, QueuedMessage, Stream
from .message import Amqp1Message

__all__ = ["MANAGEMENT_ADDRESS", "Management"]

MANAGEMENT_ADDRESS = "$management"


class Management(Node):
    """``$management``: request/response operations on the broker (stream-info)."""

    kind = "management"

    def __init__(self, broker: Broker) -> None:
        super().__init__(MANAGEMENT_ADDRESS, QueuePolicy())
        self.broker = broker

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> bool:
        on_stored()
        try:
            request = Message.decode(msg.form(Amqp1Message.format))
        except (DecodeError, LookupError):
            return True
        props = request.application_properties or {}
        op = props.get("operation")
        status: int = 200
        body: Any = None
        if op == "stream-info":
            node = self.broker.nodes.get(str(props.get("address")))
            if isinstance(node, Stream):
                body = node.info()
            else:
                status, body = 404, {"error": f"no stream at {props.get('address')!r}"}
        else:
            status, body = 400, {"error": f"unknown operation {op!r}"}
        reply_to = request.reply_to
        if reply_to:
            target = self.broker.lookup(reply_to, create=False)
            if target is not None:
                reply = Message(body=body, correlation_id=request.id if request.correlation_id is None else request.correlation_id)
                reply.application_properties = {"status-code": status}
                target.publish(Amqp1Message(reply.encode(), arrival=self.broker.now()), lambda: None)
        return True
