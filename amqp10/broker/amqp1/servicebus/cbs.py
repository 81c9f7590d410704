"""``$cbs``: claims-based security, as Azure Service Bus and its clients use it.

A connection without a user (SASL ANONYMOUS or ``MSSBCBS``, or no SASL) on a broker
with ``[servicebus] enabled`` gets a :class:`Gate`: every link it attaches, except those
to ``$cbs``, needs a token that covers the link's entity with the right the link
needs (a receiving client ``Listen``, a sending one ``Send``; an entity's
``$management`` either; the namespace's ``$management`` ``Manage``). Tokens are put
with a ``put-token`` request to ``$cbs`` (application properties ``operation``,
``type``: the token type, ``name``: the audience; the body: the token), answered
with ``status-code`` (202 accepted, 400, 401) and ``status-description`` on the
receiver link from ``$cbs`` (the request carries no ``reply-to``). A link is
refused with ``amqp:unauthorized-access`` until a token covers it, and detached
with it once the tokens that covered it expired without renewal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

from ....cbs import (
    ACCEPTED,
    CBS_ADDRESS,
    SAS_PREFIX,
    CbsError,
    PutToken,
    parse_put_token,
    put_token_reply,
)
from ....transport import Link, Sender
from ....types import ReceiverSettleMode, Source
from ...config import ServiceBusConfig
from ...core import Lease, Leases, Node, NodeElsewhere, Queue, QueuedMessage, VirtualHost
from ..management import ManagementNode
from ..termini import remote_terminus
from .entities import DEAD_LETTER_SUFFIX, entity_node
from .management import AzureRequestNode, EntityManagementNode
from .sessions import (
    LOCKED_UNTIL,
    SESSION_FILTER,
    SessionLocks,
    claim_session,
    session_asked,
    ticks,
)
from .tokens import Grant, check_jwt, check_sas, scope_covers

__all__ = ["CBS_ADDRESS", "CbsNode", "Gate", "entity_path"]

_MGMT_SUFFIX = "/$management"


def entity_path(address: str) -> str:
    """The entity an address names: a Service Bus link's address is the entity's URI
    (``amqps://namespace/queue``); a plain name names itself."""
    scheme, sep, rest = address.partition("://")
    if sep and scheme.lower() in ("amqp", "amqps", "sb"):
        address = rest.partition("/")[2]
    # Service Bus names are case-insensitive; the SDK says $DeadLetterQueue
    if address.lower().endswith(DEAD_LETTER_SUFFIX):
        address = address[: -len(DEAD_LETTER_SUFFIX)] + DEAD_LETTER_SUFFIX
    return address


class Gate:
    """One connection's tokens, and the links they let in."""

    def __init__(
        self,
        config: ServiceBusConfig,
        now: Callable[[], float],
        leases: Leases | None = None,
        session_lost: Callable[[Link], None] = lambda link: None,
        session_locks: SessionLocks | None = None,
    ) -> None:
        self.config = config
        self.session_locks: SessionLocks = WeakKeyDictionary() if session_locks is None else session_locks
        """Which link holds each session, shared by every connection's gate of one broker."""
        self.now = now
        self.leases = leases
        self.session_lost = session_lost
        """Called when a session receiver's session lock ran out (its link is then detached)."""
        self.sessions: dict[int, tuple[Lease, str, str]] = {}
        """The session locks of this connection's session receivers, by link: (its lease,
        the queue's name, the session)."""
        self.keys = {k.name: (k.key, frozenset(k.rights)) for k in config.shared_access_keys}
        self.grants: dict[str, Grant] = {}
        """The valid tokens put, by audience (a new token for an audience replaces the old)."""
        self.links: dict[int, tuple[Link, str, tuple[str, ...]]] = {}
        """The links let in, with the entity and the rights (any of them) they need."""
        self.nodes: dict[str, ManagementNode] = {}
        """This connection's request nodes: ``$cbs`` and entities' ``$management``."""

    def node_at(self, vhost: VirtualHost, address: str) -> Node | None:
        """What a Service Bus entity path (see :func:`entity_path`) names beyond plain node
        names: ``$cbs`` and ``ENTITY/$management`` (this connection's), a topic's
        subscription (``TOPIC/Subscriptions/S``); None: look it up as usual."""
        node = self.nodes.get(address)
        if node is None:
            if "/" in address and not address.endswith(_MGMT_SUFFIX):
                sub = entity_node(vhost, address)  # (another worker's: its stand-in)
                return sub if isinstance(sub, (Queue, NodeElsewhere)) and sub.name != address else None
            if address == CBS_ADDRESS:
                node = CbsNode(vhost, self)
            elif address.endswith(_MGMT_SUFFIX) and len(address) > len(_MGMT_SUFFIX):
                node = EntityManagementNode(
                    vhost, address[: -len(_MGMT_SUFFIX)], self.lock_duration, self.renew_session
                )
            else:
                return None
            self.nodes[address] = node
        return node

    def lock_duration(self, entity: str) -> float:
        """The lock duration a queue's deliveries report (``[servicebus] queues``; 60 s otherwise)."""
        for q in self.config.queues:
            if q.name == entity:
                return q.lock_duration
        return 60.0

    def claim_session(
        self, link: Sender, source: Source, queue: Queue
    ) -> tuple[dict[Any, Any], Callable[[QueuedMessage], bool]] | None:
        """A session receiver's session (see :mod:`.sessions`), locked for the queue's lock
        duration unless renewed; None: not a session receiver."""
        duration = self.lock_duration(queue.name)
        claimed = claim_session(self.session_locks, link, source, queue, self.now() + duration)
        if claimed is not None:
            self._hold_session(link, queue, str(claimed[0][SESSION_FILTER]), duration)
        return claimed

    @staticmethod
    def session_wanted(source: Source) -> dict[Any, Any] | None:
        """The session filter of a receiver's source (None: not a session receiver): what a
        receiver on another worker's queue sends its owner, which picks and locks it."""
        return session_asked(source)

    def session_held(self, link: Sender, queue: Node, filters: dict[Any, Any]) -> None:
        """The owner of ``queue`` (another worker) locked the session ``filters`` names to
        ``link``'s consumer: its lock's end is kept here, for the queue's lock duration
        unless renewed, and its attach answer says it."""
        duration = self.lock_duration(queue.name)
        link.properties = {**(link.properties or {}), LOCKED_UNTIL: ticks(self.now() + duration)}
        self._hold_session(link, queue, str(filters[SESSION_FILTER]), duration)

    def _hold_session(self, link: Link, queue: Node, sid: str, duration: float) -> None:
        if self.leases is not None:
            self._unlock_session(link)
            lease = self.leases.take(duration, lambda: self._session_expired(link))
            self.sessions[id(link)] = (lease, queue.name, sid)

    def renew_session(self, queue: Queue, sid: str) -> float | None:
        """Renew a session lock held on this connection: its new end (None: not held, or lost)."""
        for lease, name, held in self.sessions.values():
            if name == queue.name and held == sid and self.leases is not None and self.leases.renew(lease):
                return lease.expires
        return None

    def _unlock_session(self, link: Link) -> None:
        held = self.sessions.pop(id(link), None)
        if held is not None and self.leases is not None:
            self.leases.drop(held[0])

    def _session_expired(self, link: Link) -> None:
        self.sessions.pop(id(link), None)
        self.session_lost(link)

    def put(self, put: PutToken) -> Grant:
        """Check a put token and keep its grant; raises :class:`~amqp10.cbs.CbsError`."""
        now = self.now()
        # azure-servicebus puts its SAS tokens with type jwt (as the service accepts): the
        # token's own form says what it is
        if put.token.startswith(SAS_PREFIX):
            grant = check_sas(put.token, self.keys, now)
        else:
            grant = check_jwt(put.token, self.config.jwt_secret, put.audience, now)
        self.grants[put.audience] = grant
        return grant

    def _allowed(self, entity: str, rights: tuple[str, ...]) -> bool:
        now = self.now()
        return any(
            g.expires > now and scope_covers(g.scope, entity) and any(r in g.rights for r in rights)
            for g in self.grants.values()
        )

    def admit(self, link: Link) -> str | None:
        """Check the tokens for a link to the entity its address names: None (let in,
        and watched) or why it is refused."""
        address = getattr(remote_terminus(link), "address", None)
        if not isinstance(address, str):
            return None if isinstance(link, Sender) else "a link needs an address on a claims-based connection"
        if not isinstance(link, Sender):
            # we settle what we take at once (as Service Bus does): pyamqp's sender
            # waits for a settled disposition, which mode second would hold back
            link.rcv_settle_mode = ReceiverSettleMode.FIRST
        entity = entity_path(address)
        if entity == CBS_ADDRESS:
            return None
        if entity == "$management":
            rights: tuple[str, ...] = ("Manage",)
        elif entity.endswith(_MGMT_SUFFIX):
            rights = ("Listen", "Send", "Manage")
            entity = entity[: -len(_MGMT_SUFFIX)]
        else:
            rights = ("Listen", "Manage") if isinstance(link, Sender) else ("Send", "Manage")
        if not self._allowed(entity, rights):
            return f"no valid token with {' or '.join(rights)} for {entity!r}: put one on $cbs first"
        self.links[id(link)] = (link, entity, rights)
        return None

    def forget(self, link: Link) -> None:
        self.links.pop(id(link), None)
        self._unlock_session(link)

    def expired(self) -> list[Link]:
        """The links no valid token covers any more (they are forgotten)."""
        gone = [link for link, entity, rights in self.links.values() if not self._allowed(entity, rights)]
        for link in gone:
            self.forget(link)
        return gone


class CbsNode(AzureRequestNode):
    """``$cbs`` as one connection sees it: answers ``put-token`` into its :class:`Gate`."""

    kind = "cbs"

    def __init__(self, vhost: VirtualHost, gate: Gate) -> None:
        super().__init__(vhost)
        self.name = CBS_ADDRESS
        self.gate = gate

    def answer(self, props: Mapping[str, Any], body: Any) -> tuple[dict[str, Any], Any]:
        try:
            self.gate.put(parse_put_token(props, body))
            status, description = ACCEPTED, "Accepted"
        except CbsError as exc:
            status, description = exc.status, exc.description
        return put_token_reply(status, description), None
