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
    """

    __slots__ = (
        "_chunks",
        "_ignored",
        "_no_payload",
        "_offset",
        "_resume",
        "_settle_pending",
        "_xfer_state",
        "aborted",
        "context",
        "delivery_id",
        "link",
        "message_format",
        "payload",
        "remote_settled",
        "remote_state",
        "resumed",
        "sent",
        "settled",
        "size",
        "state",
        "tag",
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
        self._chunks: list[bytes] | None = None
        self._offset = 0  # sender: bytes of ``payload`` written so far
        self._settle_pending = False  # receiver, rcv-settle-mode second: waiting for the sender
        self._resume = False  # sender: the next transfer resumes it (§2.6.13)
        self._xfer_state: Any = None  # sender: the state carried on its first transfer frame
        self._ignored = False  # receiver: a resumed delivery we do not know (§2.7.5 resume)
        self._no_payload = False  # sender: carried over by tag and state only (§2.6.13)

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
        self.link._delivery_update(self, state)

    def settle(self, state: Any = None) -> None:
        """Settle the delivery, with ``state`` as its final outcome if given.

        On a receiver in ``rcv-settle-mode`` second, the outcome is sent unsettled
        and the delivery settles once the sender has settled it (§2.6.12).
        """
        if self.settled or self._settle_pending or self.aborted:  # (_check_open, inline: per message)
            self._check_open()
        self.link._delivery_settle(self, state)

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
        if self._settle_pending or (self.settled and self.sent):
            raise IllegalStateError(f"delivery {self.tag!r} is already settled")
        self.link._delivery_abort(self)

    def _check_open(self) -> None:
        if self.settled or self._settle_pending:
            raise IllegalStateError(f"delivery {self.tag!r} is already settled")
        if self.aborted:
            raise IllegalStateError(f"delivery {self.tag!r} was aborted")
