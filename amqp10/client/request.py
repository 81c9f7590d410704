"""Request/response over a connection: :meth:`request` and :meth:`reply`.

Replies to our requests come to one dynamic receiver per connection and are
matched to their request by correlation-id; replies we send go back on the
link the requester attached, or on a sender opened to its ``reply_to``.
"""

from __future__ import annotations

import logging
import math
import uuid
from typing import Any

from .. import errors
from ..message import Message
from ..transport import Delivery as EngineDelivery
from ..types import Accepted, Error, ErrorCondition, Rejected
from ._common import deadline, describe_outcome, encode_payload
from .receiver import Delivery, Receiver
from .sender import Sender, Tracker
from .transactions import Transactions

__all__ = ["Requests"]

log = logging.getLogger("amqp10.client")


class Requests(Transactions):
    """The layer of :class:`~amqp10.client.Connection` that sends requests and replies."""

    def _init_layer(self) -> None:
        super()._init_layer()
        self._replies: Receiver | None = None
        self._requests: dict[Any, Tracker] = {}
        self._senders_by_address: dict[str, Sender] = {}

    async def request(
        self, address: str, message: Message, *, timeout: float | None = None
    ) -> Message:
        """Send ``message`` to ``address`` and return the response addressed back to us.

        Replies come to one dynamic receiver per connection: ``message.reply_to``
        is set to its address and ``message.id`` to a fresh UUID if it has none;
        the response is the message whose ``correlation_id`` equals that id.
        Raises :class:`~amqp10.errors.DeliveryError` if the request is not accepted.
        """
        limit = self._timeout_for(timeout)
        with deadline(limit, f"request to {address!r}"):
            await self._until_usable(limit, f"request to {address!r}")
            replies = await self._reply_receiver()
            sender = await self._cached_sender(address)
            assert replies.address is not None
            return await self._exchange(sender, replies.address, message)

    async def _exchange(self, sender: Sender, reply_to: str, message: Message) -> Message:
        """Send a request on ``sender`` and wait (the caller bounds the wait) for the
        response that comes back to ``reply_to`` correlated to the request's id.

        Sends even while the connection holds its links back after a reconnect
        (claims-based security re-puts its tokens this way before they re-attach)."""
        if message.id is None:
            message.id = uuid.uuid4()
        message.reply_to = reply_to
        key = message.id
        pending = Tracker()
        self._requests[key] = pending
        try:
            sender._check_usable()
            tracker = sender._submit(encode_payload(message), False)
            await sender._outcome_of(tracker, math.inf, math.inf)
            outcome = tracker.result()
            if not isinstance(outcome, Accepted):
                raise errors.DeliveryError(
                    f"request to {sender.address!r} was {describe_outcome(outcome)}", outcome=outcome
                )
            await pending._settled()
        finally:
            self._requests.pop(key, None)
        if pending.error is not None:
            raise pending.error
        response: Message = pending.outcome
        return response

    async def reply(
        self,
        request: Delivery | Message,
        response: Message,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send ``response`` to the request's ``reply_to`` address; return the outcome.

        Sets ``response.correlation_id`` to the request's id (or correlation id)
        unless it is set. The response goes on the link the peer attached to
        receive from that address (a direct peer's dynamic reply receiver), or
        else on a sender opened to it.
        """
        req = request.message if isinstance(request, Delivery) else request
        reply_to = req.reply_to
        if not reply_to:
            raise ValueError("the request has no reply_to address")
        if response.correlation_id is None:
            response.correlation_id = req.id if req.id is not None else req.correlation_id
        if response.to is None:
            response.to = reply_to
        limit = self._timeout_for(timeout)
        with deadline(limit, f"reply to {reply_to!r}"):
            sender = self._served.get(reply_to)
            if sender is None or not sender.is_open:
                self._served.pop(reply_to, None)
                sender = await self._cached_sender(reply_to)
            return await sender.send(response, timeout=math.inf)

    async def _reply_receiver(self) -> Receiver:
        async with self._lock():
            r = self._replies
            if r is None or not r.is_open:
                r = await self.open_receiver(dynamic=True, credit=100)
                r._on_delivery = self._on_reply
                self._replies = r
            return r

    async def _cached_sender(self, address: str) -> Sender:
        async with self._lock():
            s = self._senders_by_address.get(address)
            if s is None or s.error is not None:
                s = await self.open_sender(address)
                self._senders_by_address[address] = s
            return s

    def _on_reply(self, receiver: Receiver, d: EngineDelivery) -> None:
        try:
            message = Message.decode(d.payload)
        except Exception as exc:
            log.info("undecodable response on %s: %s", receiver.address, exc)
            d.settle(_rejected(f"undecodable message: {exc}"))
            return
        pending = self._requests.get(message.correlation_id)
        if not d.settled:
            d.accept()
        self._wake()
        if pending is None:
            log.debug("response with unknown correlation-id %r dropped", message.correlation_id)
            return
        pending.resolve(message)


def _rejected(description: str) -> Rejected:
    return Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=description))
