"""What senders and receivers share: :class:`Link` (name, address, state, closing).

These wrap the engine's endpoints (``amqp10.transport``); the connection's
event handler updates them, and the application awaits on them. Everything
runs in the connection's event loop: no locks, just wake-up signals.
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from .. import errors
from ..io.driver import Signal
from ..transport import IllegalStateError, LinkState
from ..transport import Link as EngineLink
from ..transport import Sender as EngineSender
from ..transport import Session as EngineSession
from ..types import Error
from ..types.transactions import TransactionalState
from ._common import deadline
from .core import ConnectionCore

__all__ = ["Link", "LinkSession", "TransactionLike"]


class LinkSession(Protocol):
    """What a link knows of its session (a :class:`~amqp10.client.Session`).

    A protocol rather than the class: sessions open senders and receivers,
    which build on this module, so it cannot import them (the links opened
    here are typed as :class:`Link`).
    """

    _links: set[Link]
    incoming: bool

    @property
    def is_open(self) -> bool: ...

    async def open_sender(self, address: str | None, **kwargs: Any) -> Link: ...

    async def open_receiver(self, address: str | None, **kwargs: Any) -> Link: ...

    async def close(self, *, timeout: float | None = None) -> None: ...


class TransactionLike(Protocol):
    """What a transfer or disposition needs of a :class:`~amqp10.client.Transaction`."""

    def _state_for(self, conn: ConnectionCore) -> TransactionalState: ...

    def _outcome_state(self, conn: ConnectionCore, outcome: Any) -> TransactionalState: ...


class Link:
    """What senders and receivers share: name, address, state, closing."""

    kind = "link"

    def __init__(
        self,
        conn: ConnectionCore,
        session: LinkSession,
        link: EngineLink,
        *,
        address: str | None,
        incoming: bool = False,
    ) -> None:
        self._conn = conn
        self._session = session
        self._link = link
        link.context = self
        self._address = address
        self.incoming = incoming
        """True for a link the peer attached (accepted by us)."""
        self._ready = incoming
        self._refused = False
        self._closing = False
        self._error: errors.AMQPError | None = None
        self._sig = Signal()
        session._links.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} address={self._address!r} {self._link.state.name}>"

    def _what(self) -> str:
        if self.kind == "sender":
            return f"sender to {self._address!r}"
        return f"receiver from {self._address!r}"

    @property
    def name(self) -> str:
        return self._link.name

    @property
    def address(self) -> str | None:
        """The node this link talks to (for a dynamic receiver: the address the peer assigned)."""
        return self._address

    @property
    def session(self) -> LinkSession:
        return self._session

    @property
    def remote_source(self) -> Any:
        return self._link.remote_source

    @property
    def remote_target(self) -> Any:
        return self._link.remote_target

    @property
    def is_open(self) -> bool:
        return self._error is None and self._link.state is LinkState.ATTACHED

    @property
    def error(self) -> errors.AMQPError | None:
        """Why the link stopped (``LinkDetached`` after a clean close), or None while open."""
        return self._error

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        self._conn._check_open()

    @property
    def _dynamic(self) -> bool:
        """We asked the peer for a dynamic node: its address dies with the connection."""
        link = self._link
        terminus = link.target if isinstance(link, EngineSender) else link.source
        return bool(getattr(terminus, "dynamic", False))

    # -- reconnecting -------------------------------------------------------------------
    def _link_options(self) -> dict[str, Any]:
        """What the link was created with, for its re-attach under the same name."""
        old = self._link
        return {
            "source": old.source,
            "target": old.target,
            "snd_settle_mode": old.snd_settle_mode,
            "rcv_settle_mode": old.rcv_settle_mode,
            "max_message_size": old.max_message_size,
            "properties": old.properties,
            "offered_capabilities": old.offered_capabilities,
            "desired_capabilities": old.desired_capabilities,
        }

    def _adopt(self, link: EngineLink) -> None:
        self._link = link
        link.context = self
        self._ready = False
        self._refused = False

    def _reattach(self, session: EngineSession) -> int:
        """Re-create the link on a new session and attach it; return the unsettled sends offered."""
        raise NotImplementedError

    # -- engine events (from the connection) ------------------------------------------
    def _on_attached(self) -> None:
        link = self._link
        terminus = link.remote_target if isinstance(link, EngineSender) else link.remote_source
        if terminus is None:
            self._refused = True  # §2.6.3: a detach with the reason follows
        else:
            self._ready = True
        self._sig.fire()

    def _on_detached(self, error: Error | None, *, closed: bool, failed: bool = False) -> None:
        if self._closing:
            exc: errors.AMQPError = errors.LinkDetached(f"{self._what()} is closed")
        elif self._refused or not self._ready:
            exc = errors.LinkError.from_error(
                f"the peer refused the {self._what()}", error, default="no reason given"
            )
        elif failed:
            exc = errors.LinkError.from_error(f"{self._what()} failed", error)
        elif error is not None:
            exc = errors.LinkError.from_error(f"{self._what()} detached by the peer", error)
        else:
            how = "closed" if closed else "detached"
            exc = errors.LinkDetached(f"{self._what()} {how} by the peer")
        self._fail(exc)

    def _fail(self, error: errors.AMQPError) -> None:
        if self._error is None:
            self._error = error
        self._session._links.discard(self)
        self._sig.fire()
        self._conn._changed.fire()

    # -- verbs --------------------------------------------------------------------------
    async def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the link (detach with closed=true) and wait for the peer's answer."""
        await self._detach(error, closed=True, timeout=timeout)

    async def detach(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Detach without closing (the peer keeps the link's state, e.g. a durable subscription)."""
        await self._detach(error, closed=False, timeout=timeout)

    async def _detach(self, error: Error | None, *, closed: bool, timeout: float | None) -> None:
        conn = self._conn
        if self._error is not None or conn._error is not None or conn._outage is not None:
            self._fail(errors.LinkDetached(f"{self._what()} is closed"))
            return
        self._closing = True
        self._before_close()
        link = self._link
        try:
            link.detach(error, closed=closed)
        except IllegalStateError:
            pass
        conn._wake()
        try:
            with deadline(conn._timeout_for(timeout), f"closing the {self._what()}"):
                while (
                    link.state is not LinkState.DETACHED
                    and self._error is None
                    and conn._error is None
                ):
                    await self._sig.wait()
        finally:
            self._fail(errors.LinkDetached(f"{self._what()} is closed"))

    def _before_close(self) -> None:
        """Hook: settle or release what the link holds before its detach goes out."""

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.close(timeout=self._conn._close_timeout())
            except errors.AMQPError:
                pass
