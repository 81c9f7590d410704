"""Direct reply-to (RabbitMQ's ``amq.rabbitmq.reply-to``): reply addresses and their consumers.

A requester consumes from the pseudo-queue :data:`REPLY_TO` and gets an address of its
own (``amq.rabbitmq.reply-to.<token>``) to put in its requests' reply-to; a reply
published to that address goes straight to that consumer, through no queue.

Protocol-neutral: one registry per broker (``Broker.replies``), so that any front end
can register a requester and deliver a reply to one registered by another (RabbitMQ 4
lets 1.0 and 0-9-1 clients answer each other this way).
"""

from __future__ import annotations

import secrets
from typing import Final, Protocol

from .message import QueuedMessage

__all__ = ["REPLY_PREFIX", "REPLY_TO", "DirectReplies", "ReplyConsumer"]

REPLY_TO: Final = "amq.rabbitmq.reply-to"
"""The pseudo-queue a requester consumes its replies from (and names as its reply-to)."""
REPLY_PREFIX: Final = REPLY_TO + "."
"""What every reply address starts with (:meth:`DirectReplies.is_reply_address`; a
per-message path tests it in place)."""


class ReplyConsumer(Protocol):
    """Who takes the replies sent to one address: a front end's requester."""

    def deliver_reply(self, msg: QueuedMessage) -> None:
        """Hand ``msg`` to the requester now (settled: a reply is never redelivered)."""


class DirectReplies:
    """The broker's reply addresses, each with its virtual host and its consumer.

    A virtual host is any object, told apart by identity (a
    :class:`~amqp10.broker.core.vhost.VirtualHost`; this module imports none)."""

    def __init__(self) -> None:
        self._consumers: dict[str, tuple[object, ReplyConsumer]] = {}
        self.prefix = REPLY_PREFIX
        """What this broker's reply addresses start with; with several workers it names this
        one (``amq.rabbitmq.reply-to.w<K>.``, broker/workers/ownership.py), so a reply
        published on any worker is sent to the requester's."""

    def register(self, vhost: object, consumer: ReplyConsumer) -> str:
        """A new reply address in ``vhost`` for ``consumer``, until :meth:`unregister`."""
        address = self.prefix + secrets.token_urlsafe(16)
        self._consumers[address] = (vhost, consumer)
        return address

    def unregister(self, address: str) -> None:
        self._consumers.pop(address, None)

    @staticmethod
    def is_reply_address(address: str) -> bool:
        return address.startswith(REPLY_PREFIX)

    def consumer(self, vhost: object, address: str) -> ReplyConsumer | None:
        """The consumer of ``address`` in ``vhost`` (None: no such address there)."""
        entry = self._consumers.get(address)
        if entry is None or entry[0] is not vhost:
            return None
        return entry[1]
