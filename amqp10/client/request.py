"""Request/response over a connection: :meth:`request` and :meth:`reply`.

Replies to our requests come to one dynamic receiver per connection and are
matched to their request by correlation-id; replies we send go back on the
link the requester attached, or on a sender opened to its ``reply_to``.
A node that wants links of its own (RabbitMQ 4's ``/management`` link pair, a
``$management`` that answers on a receiver from it) gets them with
:meth:`Requests.request_links`.
"""

from __future__ import annotations

import logging
import math
import uuid
from typing import Any

from .. import errors
from ..message import Message
from ..transport import Delivery as EngineDelivery
from ..types import Accepted, Error, ErrorCondition, Rejected, Source, Target
from ._common import SettleMode, deadline, describe_outcome, encode_payload
from .receiver import Delivery, Receiver
from .sender import Sender, Tracker
from .transactions import Transactions

__all__ = ["RequestLinks", "Requests"]

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

    async def request_links(
        self,
        address: str,
        *,
        reply_address: str | None = None,
        reply_to: str | None = None,
        name: str | None = None,
        properties: dict[Any, Any] | None = None,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        timeout: float | None = None,
    ) -> RequestLinks:
        """A sender to the request node at ``address`` and a receiver from it for the replies.

        The receiver's target is ``reply_address`` (default: a fresh
        ``ADDRESS-replies-UUID``), and requests say ``reply_to`` (default: that
        address). Both links take ``name`` (RabbitMQ's link pair: one name, the
        ``properties`` ``{paired: true}``) and ``settle_mode``.
        """
        reply_address = reply_address or f"{address}-replies-{uuid.uuid4()}"
        sender = await self.open_sender(
            address, name=name, source=Source(address=address), properties=properties,
            settle_mode=settle_mode, timeout=timeout,
        )  # fmt: skip
        try:
            receiver = await self.open_receiver(
                address, name=name, target=Target(address=reply_address), properties=properties,
                settle_mode=settle_mode, credit=100, timeout=timeout,
            )  # fmt: skip
        except BaseException:
            await sender.close()
            raise
        receiver._on_delivery = self._on_reply
        return RequestLinks(self, sender, receiver, reply_to or reply_address)

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
            tracker = sender._submit(encode_payload(message), None)
            await sender._outcome_of(tracker, math.inf, math.inf)
            outcome = tracker.result()
            if outcome is not None and not isinstance(outcome, Accepted):  # (None: sent pre-settled)
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


class RequestLinks:
    """A request node's sender and reply receiver (see :meth:`Requests.request_links`)."""

    def __init__(self, conn: Requests, sender: Sender, receiver: Receiver, reply_to: str) -> None:
        self._conn = conn
        self.sender = sender
        self.receiver = receiver
        self.reply_to = reply_to

    async def request(self, message: Message, *, timeout: float | None = None) -> Message:
        """Send ``message`` and return the reply correlated to it (see :meth:`Requests.request`)."""
        conn = self._conn
        limit = conn._timeout_for(timeout)
        with deadline(limit, f"request to {self.sender.address!r}"):
            await conn._until_usable(limit, f"request to {self.sender.address!r}")
            return await conn._exchange(self.sender, self.reply_to, message)

    @property
    def is_open(self) -> bool:
        return self.sender.is_open and self.receiver.is_open

    async def close(self, *, timeout: float | None = None) -> None:
        """Detach both links."""
        for link in (self.sender, self.receiver):
            if link.is_open:
                await link.close(timeout=timeout)


def _rejected(description: str) -> Rejected:
    return Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=description))
