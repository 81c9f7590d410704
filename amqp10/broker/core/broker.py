"""The broker object: its virtual hosts, shared by every connection and every protocol.

Protocol-neutral: front ends (:mod:`amqp10.broker.amqp1`, later 0-9-1) pick a
:class:`~amqp10.broker.core.vhost.VirtualHost` for a connection
(:meth:`Broker.vhost`), then declare, look up, bind and publish through it,
and consume and settle through the nodes (``add_consumer`` /
``remove_consumer``, ``ack`` / ``release`` / ``reject``). Every operation on a
named resource on a user's behalf passes :meth:`Broker.authorize` first: the one
place a permission check goes.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar, runtime_checkable

import anyio

from . import store as _store
from .accounting import Usage
from .exchanges import Topic, is_pattern
from .expiry import Expirations
from .leases import Leases
from .message import QueuedMessage, format_named
from .nodes import NULL_JOURNAL, Journal, Node
from .others import Others, Question
from .paging import PageStore, pager_factory
from .prepared import HeldWork
from .queues import Queue
from .recovery import LinkRecovery
from .replies import DirectReplies
from .scheduled import Scheduler
from .streams import Stream
from .transactions import Coordinator
from .vhost import NotFound, PreconditionFailed, VirtualHost

if TYPE_CHECKING:  # the configuration is the layer above: the core only reads it
    from ..config import BrokerConfig
    from ..oauth import TokenGrant

__all__ = [
    "CONSUMER_CLAIMS",
    "DEFAULT_VHOST",
    "ConsumerClaim",
    "Action",
    "Authorizer",
    "Broker",
    "DefinitionsPort",
    "FrontEndConnection",
    "MetadataPort",
    "ResourceKind",
]

log = logging.getLogger("amqp10.broker")

DEFAULT_VHOST = "/"

Action = Literal["configure", "write", "read"]
"""RabbitMQ's three permissions: declare/delete, publish, consume/bind from."""

ResourceKind = Literal["queue", "exchange", "topic"]
"""What a permission names: a queue (or stream), an exchange, or a topic."""


class Authorizer(Protocol):
    """Who may do what (:class:`amqp10.broker.permissions.PermissionChecker`).

    Each method returns None when allowed, else the refusal: its ``str()`` is the
    one-line reason a front end sends to the peer.
    """

    def denial(
        self, user: str | None, vhost: str, action: Action, kind: ResourceKind, name: str
    ) -> Exception | None: ...

    def vhost_denial(self, user: str | None, vhost: str) -> Exception | None: ...

    def has_tag(self, user: str | None, tag: str) -> bool: ...


_T = TypeVar("_T")


