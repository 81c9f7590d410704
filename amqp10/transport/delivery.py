"""Deliveries (Part 2 §2.6.12): one message's transfer, its state and settlement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..types import Accepted, Error, Modified, Rejected, Released
from .errors import IllegalStateError

if TYPE_CHECKING:
    from .link import Link

__all__ = ["Delivery"]


class Delivery:
    """A delivery on a link, seen from this end.

    On a receiver, ``payload`` holds the message bytes once the delivery is
    complete. ``state``/``settled`` are ours; ``remote_state``/``remote_settled``
    the peer's, as its dispositions report them.

    A delivery is the record its link, the link's session and link resumption
    share: besides what the application reads, it carries the sender's transfer
    bookkeeping in public fields (``offset``, ``transfer_state``, ``resume``,
    ``no_payload``) and the receiver's ``settle_pending``. The application
    changes a delivery only through its verbs (``settle()``, ``update()``,
    ``abort()``, ...), which go to its link.
    """

    __slots__ = (
        "aborted",
        "context",
        "delivery_id",
        "link",
        "message_format",
        "no_payload",
        "offset",
        "payload",
        "remote_settled",
        "remote_state",
        "resume",
        "resumed",
        "sent",
        "settle_pending",
        "settled",
        "size",
        "state",
        "tag",
        "transfer_state",
    )

    def __init__(self, link: Link, tag: bytes, payload: bytes, message_format: int = 0) -> None:
        self.link = link
        self.tag = tag
        self.payload = payload
        self.message_format = message_format
        self.delivery_id: int | None = None
        self.state: Any = None
        self.remote_state: Any = None
        self.settled = False
        self.remote_settled = False
        self.aborted = False
        self.resumed = False
        self.sent = False  # all frames written (sender side)
        self.size = len(payload)
        self.context: Any = None  # free for the application (e.g. a future to resolve)
        self.offset = 0
        """Sender: the bytes of ``payload`` written so far."""
        self.settle_pending = False
        """Receiver in rcv-settle-mode second: our outcome is sent, unsettled; the
        delivery settles when the sender settles it (§2.6.12)."""
        self.resume = False
        """Sender: the next transfer of this delivery carries resume=true (§2.6.13)."""
        self.transfer_state: Any = None
        """Sender: the delivery state carried on its first transfer frame, if any."""
        self.no_payload = False
        """Sender: carried over by tag and state only (§2.6.13): it cannot be resent."""

    def __repr__(self) -> str:
        return (
            f"Delivery(tag={self.tag!r}, id={self.delivery_id}, state={self.state!r}, "
            f"settled={self.settled}, remote_state={self.remote_state!r}, "
            f"remote_settled={self.remote_settled})"
        )

    # -- the application's verbs -------------------------------------------------
    def update(self, state: Any) -> None:
        """Tell the peer this delivery's (non-final or final) state without settling."""
        self._check_open()
        self.link.update_delivery(self, state)

    def settle(self, state: Any = None) -> None:
        """Settle the delivery, with ``state`` as its final outcome if given.

        On a receiver in ``rcv-settle-mode`` second, the outcome is sent unsettled
        and the delivery settles once the sender has settled it (§2.6.12).
        """
        if self.settled or self.settle_pending or self.aborted:  # (_check_open, inline: per message)
            self._check_open()
        self.link.settle_delivery(self, state)

    def accept(self) -> None:
        """Settle with the ``accepted`` outcome."""
        self.settle(Accepted())

    def reject(self, error: Error | None = None) -> None:
        """Settle with the ``rejected`` outcome."""
        self.settle(Rejected(error=error))

    def release(self) -> None:
        """Settle with the ``released`` outcome."""
        self.settle(Released())

    def modify(
        self,
        *,
        delivery_failed: bool | None = None,
        undeliverable_here: bool | None = None,
        message_annotations: dict[Any, Any] | None = None,
    ) -> None:
        """Settle with the ``modified`` outcome."""
        self.settle(
            Modified(
                delivery_failed=delivery_failed,
                undeliverable_here=undeliverable_here,
                message_annotations=message_annotations,
            )
        )

    def abort(self) -> None:
        """Abort a delivery the sender has not finished sending (§2.6.14).

        A pre-settled delivery (settled from the start) can be aborted too,
        until its last frame is written.
        """
        if self.aborted:
            raise IllegalStateError(f"delivery {self.tag!r} was aborted")
        if self.settle_pending or (self.settled and self.sent):
            raise IllegalStateError(f"delivery {self.tag!r} is already settled")
        self.link.abort_delivery(self)

    def _check_open(self) -> None:
        if self.settled or self.settle_pending:
            raise IllegalStateError(f"delivery {self.tag!r} is already settled")
        if self.aborted:
            raise IllegalStateError(f"delivery {self.tag!r} was aborted")
