"""Sessions, and the connection's side of its links: opening them, accepting the peer's.

:class:`Endpoints` is the layer of :class:`~amqp10.client.Connection` that
begins sessions, opens senders and receivers (building their termini) and
accepts the links the peer attaches. :class:`Session` is what the application
holds of a session.
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from typing import Any

from .. import errors
from ..io.driver import Signal
from ..transport import IllegalStateError, SessionState
from ..transport import Link as EngineLink
from ..transport import Receiver as EngineReceiver
from ..transport import Session as EngineSession
from ..types import Described, Error, ErrorCondition, ExpiryPolicy, Source, Target, symbol
from ..types.transactions import Coordinator
from ._common import SettleMode, deadline
from ._common import settle_mode as settle_mode_of
from .core import ConnectionCore
from .link import Link
from .receiver import Receiver
from .sender import Sender

__all__ = ["Endpoints", "Session"]

MAX_PENDING_LINKS = 1000
"""Links the peer attached that the application has not taken yet; more are refused."""


SELECTOR_KEY = symbol("jms-selector")
"""The filter-set key a ``selector`` goes under (the name Qpid JMS uses)."""
SELECTOR_FILTER = symbol("apache.org:selector-filter:string")


class Session:
    """An AMQP session: a group of links sharing flow-control windows.

    Connections open a default session for links opened without one; open more
    with :meth:`Connection.session` (e.g. to isolate a slow consumer's window).
    """

    def __init__(self, conn: Endpoints, session: EngineSession, *, incoming: bool = False) -> None:
        self._conn = conn
        self._session = session
        session.context = self
        self._links: set[Link] = set()
        self._error: errors.AMQPError | None = None
        self._begun = incoming
        self._closing = False
        self.incoming = incoming
        """True for a session the peer began."""

    def __repr__(self) -> str:
        return f"<Session channel={self._session.channel} {self._session.state.name}>"

    @property
    def is_open(self) -> bool:
        return self._error is None and self._session.state is SessionState.MAPPED

    async def open_sender(self, address: str | None, **kwargs: Any) -> Sender:
        """Open a sender on this session (see :meth:`Connection.open_sender`)."""
        return await self._conn.open_sender(address, session=self, **kwargs)

    async def open_receiver(self, address: str | None, **kwargs: Any) -> Receiver:
        """Open a receiver on this session (see :meth:`Connection.open_receiver`)."""
        return await self._conn.open_receiver(address, session=self, **kwargs)

    async def close(self, *, timeout: float | None = None) -> None:
        """End the session (its links go with it) and wait for the peer's end."""
        conn = self._conn
        if conn._outage is not None and self._error is None:
            # the connection is being re-made: the old session is gone with it
            self._fail(errors.SessionError("the session is closed"))
        if self._error is None and conn._error is None and not self._closing:
            self._closing = True
            try:
                self._session.end()
            except IllegalStateError:
                pass
            conn._wake()
            try:
                with deadline(conn._timeout_for(timeout), "ending the session"):
                    while self._session.state is not SessionState.UNMAPPED and self._error is None:
                        await conn._changed.wait()
            finally:
                self._fail(errors.SessionError("the session is closed"))
        conn._sessions.discard(self)

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        self._conn._check_open()

    def _rebind(self, session: EngineSession) -> None:
        """Take over a new engine session after a reconnect (its begin is queued)."""
        self._session = session
        session.context = self
        self._begun = False

    def _fail(self, error: errors.AMQPError, *, link_error: errors.AMQPError | None = None) -> None:
        if self._error is None:
            self._error = error
        for link in list(self._links):
            link._fail(
                link_error
                or errors.LinkDetached(f"the {link._what()} ended with its session ({error})")
            )
        if self._conn._default_session is self:
            self._conn._default_session = None
        self._conn._changed.fire()


class _IncomingLinks:
    """``async for link in conn.incoming_links()``: ends when the connection closes."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Endpoints) -> None:
        self._conn = conn

    def __aiter__(self) -> _IncomingLinks:
        return self

    async def __anext__(self) -> Sender | Receiver:
        conn = self._conn
        while not conn._incoming:
            if conn._error is not None:
                raise StopAsyncIteration
            await conn._incoming_sig.wait()
        return conn._incoming.popleft()


class Endpoints(ConnectionCore):
    """The connection's sessions and links: begins and opens them, accepts the peer's.

    Links opened without a session go on a default one. Links the peer
    attaches are accepted and handed out by :meth:`incoming_links`.
    """

    def _init_layer(self) -> None:
        super()._init_layer()
        self._sessions: set[Session] = set()
        self._default_session: Session | None = None
        self._incoming: deque[Sender | Receiver] = deque()
        self._incoming_sig = Signal()
        self._dynamic: dict[str, Receiver] = {}  # our dynamic receivers by assigned address
        self._served: dict[str, Sender] = {}  # links the peer attached to receive from, by address

    async def session(self, *, timeout: float | None = None) -> Session:
        """Begin a new session and wait for the peer's begin."""
        await self._until_usable(self._timeout_for(timeout), "beginning a session")
        s = self._new_session()
        with deadline(self._timeout_for(timeout), "beginning a session"):
            while not s._begun:
                s._check_usable()
                await self._changed.wait()
        return s

    def _new_session(self) -> Session:
        self._check_open()
        try:
            es = self._engine.session()
            es.begin()
        except IllegalStateError as exc:
            raise errors.SessionError(f"cannot begin a session: {exc}") from None
        s = Session(self, es)
        self._sessions.add(s)
        self._wake()
        return s

    def _session_for(self, session: Session | None) -> Session:
        if session is not None:
            session._check_usable()
            return session
        s = self._default_session
        if s is None or s._error is not None:
            s = self._default_session = self._new_session()
        return s

    def _kept(self) -> dict[str, Any]:
        """Fields of our default termini. With a reconnect policy they ask the peer to keep
        the link's state as long as we may take to come back (Part 3 §3.5.6 ``timeout``),
        so that a peer that resumes links can resume ours (§2.6.13); without one the
        defaults stand (``session-end``, timeout 0: the state goes with the link)."""
        policy = self._policy
        if policy is None:
            return {}
        if policy.max_time is None or math.isinf(policy.max_time):
            return {"expiry_policy": ExpiryPolicy.NEVER}
        return {"timeout": math.ceil(policy.max_time)}

    async def open_sender(
        self,
        address: str | None,
        *,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        name: str | None = None,
        session: Session | None = None,
        target: Target | Coordinator | None = None,
        source: Source | None = None,
        properties: dict[Any, Any] | None = None,
        timeout: float | None = None,
    ) -> Sender:
        """Attach a sender to the node at ``address`` and wait for the peer's attach.

        ``address`` None attaches to the peer's anonymous relay (when it offers
        ``ANONYMOUS-RELAY``: see :attr:`anonymous_relay`): each message's ``to``
        then chooses its node, and one whose ``to`` names none comes back rejected.
        ``target``/``source`` replace the default termini (``Target(address=address)``;
        a :class:`~amqp10.types.Coordinator` target links to the transaction coordinator).
        ``properties``: the attach's link properties (RabbitMQ's ``{paired: true}``).
        Raises :class:`~amqp10.errors.LinkError` with the peer's reason if it refuses.
        """
        mode = settle_mode_of(settle_mode)
        what = f"attaching a sender to {address!r}"
        await self._until_usable(self._timeout_for(timeout), what)
        await self._authorize(address, self._timeout_for(timeout))
        s = self._session_for(session)
        link = s._session.sender(
            name or self._link_name("sender", address),
            source=source if source is not None else Source(),
            target=target if target is not None else Target(address=address, **self._kept()),
            snd_settle_mode=mode.snd_settle_mode,
            rcv_settle_mode=mode.rcv_settle_mode,
            properties=properties,
        )
        sender = Sender(self, s, link, address=address)
        await self._attach(sender, timeout)
        return sender

    async def open_receiver(
        self,
        address: str | None = None,
        *,
        credit: int = 100,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        dynamic: bool = False,
        auto_accept: bool = False,
        name: str | None = None,
        session: Session | None = None,
        source: Source | None = None,
        target: Target | None = None,
        timeout: float | None = None,
        selector: str | None = None,
        properties: dict[Any, Any] | None = None,
    ) -> Receiver:
        """Attach a receiver from the node at ``address`` and wait for the peer's attach.

        ``credit`` is the window kept open to the sender (0: grant it yourself
        with ``add_credit``). ``dynamic=True`` asks the peer to create a node
        (e.g. a temporary reply queue); its address is then ``receiver.address``.
        ``auto_accept`` accepts each delivery as the application takes it.
        ``selector`` is a JMS message selector (``"color = 'red' AND n > 2"``), sent as
        the source's ``apache.org:selector-filter:string`` filter; a peer that applies
        it echoes it in ``receiver.remote_source.filter``.
        """
        if credit < 0:
            raise ValueError("credit must not be negative")
        mode = settle_mode_of(settle_mode)
        if source is None:
            source = (
                Source(address=None, dynamic=True)
                if dynamic
                else Source(address=address, **self._kept())
            )
        if selector is not None:
            source.filter = {**(source.filter or {}), SELECTOR_KEY: Described(SELECTOR_FILTER, selector)}
        what = f"attaching a receiver from {address!r}"
        await self._until_usable(self._timeout_for(timeout), what)
        await self._authorize(address, self._timeout_for(timeout))
        s = self._session_for(session)
        link = s._session.receiver(
            name or self._link_name("receiver", address),
            source=source,
            target=target if target is not None else Target(),
            snd_settle_mode=mode.snd_settle_mode,
            rcv_settle_mode=mode.rcv_settle_mode,
            properties=properties,
        )
        receiver = Receiver(self, s, link, address=address, window=credit, auto_accept=auto_accept)
        await self._attach(receiver, timeout)
        if dynamic:
            remote = link.remote_source
            assigned = getattr(remote, "address", None)
            if not isinstance(assigned, str):
                await receiver.close()
                raise errors.LinkError("the peer assigned no address to the dynamic receiver")
            receiver._address = assigned
            self._dynamic[assigned] = receiver
        return receiver

    async def _attach(self, link: Sender | Receiver, timeout: float | None) -> None:
        el = link._link
        try:
            el.attach()
            if isinstance(link, Receiver) and link._window > 0:
                link._link.flow(link._window)
        except IllegalStateError as exc:
            link._fail(errors.LinkError(f"cannot attach the {link._what()}: {exc}"))
            raise errors.LinkError(f"cannot attach the {link._what()}: {exc}") from None
        self._wake()
        try:
            with deadline(self._timeout_for(timeout), f"attaching the {link._what()}"):
                while not link._ready:
                    if link._error is not None:
                        raise link._error
                    self._check_open()
                    await link._sig.wait()
        except BaseException:
            if link._error is None:
                link._closing = True
                try:
                    link._link.detach(closed=True)
                except IllegalStateError:
                    pass
                link._fail(errors.LinkDetached(f"{link._what()} was not attached"))
                self._wake()
            raise

    def incoming_links(self) -> _IncomingLinks:
        """``async for link in conn.incoming_links()``: links the peer attached.

        Each is already accepted with the terminus the peer asked for (a dynamic
        one gets a fresh address): a :class:`Receiver` where the peer sends, a
        :class:`Sender` where it receives. The iteration ends with the connection.
        """
        return _IncomingLinks(self)

    async def next_link(self, *, timeout: float | None = None) -> Sender | Receiver:
        """The next link the peer attached (see :meth:`incoming_links`)."""
        with deadline(self._timeout_for(timeout), "waiting for the peer to attach a link"):
            while not self._incoming:
                self._check_open()
                await self._incoming_sig.wait()
        return self._incoming.popleft()

    # -- links the peer attaches ------------------------------------------------------------
    def _accept_link(self, link: EngineLink) -> None:
        session = link.session.context
        if not isinstance(session, Session):
            session = Session(self, link.session, incoming=True)
            self._sessions.add(session)
        if len(self._incoming) >= MAX_PENDING_LINKS:
            link.detach(
                Error(
                    condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                    description="too many links waiting to be accepted",
                ),
                closed=True,
            )
            return
        if self._link_filter is not None:
            kind = "receiver" if isinstance(link, EngineReceiver) else "sender"
            terminus = link.remote_target if kind == "receiver" else link.remote_source
            refusal = self._link_filter(kind, _str_or_none(getattr(terminus, "address", None)))
            if refusal is not None:
                link.detach(refusal, closed=True)  # §2.6.3: attach with no terminus, then detach
                return
        wrapper: Sender | Receiver
        if isinstance(link, EngineReceiver):  # the peer sends to us
            target = link.remote_target
            address = getattr(target, "address", None)
            if target is not None and target.dynamic:
                address = _new_address()
                target = _with_address(target, address)
            link.attach(source=link.remote_source, target=target)
            owner = self._dynamic.get(address) if isinstance(address, str) else None
            if owner is not None and owner.is_open:
                owner._add_link(link)  # the peer answers on our dynamic address
                return
            wrapper = Receiver(
                self,
                session,
                link,
                address=_str_or_none(address),
                incoming=True,
                window=self._link_credit,
            )
            wrapper._replenish()
        else:  # the peer receives from us
            source = link.remote_source
            address = getattr(source, "address", None)
            if source is not None and source.dynamic:
                address = _new_address()
                source = _with_address(source, address)
            link.attach(source=source, target=link.remote_target)
            sender = Sender(self, session, link, address=_str_or_none(address), incoming=True)
            if isinstance(address, str):
                self._served[address] = sender
            wrapper = sender
        self._incoming.append(wrapper)
        self._incoming_sig.fire()


def _new_address() -> str:
    return f"amqp10.dynamic.{uuid.uuid4()}"


def _with_address(terminus: Any, address: str) -> Any:
    fields = {f.attr: getattr(terminus, f.attr) for f in type(terminus).FIELDS}
    fields["address"] = address
    return type(terminus)(**fields)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
