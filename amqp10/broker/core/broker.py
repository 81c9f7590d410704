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

import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from ..config import BrokerConfig
from . import store as _store
from .exchanges import Topic
from .message import QueuedMessage, format_named
from .nodes import NULL_JOURNAL, Journal, Node, Queue, Stream
from .recovery import LinkRecovery
from .vhost import VirtualHost

__all__ = ["DEFAULT_VHOST", "Action", "Broker", "gc_paused"]

log = logging.getLogger("amqp10.broker")

DEFAULT_VHOST = "/"

Action = Literal["configure", "write", "read"]
"""RabbitMQ's three permissions: declare/delete, publish, consume/bind from."""


class Broker:
    """The virtual hosts and what they share: config, store journal, clock, link recovery."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        journal: Journal | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.journal: Journal = journal if journal is not None else NULL_JOURNAL
        self.now = now
        self.connections: set[object] = set()
        """The front ends' connection handlers (for listings and shutdown)."""
        self.recovery = LinkRecovery(config.link_recovery_seconds, config.limits.max_suspended_links, now)
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
            for qname in vc.queues:
                vhost.declare_queue(qname)
            for bc in vc.bindings:
                vhost.bind(bc.source, bc.destination, bc.routing_key, bc.arguments, destination_kind=bc.destination_type)

    # -- virtual hosts -----------------------------------------------------------------------
    def add_vhost(self, name: str) -> VirtualHost:
        """The virtual host ``name`` (made if new)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(self, name)
        return vhost

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
    def authorize(self, vhost: VirtualHost, user: str | None, resource: str, action: Action) -> bool:
        """Whether ``user`` may do ``action`` on ``resource`` in ``vhost``.

        Every front end asks before declaring, deleting, binding (configure),
        publishing (write) or consuming (read) on a user's behalf. There are no
        permissions yet: every user may do everything.
        """
        return True

    # -- the default virtual host's nodes (what 1.0 clients without a vhost see) ------------------
    @property
    def nodes(self) -> dict[str, Node]:
        return self.default.nodes

    def lookup(self, address: str | None, *, create: bool, kind: str | None = None) -> Node | None:
        return self.default.lookup(address, create=create, kind=kind)

    # -- recovery and limits ---------------------------------------------------------------------
    def recover(self, store: _store.Store) -> int:
        """Recreate durable nodes, exchanges, bindings and messages from the store; return the message count."""
        loaded = store.load()
        for rec in loaded.nodes:
            vhost = self.add_vhost(rec.vhost)
            if rec.kind == "subscription":
                topic_name, _, key = rec.name.partition("::")
                t = vhost.nodes.get(topic_name) or vhost.create_node(topic_name, "topic", persist=False)
                if isinstance(t, Topic):
                    t.attach_subscription(key, vhost._make_queue(rec.name, t.policy, durable=True))
            elif rec.name not in vhost.nodes:
                vhost.create_node(rec.name, rec.kind, persist=False)
        for xrec in loaded.exchanges:
            self.add_vhost(xrec.vhost).restore_exchange(xrec)
        for brec in loaded.bindings:
            self.add_vhost(brec.vhost).restore_binding(brec)
        queues: dict[tuple[str, str], Queue | Stream] = {}
        for vhost in self.vhosts.values():
            for q in vhost.queues():
                queues[(vhost.name, q.name)] = q
        classes: dict[str, type[QueuedMessage]] = {}
        n = 0
        for m in loaded.messages:
            target = queues.get((m.vhost, m.node))
            if target is None:
                continue
            cls = classes.get(m.format)
            if cls is None:
                cls = classes[m.format] = format_named(m.format)
            target.restore(
                cls(
                    m.data,
                    priority=m.priority,
                    durable=True,
                    expiry=m.expiry,
                    message_id=m.message_id,
                    delivery_count=m.delivery_count,
                    arrival=m.arrival,
                    seq=m.seq,
                )
            )
            n += 1
        return n

    def total_bytes(self) -> int:
        return sum(v.total_bytes() for v in self.vhosts.values())

    def memory_ok(self) -> bool:
        return self.total_bytes() < self.config.limits.memory_limit_bytes


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (as it was, after).

    For :meth:`Broker.recover` at start: it makes millions of objects, none of them
    garbage, and the collections their allocation triggers cost ~40% of a restart.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
