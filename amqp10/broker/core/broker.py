"""The broker object: the address space and its nodes, shared by every connection.

Protocol-neutral: front ends (:mod:`amqp10.broker.amqp1`, later 0-9-1) call
:meth:`Broker.lookup` / :meth:`Broker.create_node` to declare or find a node,
then the node's own operations: ``publish``, ``add_consumer`` /
``remove_consumer`` (consume, cancel) and ``ack`` / ``release`` / ``reject``
(settle). Every operation on a named resource on a user's behalf passes
:meth:`Broker.authorize` first: the one place a permission check goes.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Literal

from ..config import BrokerConfig, QueuePolicy
from . import store as _store
from .message import QueuedMessage, format_named
from .nodes import NULL_JOURNAL, Journal, Node, Queue, Stream, Topic
from .recovery import LinkRecovery

__all__ = ["Action", "Broker", "LEGACY_FORMAT"]

log = logging.getLogger("amqp10.broker")

LEGACY_FORMAT = "amqp1"
"""The format of stored messages that carry none: every broker before 0-9-1 kept 1.0 messages."""

Action = Literal["configure", "write", "read"]
"""RabbitMQ's three permissions: declare/delete, publish, consume/bind from."""


class Broker:
    """The address space and its nodes (queues, topics, streams), shared by all connections."""

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
        self.nodes: dict[str, Node] = {}
        self.connections: set[object] = set()
        """The front ends' connection handlers (for listings and shutdown)."""
        self._dynamic = itertools.count(1)
        self.recovery = LinkRecovery(config.link_recovery_seconds, config.limits.max_suspended_links, now)
        for name in config.queues:
            self.create_node(name, "queue")
        for name in config.topics:
            self.create_node(name, "topic")

    # -- access ----------------------------------------------------------------------------
    def authorize(self, user: str | None, resource: str, action: Action) -> bool:
        """Whether ``user`` may do ``action`` on ``resource`` (every user may, until permissions exist)."""
        return True

    # -- nodes -----------------------------------------------------------------------------
    def policy_for(self, address: str) -> tuple[str, QueuePolicy]:
        rule = self.config.rule_for(address)
        if rule is None:
            return "queue", self.config.default_policy
        return rule.kind, rule.policy

    def create_node(self, address: str, kind: str | None = None, *, dynamic: bool = False, persist: bool = True) -> Node:
        rule_kind, policy = self.policy_for(address)
        kind = kind or rule_kind
        if kind == "topic":
            node: Node = Topic(address, policy, make_queue=lambda key, durable: self._subscription_queue(address, key, durable))
        elif kind == "stream":
            node = Stream(address, policy, journal=self.journal, now=self.now)
        else:
            node = self._make_queue(address, policy, durable=not dynamic, dynamic=dynamic)
        self.nodes[address] = node
        if persist and not dynamic:
            self.journal.submit((_store.NODE, address, kind, "{}"))
        log.info("created %s %r", kind, address)
        return node

    def _make_queue(self, name: str, policy: QueuePolicy, *, durable: bool, dynamic: bool = False) -> Queue:
        return Queue(
            name,
            policy,
            journal=self.journal,
            dead_letter=lambda msg, reason: self.dead_letter(policy, msg, reason),
            now=self.now,
            dynamic=dynamic,
            durable_node=durable,
        )

    def _subscription_queue(self, topic: str, key: str, durable: bool) -> Queue:
        name = f"{topic}::{key}"
        q = self._make_queue(name, self.policy_for(topic)[1], durable=durable)
        if durable:
            self.journal.submit((_store.NODE, name, "subscription", "{}"))
        return q

    def lookup(self, address: str | None, *, create: bool, kind: str | None = None) -> Node | None:
        """The node at ``address``, auto-created (as ``kind``, else per the rules) if allowed."""
        if not address:
            return None
        node = self.nodes.get(address)
        if node is None and create and self.config.auto_create:
            node = self.create_node(address, kind)
        return node

    def create_dynamic(self) -> Queue:
        """A fresh, uniquely named, non-durable queue (deleted with its link)."""
        address = f"amqp10.dynamic.{next(self._dynamic)}.{uuid.uuid4().hex[:12]}"
        node = self.create_node(address, "queue", dynamic=True)
        assert isinstance(node, Queue)
        return node

    def delete_node(self, address: str) -> None:
        node = self.nodes.pop(address, None)
        if isinstance(node, Queue):
            node.purge()
            if node.durable_node:
                self.journal.submit((_store.DROP_NODE, address))

    def drop_subscription(self, topic: Topic, queue: Queue) -> None:
        """Remove a subscription queue from its topic (and from the store, if durable)."""
        for key, q in list(topic.subscriptions.items()):
            if q is queue:
                topic.unsubscribe(key)
                if q.durable_node:
                    q.purge()
                    self.journal.submit((_store.DROP_NODE, q.name))

    def dead_letter(self, policy: QueuePolicy, msg: QueuedMessage, reason: str) -> None:
        """Route a dead message (rejected, expired, over its delivery limit) to the policy's address."""
        dla = policy.dead_letter_address
        target = self.lookup(dla, create=True) if dla else None
        if target is None:
            log.warning("dropping a %s message: dead-letter address %r has no node", reason, dla)
            return
        dead = msg.copy()
        dead.expiry = None  # an expired message must not expire again where it is kept
        target.publish(dead, lambda: None)

    def recover(self, store: _store.Store) -> int:
        """Recreate durable nodes and their messages from the store; return the message count."""
        records, messages = store.load()
        for rec in records:
            if rec.kind == "subscription":
                topic, _, key = rec.name.partition("::")
                t = self.nodes.get(topic) or self.create_node(topic, "topic", persist=False)
                if isinstance(t, Topic):
                    t.subscriptions[key] = self._make_queue(rec.name, t.policy, durable=True)
            elif rec.name not in self.nodes:
                self.create_node(rec.name, rec.kind, persist=False)
        queues: dict[str, Queue | Stream] = {}
        for node in self.nodes.values():
            if isinstance(node, (Queue, Stream)):
                queues[node.name] = node
            elif isinstance(node, Topic):
                queues.update({q.name: q for q in node.subscriptions.values()})
        n = 0
        make = format_named(LEGACY_FORMAT) if messages else QueuedMessage
        for m in messages:
            q = queues.get(m.node)
            if q is None:
                continue
            q.restore(
                make(
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
        total = 0
        for node in self.nodes.values():
            if isinstance(node, (Queue, Stream)):
                total += node.bytes
            elif isinstance(node, Topic):
                total += sum(q.bytes for q in node.subscriptions.values())
        return total

    def memory_ok(self) -> bool:
        return self.total_bytes() < self.config.limits.memory_limit_bytes