class DefinitionsPort(Protocol):
    """Definitions export and import on the running broker
    (:class:`amqp10.broker.topology.LiveDefinitions`), for management operations."""

    def export_json(self) -> str:
        """The whole broker's definitions, as RabbitMQ's JSON."""
        ...

    def import_document(self, document: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Import a definitions document; the outcome (counts, warnings, skipped entries).
        Raises ValueError (one line) for a document that cannot be read at all."""
        ...

    def put_user(self, name: str, password: str | None, tags: object) -> bool:
        """Add user ``name`` or change its password and tags (RabbitMQ's list or comma
        string); True if new. ``password`` None: one who cannot log in with a password.
        Raises ValueError (one line): no users file, unknown tags."""
        ...

    def delete_user(self, name: str) -> None:
        """Raises LookupError if there is no such user, ValueError without a users file."""
        ...

    def put_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> bool:
        """Set ``user``'s three patterns in ``vhost``; True if new. Raises LookupError (no
        such user), ValueError (a pattern that does not compile, no users file)."""
        ...

    def delete_permission(self, user: str, vhost: str) -> None:
        """Raises LookupError if ``user`` has no permissions there, ValueError without a users file."""
        ...


class MetadataPort(Protocol):
    """With several workers: where each change of metadata (a declaration, a binding, a
    policy, a deletion) goes, to be put in the one order every worker applies
    (:class:`amqp10.broker.workers.metadata.SharedMetadata`). None with one worker."""

    def changed(self, vhost: str, change: tuple[Any, ...]) -> None:
        """``change`` (an operation and its arguments) was just made here, in ``vhost``."""
        ...

    def hold(self, answer: Callable[[], None]) -> bool:
        """Keep ``answer`` until every change made here so far is in the order and applied
        here, and say True; False when none waits (``answer`` is not kept)."""
        ...


@runtime_checkable
class FrontEndConnection(Protocol):
    """What the broker asks of a front end's connection handler (in ``Broker.connections``)."""

    def resource_counts(self) -> tuple[int, int]:
        """How many sessions (0-9-1: channels) and links (0-9-1: consumers) it holds."""

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm was raised (publishers must stop: 1.0 takes their
        credit back) or cleared (``raised`` False: they go on; 0-9-1: connection.unblocked)."""


_S = TypeVar("_S")

ConsumerClaim = Callable[[Any, Any, Queue], tuple[dict[Any, Any], Callable[[QueuedMessage], bool]] | None]
"""What a front end claims for a consumer of a queue this worker owns, attached by another
worker (its ``link``, its ``source``, the queue): None (nothing), or the filters to answer
with and the messages it sees (a Service Bus session receiver: the session it locked);
raises ValueError to refuse it, or the core's :class:`~.vhost.ModelError` its consumer's
front end answers as (``NotFound``, ``ResourceLocked``; broker/workers/owner.py applies it)."""
CONSUMER_CLAIMS: Final = "core.consumer-claims"
"""The :meth:`Broker.shared` key of the :data:`ConsumerClaim` s front ends registered, by name
(each once, as the broker is prepared: ``FrontEnd.prepare``)."""


class Broker:
    """The virtual hosts and what they share: config, store journal, clock, link recovery."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        journal: Journal | None = None,
        now: Callable[[], float] = time.time,
        permissions: Authorizer | None = None,
        pages: PageStore | None = None,
    ) -> None:
        self.config = config
        self.make_pager = pager_factory(pages, config.limits.queue_memory_budget_bytes)
        """Each queue's pager (core/paging.py): bodies beyond its budget live in ``pages`` only."""
        self.alarm: str | None = None
        """Why publishers are blocked (a memory or disk alarm, set by the service); None: they are not."""
        self.whole_queued: Callable[[int], int] | None = None
        """With several workers (workers/counters.py): given the bytes this worker's queues
        hold in memory, shares them with the others and answers the whole broker's (every
        worker's, and this worker's publishes on their way to another); None: this broker is
        the whole."""
        self._whole_over = False
        """(With :attr:`whole_queued`) the whole broker's queued bytes were last seen over the limit."""
        self.permissions = permissions
        """None: every user may do everything (a broker without a users file)."""
        self.definitions: DefinitionsPort | None = None
        """Definitions export and import, when the service provides them."""
        self.journal: Journal = journal if journal is not None else NULL_JOURNAL
        self.now = now
        self.stats = Usage()
        """Running totals of the bytes held (O(1) to read: memory limit, metrics, alarms)."""
        self.connections: set[object] = set()
        """The front ends' connection handlers (for listings and shutdown)."""
        self.scheduler = Scheduler(now)
        self.leases = Leases(now)
        self.expirations = Expirations(now)
        """Expiry on time: messages past their TTL at the heads of queues, unused queues."""
        """Locks that run out unless renewed (Service Bus's peek-lock and session locks)."""
        """Messages held back until their due time (scheduled delivery), for every queue."""
        self.recovery = LinkRecovery(config.link_recovery_seconds, config.limits.max_suspended_links, now)
        self.replies = DirectReplies()
        """Direct reply-to addresses and their consumers, for every front end (core/replies.py)."""
        self.metadata: MetadataPort | None = None
        """With several workers: the sequencer's side in this worker (every change of metadata
        is told to it, and answers wait for its order: :meth:`after_commit`)."""
        self.placement: Callable[[str, str], Node | None] | None = None
        """With several workers: (vhost, name) -> the stand-in for a node another worker owns,
        or None when this worker owns it (broker/workers/ownership.py). None with one worker:
        every lookup is local, at no cost. Its answers are kept by each virtual host until
        :meth:`placement_changed` is called (or another placement is set)."""
        self.coordinator: Coordinator | None = None
        """With several workers: commits a transaction that reaches other workers' nodes as
        one (:class:`~.transactions.Coordinator`). None with one worker."""
        self.questions: dict[str, Question] = {}
        """What the parts above the core answer the broker's other processes, by name
        (:mod:`.others`: 0-10's ``dtx`` branches)."""
        self.others: Others | None = None
        """With several workers: asks the other workers a question of their
        :attr:`questions` (:class:`~.others.Others`). None with one worker."""
        self.dynamic_prefix = "amqp10.dynamic."
        """What a dynamic node's name starts with; with several workers it names this one
        (``amqp10.dynamic.w<K>.``), so every worker knows the node's owner from its name."""
        self.copies: Callable[[str, str], list[Node]] | None = None
        """With several workers: (vhost, name) -> the stand-ins for node ``name`` on every other
        worker (a 1.0 topic is on every worker: :attr:`Topic.copies
        <amqp10.broker.core.exchanges.Topic.copies>`). None with one worker."""
        self._consumer_ids = itertools.count(1)
        self._shared: dict[str, Any] = {}
        self._prepared: dict[str, dict[bytes, HeldWork]] = {}
        """Prepared transactions recovered from the store, by owner, until their owner takes them."""
        self.vhosts: dict[str, VirtualHost] = {}
        self.default = self.add_vhost(DEFAULT_VHOST)
        for name in config.queues:
            self.default.create_node(name, "queue")
        for name in config.topics:
            self.default.create_node(name, "topic")
        for vc in config.vhosts:
            vhost = self.add_vhost(vc.name)
            for xc in vc.exchanges:
                vhost.declare_exchange(
                    xc.name,
                    xc.type,
                    durable=xc.durable,
                    auto_delete=xc.auto_delete,
                    internal=xc.internal,
                    alternate=xc.alternate_exchange,
                    arguments=xc.arguments,
                )
            for qc in vc.queues:
                if isinstance(qc, str):
                    vhost.declare_queue(qc)
                else:
                    vhost.declare_queue(qc.name, durable=qc.durable, arguments=qc.arguments)
            for bc in vc.bindings:
                vhost.bind(bc.source, bc.destination, bc.routing_key, bc.arguments, destination_kind=bc.destination_type)

    # -- virtual hosts -----------------------------------------------------------------------
    def after_commit(self, answer: Callable[[], None]) -> None:
        """Run ``answer`` once every store write submitted so far is committed. How a reply
        that reports a change of durable state (a declaration, a binding, a rule, a deletion)
        waits for that change: a barrier in the group committer's queue, after the writes
        the change made and in order with every other answer waiting there. Never confirm
        before the commit; a crash before it loses only a change nobody was told about.
        With nothing outstanding (a read, a change of nothing durable, no store) there is
        nothing to wait for, and no earlier answer waiting: ``answer`` runs at once. With
        several workers it waits first for the metadata changes made here to be in the one
        order and applied (:class:`MetadataPort`)."""
        metadata = self.metadata
        if metadata is not None and metadata.hold(lambda: self.after_store(answer)):
            return
        self.after_store(answer)

    def after_store(self, answer: Callable[[], None]) -> None:
        """:meth:`after_commit` without waiting for the metadata's order: once this worker's
        store has what was submitted so far (an answer about a node this worker owns,
        which the order does not decide: workers/making.py)."""
        journal = self.journal
        if journal.idle:
            answer()
        else:
            journal.submit((_store.BARRIER,), answer)

    async def committed(self) -> None:
        """Wait until every store write submitted so far is committed (:meth:`after_commit`)."""
        done = anyio.Event()
        self.after_commit(done.set)
        await done.wait()

    def next_consumer_id(self) -> int:
        """A consumer id no other consumer of this broker has, whatever its front end."""
        return next(self._consumer_ids)

    def shared(self, key: str, make: Callable[[], _S]) -> _S:
        """What a part above the core shares between its connections to this broker (1.0's
        wildcard subscriptions, Service Bus's locks, management's state), under ``key``:
        made by ``make`` on first use. Per broker, never per process: two brokers in one
        process share nothing."""
        state = self._shared.get(key)
        if state is None:
            state = self._shared[key] = make()
        return state

    def placement_changed(self) -> None:
        """:attr:`placement`'s answers may have changed (an override placed a node on a worker,
        or no longer): every virtual host asks it again."""
        for vhost in self.vhosts.values():
            vhost.placement_changed()

    def add_vhost(self, name: str) -> VirtualHost:
        """The virtual host ``name`` (made if new)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(self, name)
            vhost.share("vhost")
        return vhost

    def delete_vhost(self, name: str) -> None:
        """Delete the virtual host ``name`` with everything in it (the caller closes its
        connections first); the default host stays (``PreconditionFailed``)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise NotFound(f"no virtual host {name!r}")
        if vhost is self.default:
            raise PreconditionFailed(f"the default virtual host {name!r} cannot be deleted")
        vhost.delete_contents()
        del self.vhosts[name]
        vhost.share("drop-vhost")
        self.journal.submit((_store.DROP_VHOST, name))
        log.info("deleted virtual host %r", name)

    def vhost(self, name: str | None) -> VirtualHost | None:
        """The virtual host ``name`` (None: the default one); None if there is no such host."""
        if not name:
            return self.default
        return self.vhosts.get(name)

    def vhost_for_hostname(self, hostname: str | None) -> VirtualHost | None:
        """The virtual host a connection's host name asks for: ``vhost:NAME`` (as RabbitMQ),
        a host name configured for a virtual host, else the default; None: ``vhost:`` names
        a host that does not exist."""
        if hostname and hostname.startswith("vhost:"):
            return self.vhosts.get(hostname[len("vhost:") :])
        if hostname:
            for vc in self.config.vhosts:
                if hostname in vc.hostnames:
                    return self.vhosts.get(vc.name)
        return self.default

    # -- access ----------------------------------------------------------------------------
    def authorize(
        self,
        vhost: VirtualHost,
        user: str | None,
        resource: str,
        action: Action,
        kind: ResourceKind = "queue",
        *,
        grant: TokenGrant | None = None,
    ) -> bool:
        """Whether ``user`` may do ``action`` on ``resource`` in ``vhost``.

        Every front end asks before declaring, deleting, binding (configure),
        publishing (write) or consuming (read) on a user's behalf. A connection that
        logged in with an OAuth 2 token passes its ``grant``: its scopes decide, not
        the users file.
        """
        if grant is None and self.permissions is None:
            return True  # (denial's first answer, without its call per publish)
        return self.denial(vhost, user, resource, kind, action, grant=grant) is None

    def denial(
        self,
        vhost: VirtualHost,
        user: str | None,
        resource: str,
        kind: ResourceKind,
        action: Action,
        *,
        grant: TokenGrant | None = None,
    ) -> str | None:
        """None if ``user`` may do ``action`` on ``resource`` in ``vhost``; else why not (one line, logged)."""
        if grant is not None:
            return grant.denial(vhost.name, action, kind, resource)
        if self.permissions is None:
            return None
        refused = self.permissions.denial(user, vhost.name, action, kind, resource)
        return None if refused is None else str(refused)

    def vhost_denial(self, vhost: VirtualHost, user: str | None, *, grant: TokenGrant | None = None) -> str | None:
        """None if ``user`` may use ``vhost`` at all; else why not (one line, logged)."""
        if grant is not None:
            return grant.vhost_denial(vhost.name)
        if self.permissions is None:
            return None
        refused = self.permissions.vhost_denial(user, vhost.name)
        return None if refused is None else str(refused)

    def has_tag(self, user: str | None, tag: str, *, grant: TokenGrant | None = None) -> bool:
        """Whether ``user`` has ``tag`` (``administrator`` for definitions import and export)."""
        if grant is not None:
            return tag in grant.tags
        return self.permissions is None or self.permissions.has_tag(user, tag)

    # -- the default virtual host's nodes (what 1.0 clients without a vhost see) ------------------
    @property
    def nodes(self) -> dict[str, Node]:
        return self.default.nodes

    def lookup(self, address: str | None, *, create: bool, kind: str | None = None) -> Node | None:
        return self.default.lookup(address, create=create, kind=kind)

    # -- recovery and limits ---------------------------------------------------------------------
    def recover(self, store: _store.SqlStore) -> int:
        """Recreate durable nodes, exchanges, bindings, messages and prepared transactions
        (:meth:`recovered_transactions`) from the store; return the message count."""
        loaded = store.load(messages=False)  # the messages are read below, a batch at a time
        for vrec in loaded.vhosts:
            self.add_vhost(vrec.name).set_metadata(json.loads(vrec.metadata or "{}"), persist=False)
        for prec in loaded.policies:  # before the queues they apply to
            self.add_vhost(prec.vhost).restore_policy(prec)
        for rec in loaded.nodes:
            vhost = self.add_vhost(rec.vhost)
            if rec.kind == "subscription" and is_pattern(rec.name.partition("::")[0]):
                vhost.restore_pattern_subscription(rec.name)
            elif rec.kind == "subscription":
                topic_name, _, key = rec.name.partition("::")
                t = vhost.nodes.get(topic_name) or vhost.create_node(topic_name, "topic", persist=False)
                if isinstance(t, Topic):
                    sub = vhost._make_queue(rec.name, t.policy, durable=True)
                    sub.settings = json.loads(rec.properties or "{}").get("settings") or {}
                    t.attach_subscription(key, sub)
            else:
                vhost.restore_node(rec)
        for xrec in loaded.exchanges:
            self.add_vhost(xrec.vhost).restore_exchange(xrec)
        for brec in loaded.bindings:
            self.add_vhost(brec.vhost).restore_binding(brec)
        queues: dict[str, Queue | Stream] = {}
        for vhost in self.vhosts.values():
            for q in vhost.queues():
                queues[_store.message_key(vhost.name, q.name)] = q
        for grec in loaded.group_states:
            gq = queues.get(grec.node)
            if isinstance(gq, Queue):
                gq.group_states[grec.group] = grec.state
        held = self._restore_prepared(loaded.prepared)  # the messages they took come back acquired, theirs
        classes: dict[str, type[QueuedMessage]] = {}
        n = 0
        for m in store.stored_messages():
            target = queues.get(m.node)
            if target is None:
                continue
            cls = classes.get(m.format)
            if cls is None:
                cls = classes[m.format] = format_named(m.format)
            msg = cls(
                m.data,
                priority=m.priority,
                durable=True,
                expiry=m.expiry,
                message_id=m.message_id,
                delivery_count=m.delivery_count,
                arrival=m.arrival,
                seq=m.seq,
            )
            if m.number is not None:
                msg._number = m.number
            taker = held.get((m.node, m.seq)) if held else None
            if taker is not None and isinstance(target, Queue):
                target.restore(msg, acquired=True)
                taker.take(target, msg)
            elif m.deferred and isinstance(target, Queue):
                target.restore(msg, deferred=True)
            elif m.dead_reason is not None and isinstance(target, Queue):
                target.restore(msg, dead_reason=m.dead_reason)
            else:
                target.restore(msg)
            n += 1
        return n

    def _restore_prepared(self, records: list[_store.PreparedRecord]) -> dict[tuple[str, int], HeldWork]:
        """The prepared transactions of the store, kept for their owners (their publishes
        rebuilt; :meth:`recover` gives them their taken messages): which took which message,
        by (message key, seq)."""
        held: dict[tuple[str, int], HeldWork] = {}
        for rec in records:
            work = HeldWork(rec.owner, rec.txn, self.journal)
            work.prepared = True
            self._prepared.setdefault(rec.owner, {})[rec.txn] = work
            for key_seq in rec.taken:
                held[key_seq] = work
            for p in rec.publishes:
                vhost = self.vhosts.get(p.vhost)
                if vhost is None:  # (deleted since: its publishes would be unroutable)
                    continue
                work.publish(vhost, p.exchange, p.routing_key, format_named(p.format)(
                    p.data, priority=p.priority, durable=p.durable, expiry=p.expiry,
                    message_id=p.message_id, arrival=p.arrival))  # fmt: skip
        return held

    def recovered_transactions(self, owner: str) -> list[HeldWork]:
        """The prepared transactions of front end ``owner`` that :meth:`recover` found (once:
        the front end keeps them from then on, to commit or roll back)."""
        return list(self._prepared.pop(owner, {}).values())

    def tick(self) -> None:
        """Time-driven work: enqueue scheduled messages now due, run out leases, expire
        messages and unused queues (the service calls this once a second, and each of these
        on time besides), send again the dead letters queues keep whose retry is due."""
        self.scheduler.release_due()
        self.leases.expire_due()
        self.expirations.expire_due()
        for vhost in self.vhosts.values():
            if vhost.holding:
                vhost.retry_dead_letters(due_only=True)
        self._recheck_whole()  # (what consumers took since leaves the other workers' sums)

    def total_bytes(self) -> int:
        """Bytes of the messages queued in every virtual host (a running total)."""
        return self.stats.memory_bytes

    def memory_ok(self) -> bool:
        """Whether publishers may go on: no resource alarm, and the bodies of queued
        messages in memory (not paged out) under ``limits.memory_limit_bytes`` (the whole
        broker's, with several workers: :attr:`whole_queued`)."""
        if self.alarm is not None:
            return False
        queued = self.stats.resident_bytes
        whole = self.whole_queued
        if whole is None:
            return queued < self.config.limits.memory_limit_bytes
        if whole(queued) < self.config.limits.memory_limit_bytes:
            return True
        self._whole_over = True
        return False

    def share_queued(self) -> None:
        """Tell the other workers what this worker's queues hold in memory now (as another
        worker's publishes land here, and once a second: :meth:`tick`): their memory limit
        counts it."""
        whole = self.whole_queued
        if whole is not None:
            whole(self.stats.resident_bytes)

    def _recheck_whole(self) -> None:
        """Once a second, with several workers: share what this worker's queues hold, and
        once the whole broker's queued bytes are back under the limit, tell the publishers
        held back here (their queues may be another worker's, whose draining nothing here
        sees), as a cleared alarm does."""
        whole = self.whole_queued
        if whole is None:
            return
        if whole(self.stats.resident_bytes) >= self.config.limits.memory_limit_bytes:
            self._whole_over = True
        elif self._whole_over:
            self._whole_over = False
            if self.alarm is None:
                self._tell_publishers(False)

    def set_alarm(self, reason: str | None) -> None:
        """Raise a resource alarm (publishers blocked, with ``reason``), or clear it (None)."""
        was, self.alarm = self.alarm, reason
        if (was is None) == (reason is None):  # no change (or only in the reason's figures)
            return
        if reason is not None:
            log.warning("resource alarm: %s; publishers are blocked", reason)
        else:
            log.warning("resource alarm cleared; publishers may go on")
        self._tell_publishers(reason is not None)

    def _tell_publishers(self, raised: bool) -> None:
        for c in list(self.connections):
            if isinstance(c, FrontEndConnection):
                c.resource_alarm(raised)

    def counts(self) -> dict[str, int]:
        """How many connections, sessions, links and nodes the broker holds (management,
        metrics, leak checks), with the running byte totals. Nodes are queues, streams and
        1.0 topics, subscription queues included; exchanges are not nodes."""
        sessions = links = 0
        for c in self.connections:
            if isinstance(c, FrontEndConnection):
                s, n = c.resource_counts()
                sessions += s
                links += n
        nodes = 0
        for vhost in self.vhosts.values():
            nodes += len(vhost.nodes)
            for node in vhost.nodes.values():
                if isinstance(node, Topic):
                    nodes += len(node.subscriptions)
        return {
            "connections": len(self.connections),
            "sessions": sessions,
            "links": links,
            "nodes": nodes,
            **self.stats.as_dict(),
        }
