"""A virtual host: one isolated name space of queues, streams, exchanges and bindings.

Queues and streams (and 1.0 topics, which are fanout exchanges underneath) are
*nodes*, found by name: :meth:`VirtualHost.lookup`. Exchanges have their own
name space: :meth:`VirtualHost.exchange`. Every virtual host has the nameless
default exchange (routing key = queue name, a binding to every queue that
cannot be changed) and the predeclared ``amq.direct``, ``amq.fanout``,
``amq.topic``, ``amq.headers`` and ``amq.match``.

Front ends check :meth:`~amqp10.broker.core.broker.Broker.authorize` with
(vhost, user, resource, action) before acting on a user's behalf.
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._mypyc import Referable
from ...addresses import is_partition_address, partition_address
from . import store as _store
from .accounting import DETACHED
from .arguments import (
    QUEUE_TYPES,
    ArgumentError,
    check_declared,
    given_queue_type,
    known_arguments,
    policy_with_arguments,
    queue_kind,
)
from .exchanges import (
    Binding,
    DirectExchange,
    Exchange,
    Topic,
    args_key,
    make_exchange,
    routing_key_of,
)
from .message import QueuedMessage
from .nodes import Journal, Node, NodeElsewhere, PublishResult, Refused, nothing, unheard
from .partitioned import PartitionedStream
from .policies import RuntimePolicy, combined_arguments, pick_policy
from .qpid_queues import alternate_exchange, is_no_local, not_local
from .queue_policy import QueuePolicy
from .queues import Queue
from .streams import Stream
from .typed_values import typed, untyped

if TYPE_CHECKING:
    from .broker import Broker
    from .exchanges import Destination

__all__ = ["DEFAULT_EXCHANGE", "PREDECLARED", "AccessRefused", "ModelError", "NotFound", "PreconditionFailed", "ResourceLocked", "VirtualHost"]

log = logging.getLogger("amqp10.broker")

DEFAULT_EXCHANGE = ""

OWNERS_KEPT: Final = 65536
"""Names whose :attr:`Broker.placement` answer a virtual host keeps (then it starts again)."""
PREDECLARED: dict[str, str] = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.headers": "headers",
    "amq.match": "headers",
}


class ModelError(Exception):
    """A refused AMQ-model operation; front ends map the class to their own error code."""


class NotFound(ModelError):
    """No such exchange, queue or binding (1.0 amqp:not-found; 0-9-1 NOT_FOUND 404)."""


class AccessRefused(ModelError):
    """Not allowed on this resource (1.0 amqp:unauthorized-access; 0-9-1 ACCESS_REFUSED 403)."""


class ResourceLocked(ModelError):
    """An exclusive queue of another connection (1.0 amqp:resource-locked; 0-9-1 RESOURCE_LOCKED 405)."""


class PreconditionFailed(ModelError):
    """Exists with other properties (1.0 amqp:precondition-failed; 0-9-1 PRECONDITION_FAILED 406)."""


def _dropped(on_stored: Callable[[], None]) -> Refused:
    """What a late refusal does for a publisher that asked for none (see :meth:`VirtualHost.route`).
    For one that asked for nothing at all (``on_stored`` is :func:`nothing`: a 0-9-1 publish
    without confirms, every message that crosses to another worker) one function made once,
    not a closure a message."""
    if on_stored is nothing:
        return unheard
    return lambda result: on_stored()


def _stored_arguments(arguments: Mapping[str, Any]) -> str:
    """A queue's or stream's store properties: its arguments with their types
    (``typed_arguments``, what :meth:`VirtualHost.restore_node` reads), and as a broker
    before them wrote and reads them (``arguments``, JSON with any other value as its
    ``repr``), so that one recovers them from a store this one wrote (not where that way
    fails: keys JSON cannot sort or hold, which the typed form writes as their text). The
    typed form keeps a table's keys in their order: a re-declaration compares a table as
    RabbitMQ does, in order, after a restart as before it."""
    props: dict[str, Any] = {"typed_arguments": typed(dict(arguments))}
    try:
        props["arguments"] = json.loads(json.dumps(dict(arguments), sort_keys=True, default=repr))
    except (TypeError, ValueError):
        pass
    return json.dumps(props)


class VirtualHost(Referable):
    """One virtual host's nodes, exchanges and bindings (``Referable``: the 1.0 front end's
    wildcard subscriptions are kept by weak reference to their virtual host)."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.config = broker.config
        self.nodes: dict[str, Node] = {}
        self.exchanges: dict[str, Exchange] = {}
        self._dynamic = itertools.count(1)
        self._exclusive: dict[int, list[str]] = {}  # id(owner) -> its exclusive queues
        self._placed: set[str] = set()
        """The queues made exclusive here and so placed on this worker (workers > 1:
        workers/placing.py): unplaced when they go, also once kept past their connection
        (``qpid.auto_delete_timeout``: no longer exclusive then)."""
        self._owners: dict[str, NodeElsewhere | None] = {}
        """:attr:`Broker.placement`'s answers (the stand-in, or None: this worker's) by name,
        for :meth:`elsewhere`, which every publish to the default exchange asks: the
        placement (interpreted, workers/ownership.py) is asked once a name, until it changes
        (:meth:`placement_changed`) or :data:`OWNERS_KEPT` names were asked."""
        self._owners_of: object = None
        """The placement :attr:`_owners` are the answers of (another one: they are forgotten)."""
        self.node_listeners: list[Callable[[Node], None]] = []
        """Called with each node made by :meth:`create_node` (e.g. a front end's wildcard
        subscriptions, bound to every topic that matches)."""
        self.pattern_subscriptions: dict[str, Queue] = {}
        """Durable subscriptions to a topic pattern (1.0's wildcards), by queue name
        ``PATTERN::KEY``: stored as a topic's subscriptions are, and bound to the topics
        that match by the front end that keeps them (amqp1/topics.py ``Wildcards``)."""
        self.policies: dict[str, RuntimePolicy] = {}
        """Runtime policies by name (see :mod:`.policies`)."""
        self.metadata: dict[str, Any] = {}
        """Description, tags, default queue type (what a definitions import gave it)."""
        self.stream_arguments: dict[str, dict[str, Any]] = {}
        """The arguments each stream has (a queue keeps its own): ``x-queue-type`` stream and
        those it was declared with (:meth:`_make_stream`)."""
        self.holding: set[Queue] = set()
        """Queues that keep dead letters no queue took (core/dead_letters.py)."""
        self.default_exchange = _DefaultExchange(self)
        self.exchanges[DEFAULT_EXCHANGE] = self.default_exchange
        for xname, xtype in PREDECLARED.items():
            self.exchanges[xname] = make_exchange(xtype, xname, router=self.route, durable=True)

    @property
    def journal(self) -> Journal:
        return self.broker.journal

    def now(self) -> float:
        return self.broker.now()

    def share(self, *change: Any) -> None:
        """A change of metadata made here, which every other worker makes too (workers > 1:
        :attr:`Broker.metadata <amqp10.broker.core.Broker.metadata>`; nothing with one)."""
        metadata = self.broker.metadata
        if metadata is not None:
            metadata.changed(self.name, change)

    # -- nodes (queues, streams, 1.0 topics) ------------------------------------------------
    def policy_for(self, address: str) -> tuple[str, QueuePolicy]:
        rule = self.config.rule_for(address)
        if rule is None:
            return "queue", self.config.default_policy
        return rule.kind, rule.policy

    def queue_policy(self, name: str, kind: str = "queue", arguments: Mapping[str, Any] | None = None) -> QueuePolicy:
        """The policy of queue (or stream) ``name``: the address rules', then its own
        ``arguments`` and the runtime policy that matches it (:mod:`.policies`).

        Raises :class:`~.arguments.ArgumentError` for arguments the core refuses."""
        merged = combined_arguments(arguments, pick_policy(self.policies, name, kind))
        return policy_with_arguments(self.policy_for(name)[1], known_arguments(merged))

    def create_node(self, address: str, kind: str | None = None, *, dynamic: bool = False, persist: bool = True) -> Node:
        """Make a node (``kind`` queue, topic or stream; else per the address rules)."""
        rule_kind, policy = self.policy_for(address)
        kind = kind or rule_kind
        if kind in ("queue", "stream"):
            policy = self.queue_policy(address, kind)
        if kind == "topic":
            topic = Topic(
                address,
                policy,
                make_queue=lambda key, durable: self._subscription_queue(address, key, durable),
                router=self.route,
            )
            self.exchanges.setdefault(address, topic)
            self.reach_copies(topic)
            node: Node = topic
        elif kind == "stream" and policy.partitions > 1 and not is_partition_address(address):
            node = self._partitioned(address, policy, persist=persist)
        elif kind == "stream":
            node = self._make_stream(address, policy, None)
        else:
            node = self._make_queue(address, policy, durable=not dynamic, dynamic=dynamic)
        self.nodes[address] = node
        if persist and not dynamic:
            self.journal.submit((_store.NODE, self.name, address, kind, "{}"))
        if kind == "topic":
            self.share("topic", address)  # (on every worker: Topic.copies)
        elif isinstance(node, Stream) and persist:  # (every worker keeps its record, as of a declared one)
            self.share("queue", address, kind, True, False, self.stream_arguments[address])
        log.info("created %s %r in vhost %r", kind, address, self.name)
        for listener in self.node_listeners:
            listener(node)
        return node

    def reach_copies(self, topic: Topic) -> None:
        """With several workers: ``topic``'s messages reach its copies on the others too."""
        copies = self.broker.copies
        if copies is not None:
            topic.copies = copies(self.name, topic.name)

    def _partitioned(self, address: str, policy: QueuePolicy, *, persist: bool) -> PartitionedStream:
        """A partitioned stream and its partitions (those a restart restored already are kept)."""
        parts: list[Stream | Node] = []
        placement = self.broker.placement
        for k in range(policy.partitions):
            name = partition_address(address, k)
            part = self.nodes.get(name)
            remote = placement(self.name, name) if placement is not None else None
            if remote is not None:  # another worker owns it (and makes it there on first use)
                part = remote
            elif not isinstance(part, Stream):
                part = self.create_node(name, "stream", persist=persist)
                assert isinstance(part, Stream)
            parts.append(part)
        return PartitionedStream(address, policy, parts)

    def _make_stream(self, name: str, policy: QueuePolicy, arguments: Mapping[str, Any] | None) -> Stream:
        """A new stream, and the arguments it has (:attr:`stream_arguments`): a stream's type
        and those it was declared with (none, made by name: an attach, a rule, a partition)."""
        stream = Stream(name, policy, journal=self.journal, now=self.now, vhost=self.name)
        stream.account_to(self.broker.stats)
        self.stream_arguments[name] = {"x-queue-type": "stream", **(arguments or {})}
        return stream

    def _make_queue(
        self,
        name: str,
        policy: QueuePolicy,
        *,
        durable: bool,
        dynamic: bool = False,
        arguments: Mapping[str, Any] | None = None,
    ) -> Queue:
        q = Queue(
            name,
            policy,
            journal=self.journal,
            now=self.now,
            dynamic=dynamic,
            durable_node=durable,
            vhost=self.name,
            arguments=dict(arguments or {}),
        )
        q.scheduler = self.broker.scheduler
        q.pager = self.broker.make_pager(q)
        # the queue's policy of the moment: a runtime policy may change it
        q.dead_letter = lambda msg, reason, on_stored: self.dead_letter(q.policy, msg, reason, name, on_stored)
        q.account_to(self.broker.stats)
        q.on_expired = self._expired_unused
        q.on_holding = self.holding.add
        q.use_expirations(self.broker.expirations)
        return q

    def _subscription_queue(self, topic: str, key: str, durable: bool) -> Queue:
        name = f"{topic}::{key}"
        q = self._make_queue(name, self.policy_for(topic)[1], durable=durable)
        if durable:
            self.journal.submit((_store.NODE, self.name, name, "subscription", "{}"))
        return q

    def subscription_elsewhere(self, topic: str, key: str) -> NodeElsewhere | None:
        """With several workers: the stand-in for subscription ``key`` of topic (or topic
        pattern) ``topic`` if another worker owns its name (one queue, wherever its consumers
        are: a durable or shared subscription's, a durable wildcard one's). None if it is
        this worker's (always, with one worker)."""
        placement = self.broker.placement
        if placement is None:
            return None
        node = placement(self.name, f"{topic}::{key}")
        return node if isinstance(node, NodeElsewhere) else None

    def pattern_subscription(self, pattern: str, key: str) -> Queue:
        """A new durable subscription queue for topic ``pattern``, named ``key`` (stored as a
        topic's subscription is: recovered into :attr:`pattern_subscriptions`)."""
        q = self._subscription_queue(pattern, key, durable=True)
        self.pattern_subscriptions[q.name] = q
        return q

    def restore_pattern_subscription(self, name: str) -> Queue:
        """A durable subscription queue to a topic pattern, ``PATTERN::KEY``, from its store record."""
        q = self._make_queue(name, self.policy_for(name.partition("::")[0])[1], durable=True)
        self.pattern_subscriptions[name] = q
        return q

    def drop_pattern_subscription(self, queue: Queue) -> None:
        """Delete a durable subscription queue to a topic pattern, its messages and its record
        (the front end has unbound it from its topics)."""
        if self.pattern_subscriptions.get(queue.name) is queue:
            del self.pattern_subscriptions[queue.name]
        queue.delete()
        self._forget_subscription(queue)

    def save_subscription(self, queue: Queue) -> None:
        """Write a durable subscription queue's record again, with its ``settings``."""
        if queue.durable_node:
            props = json.dumps({"settings": queue.settings}, sort_keys=True) if queue.settings else "{}"
            self.journal.submit((_store.NODE, self.name, queue.name, "subscription", props))

    def has(self, name: str) -> bool:
        """Whether a node (a topic's copy, with several workers) or an exchange of ``name`` is
        here: what it is here is decided already (:meth:`decide`)."""
        return name in self.nodes or name in self.exchanges

    def lookup(self, address: str | None, *, create: bool, kind: str | None = None) -> Node | None:
        """The node at ``address``, auto-created (as ``kind``, else per the rules) if allowed;
        a node another worker owns is its stand-in here (:attr:`Broker.placement`)."""
        if not address:
            return None
        placement = self.broker.placement
        node = self.nodes.get(address)
        if placement is not None and not self._on_every_worker(node, address, kind):
            remote = placement(self.name, address)
            if remote is not None:
                if isinstance(remote, NodeElsewhere):  # (its owner makes it so, if it has none:
                    remote.make_as = kind  # this look-up's, not an earlier one's, shared stand-in)
                return remote
        if node is None and create and self.config.auto_create:
            node = self.create_node(address, kind)
        return node

    def decide(self, address: str, kind: str | None, decided: Callable[[Node | None], None]) -> bool:
        """With several workers, an attach naming ``address`` as ``kind``, not what the address
        rules make it, where another worker owns the name and this one has no node of it:
        that owner decides what the node is, once for the whole broker (it makes one of
        ``kind`` if it has none: workers/making.py), and ``decided`` gets it once answered:
        this worker's copy of the topic the owner made, else the stand-in for the owner's
        node (None: look it up as before). False: nothing to decide (always with one
        worker): look it up now."""
        placement = self.broker.placement
        if placement is None or kind is None or kind == self.policy_for(address)[0]:
            return False
        if self.has(address):  # (a topic's copy here, or what it is here)
            return False
        if kind != "topic" and self._on_every_worker(None, address, kind):  # (a partitioned stream's address)
            return False
        remote = placement(self.name, address)
        if not isinstance(remote, NodeElsewhere):
            return False

        def answered(result: Callable[[], str | None]) -> None:
            try:
                made = result()
            except ModelError as exc:
                log.info("the owner of %r did not decide its kind: %s", address, exc)
                made = None
            if made == "topic":  # our copy, as the metadata's "topic" makes it (if it came first, made)
                node = self.nodes.get(address)
                if node is None:
                    node = self.create_node(address, "topic")
                decided(node if isinstance(node, Topic) else None)
            elif made is not None:
                remote.held_kind = made
                decided(remote)
            else:
                decided(None)

        remote.ask_make(kind, answered)
        return True

    def _on_every_worker(self, node: Node | None, address: str, kind: str | None) -> bool:
        """Whether the node at ``address`` is one of those every worker has a copy of (a 1.0
        topic, a partitioned stream's address), rather than one worker's (workers > 1)."""
        if node is not None:
            return isinstance(node, (Topic, PartitionedStream))
        rule_kind, policy = self.policy_for(address)
        kind = kind or rule_kind
        if kind == "stream":  # a partitioned stream places on its partitions (each one worker's)
            return policy.partitions > 1 and not is_partition_address(address)
        return kind == "topic"

    def stream_info(self, address: str) -> dict[str, int] | None:
        """A stream's offsets and counts (a partitioned one's: its partitions and totals);
        None if ``address`` is no stream here."""
        node = self.nodes.get(address)
        return node.info() if isinstance(node, (Stream, PartitionedStream)) else None

    def queue(self, name: str) -> Queue | Stream | None:
        """The queue or stream called ``name`` (what the default exchange routes to)."""
        node = self.nodes.get(name)
        return node if isinstance(node, (Queue, Stream)) else None

    def kind_of(self, node: Node) -> str:
        """What ``node`` is to a client (``queue``, ``topic``, ``stream``...): its kind; for a
        stand-in of a node another worker owns, the owner's: as the owner said it
        (:attr:`NodeElsewhere.held_kind`), else that of this worker's record of it (the
        metadata's copy of a declared queue or stream), else what an attach here named it as,
        else what the address rules make of its name (as its owner does when a link makes it
        there)."""
        if not isinstance(node, NodeElsewhere):
            return node.kind
        if node.held_kind is not None:
            return node.held_kind
        record = self.nodes.get(node.name)
        if isinstance(record, (Queue, Stream)):
            return record.kind
        return node.make_as or self.policy_for(node.name)[0]

    def elsewhere(self, name: str) -> NodeElsewhere | None:
        """The stand-in for queue ``name`` if another worker owns it (:attr:`Broker.placement`);
        None for a node of this worker's (always, with one worker). This worker's record of
        a shared queue another worker owns (the metadata's copy: workers/metadata.py) is not
        the queue: the stand-in is; an exclusive or dynamic queue made here is."""
        placement = self.broker.placement
        if placement is None:
            return None
        owners = self._owners
        if placement is not self._owners_of:
            owners.clear()
            self._owners_of = placement
        if name in owners:
            node = owners[name]
        else:
            answer = placement(self.name, name)
            node = answer if isinstance(answer, NodeElsewhere) else None
            if len(owners) >= OWNERS_KEPT:
                owners.clear()
            owners[name] = node
        if node is None:
            return None
        local = self.nodes.get(name)
        if isinstance(local, Queue) and (local.owner is not None or local.dynamic):
            return None
        return node

    def placement_changed(self) -> None:
        """:attr:`Broker.placement`'s answers may have changed (a node placed on a worker by an
        override, or no longer): :meth:`elsewhere` asks it again."""
        self._owners.clear()

    def declare_queue(
        self,
        name: str,
        *,
        durable: bool = True,
        kind: str | None = None,
        passive: bool = False,
        arguments: Mapping[str, Any] | None = None,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        persist: bool = True,
        checked: bool = False,
    ) -> Queue | Stream:
        """Declare a queue: the existing one, or a new one.

        ``arguments`` are RabbitMQ's queue arguments (see :mod:`.arguments`;
        ``x-queue-type = stream`` makes a stream), applied on top of the policy
        the address rules give ``name``. ``exclusive_owner`` (a connection)
        makes it exclusive: only that owner may use it, and it is deleted with
        :meth:`owner_gone`. ``auto_delete``: deleted when its last consumer goes.
        Qpid's arguments (:mod:`.qpid_queues`): ``no-local`` drops what is published on
        its owner's or exclusive consumer's connection; ``alternate-exchange`` takes its
        messages when it is deleted; ``qpid.auto_delete_timeout`` (a policy field, from
        :mod:`.arguments`) delays its deletion once unused (:meth:`_unused`).

        A new queue's arguments are checked as RabbitMQ 3.10 checks them (:func:`check_declared`),
        and a stream or quorum queue must be durable, not exclusive and not auto-delete
        (``rabbit_queue_type_util``'s checks, in its words); ``checked``: they were where the
        declaration was made (a change shared by another worker, a replayed log: what was
        taken once is not refused later), as a queue restored from the store (not ``persist``).
        """
        node = self.nodes.get(name)
        if node is not None:
            if not isinstance(node, (Queue, Stream)):
                raise PreconditionFailed(f"{name!r} in vhost {self.name!r} is a {node.kind}, not a queue")
            owner = node.owner if isinstance(node, Queue) else None
            if owner is not None and owner is not exclusive_owner:
                raise ResourceLocked(f"cannot obtain exclusive access to locked queue {name!r} in vhost {self.name!r}")
            if isinstance(node, Queue) and not passive:
                node.last_used = self.now()  # a redeclaration renews ``expires``, as in RabbitMQ
            return node
        if passive:
            raise NotFound(f"no queue {name!r} in vhost {self.name!r}")
        try:
            if persist and not checked:  # (a queue restored from the store was checked when it was declared)
                check_declared(arguments)
            if kind is None:
                kind = queue_kind(arguments)
            elif kind not in ("queue", "stream"):
                raise ArgumentError(f"a queue's type is queue or stream, not {kind!r}")
            if persist and not checked:
                self._check_replicated(name, kind, arguments, durable, exclusive_owner, auto_delete)
            policy = self.queue_policy(name, kind, arguments)
        except ArgumentError as exc:
            if exc.argument is not None:  # (RabbitMQ's text: rabbit_amqqueue:check_arguments_type_and_value/3)
                raise PreconditionFailed(
                    f"invalid arg '{exc.argument}' for queue '{name}' in vhost '{self.name}': {exc.reason}"
                ) from None
            raise PreconditionFailed(f"invalid arguments for queue {name!r} in vhost {self.name!r}: {exc}") from None
        props = _stored_arguments(arguments) if arguments else "{}"
        made: Queue | Stream
        if kind == "stream":
            made = self._make_stream(name, policy, arguments)
            arguments = self.stream_arguments[name]  # (as every worker keeps them: its type included)
            durable = True
        else:
            q = self._make_queue(name, policy, durable=durable and exclusive_owner is None, arguments=arguments)
            q.owner = exclusive_owner
            if is_no_local(arguments):
                q.admit = not_local(q)
            if exclusive_owner is not None:
                self._exclusive.setdefault(id(exclusive_owner), []).append(name)
            q.auto_delete = auto_delete
            if auto_delete:
                q.on_unused = self._unused
            made = q
        self.nodes[name] = made
        if durable and exclusive_owner is None and persist:
            self.journal.submit((_store.NODE, self.name, name, kind, props))
        if exclusive_owner is None and persist:
            self.share("queue", name, kind, durable, auto_delete, arguments or {})
        elif persist:  # made on this connection's worker: every worker knows it is here
            self._placed.add(name)
            self.share("place", name)
        log.info("declared %s %r in vhost %r", kind, name, self.name)
        if self.holding:
            self.retry_dead_letters()  # (the default exchange routes to it now)
        return made

    def retry_dead_letters(self, *, due_only: bool = False) -> None:
        """Send again the dead letters its queues keep (a route may exist now; ``due_only``:
        those whose time-driven retry is due, the broker's tick)."""
        for q in list(self.holding):
            if not q.retry_dead_letters(due_only=due_only):
                self.holding.discard(q)

    def owner_gone(self, owner: object) -> None:
        """A connection ended: its exclusive queues go with it (with
        ``qpid.auto_delete_timeout``, no longer exclusive, once unused that long)."""
        for name in self._exclusive.pop(id(owner), ()):
            node = self.nodes.get(name)
            if isinstance(node, Queue) and node.owner is owner:
                self._unused(node)

    def _unused(self, queue: Queue) -> None:
        """An auto-delete ``queue`` lost its last consumer, or an exclusive one its owner: it
        is deleted; with Qpid's ``auto_delete_timeout``, it is kept that long instead (no
        longer exclusive) and deleted then if still unused (its ``expires``)."""
        if self.nodes.get(queue.name) is not queue:
            return
        timeout = queue.policy.auto_delete_timeout
        if timeout is None:
            self.delete_node(queue.name)
            return
        queue.owner = None
        queue.last_used = self.now()
        queue.set_policy(queue.policy.model_copy(update={"expires": timeout}))

    def _expired_unused(self, queue: Queue) -> None:
        """``queue`` has been unused for its ``expires``: delete it (a subscription queue,
        not a node of its own, is kept)."""
        if self.nodes.get(queue.name) is queue:
            if self.elsewhere(queue.name) is not None:
                return  # this worker's record of a queue another worker owns: its owner expires it
            log.info("queue %r in vhost %r expired unused", queue.name, self.name)
            self.delete_node(queue.name)

    def create_dynamic(self) -> Queue:
        """A fresh, uniquely named, non-durable queue (deleted with its link)."""
        address = f"{self.broker.dynamic_prefix}{next(self._dynamic)}.{uuid.uuid4().hex[:12]}"
        node = self.create_node(address, "queue", dynamic=True)
        assert isinstance(node, Queue)
        return node

    def delete_node(self, address: str) -> None:
        """Remove a queue, stream or topic (its messages, its bindings, its store records).
        A queue's ``alternate-exchange`` takes its messages: those waiting now, and those
        its consumers held, as they come back."""
        node = self.nodes.pop(address, None)
        self.stream_arguments.pop(address, None)
        if isinstance(node, (Queue, Stream)):
            self._unbind_everywhere(node)
            placement = self.broker.placement
            remote = placement(self.name, address) if placement is not None else None
            if remote is not None:  # bound here as its owner's stand-in (:meth:`_destination`)
                self._unbind_everywhere(remote)  # type: ignore[arg-type]
            if address in self._placed:
                self._placed.discard(address)
                self.share("unplace", address)  # (it was placed here: workers/placing.py)
            elif not (isinstance(node, Queue) and (node.owner is not None or node.dynamic)):
                self.share("drop-queue", address)  # (an exclusive or dynamic one was never shared)
        if isinstance(node, Queue):
            alternate = self.exchanges.get(alternate_exchange(node.arguments) or "")
            if alternate is not None:
                self._reroute_all(node, alternate)
            node.delete()
            if node.durable_node:
                self.journal.submit((_store.DROP_NODE, self.name, address))
        elif isinstance(node, Stream):
            node.delete()
            self.journal.submit((_store.DROP_NODE, self.name, address))
        elif isinstance(node, Topic):  # its subscriptions (and their consumers) go with it
            for key, q in list(node.subscriptions.items()):
                if self.pattern_subscriptions.get(q.name) is q:
                    node.unsubscribe(key)  # a durable wildcard's stays, for the other topics that match
                    continue
                self.drop_subscription(node, q)
                q.delete()
            if self.exchanges.get(address) is node:
                del self.exchanges[address]
            node.deleted = True
            self._unbind_everywhere(node)
            self.journal.submit((_store.DROP_NODE, self.name, address))
            self.share("drop-topic", address)  # (its copies on the other workers go too)
        elif isinstance(node, PartitionedStream):
            node.delete()
            self.journal.submit((_store.DROP_NODE, self.name, address))
            for part in node.partitions:
                if self.nodes.get(part.name) is part:
                    self.delete_node(part.name)
        if node is not None:
            node.account_to(DETACHED)  # what it still holds (with consumers, on disk) is gone

    def _reroute_all(self, queue: Queue, alternate: Exchange) -> None:
        """``queue`` is going: what waits on it goes to ``alternate`` now, what its consumers
        hold as they settle it (released; rejected ones are dead-lettered as ever)."""

        def orphaned(msg: QueuedMessage) -> None:
            self.route(alternate, msg.copy(), None, nothing)

        while (msg := queue.get()) is not None:  # (unbound already: none comes back to it)
            queue.ack(msg)
            orphaned(msg)
        queue.orphaned = orphaned

    def drop_subscription(self, topic: Topic, queue: Queue) -> None:
        """Remove a subscription queue from its topic (and from the store, if durable)."""
        for key, q in list(topic.subscriptions.items()):
            if q is queue:
                log.info("ended subscription %r of topic %r in vhost %r", key, topic.name, self.name)
                topic.unsubscribe(key)
                q.purge()
                self._forget_subscription(q)

    def _forget_subscription(self, queue: Queue) -> None:
        if queue.durable_node:
            self.journal.submit((_store.DROP_NODE, self.name, queue.name))
        queue.account_to(DETACHED)

    def dead_letter(
        self, policy: QueuePolicy, msg: QueuedMessage, reason: str, queue: str = "", on_stored: Callable[[], None] | None = None
    ) -> bool:
        """Send on a dead message (``reason``: rejected, expired, maxlen, delivery_limit): to
        the policy's dead-letter exchange, with an x-death record, or to its dead-letter address.
        True if a queue took it: ``on_stored`` runs once the dead letter is safe where it went
        (every queue that took it has committed it); False if it reached none (``on_stored``
        is not called: the source queue drops it or keeps it, by its dead-letter strategy)."""
        if on_stored is None:
            on_stored = nothing
        if policy.dead_letter_exchange is not None:
            x = self.exchanges.get(policy.dead_letter_exchange)
            if x is None:
                log.warning("a %s message: no dead-letter exchange %r", reason, policy.dead_letter_exchange)
                return False
            exchange, key = msg.published_to
            dl_key = policy.dead_letter_routing_key
            death = {
                "queue": queue, "reason": reason, "exchange": exchange, "routing-keys": [key],
                "dead-letter-exchange": x.name, "new-key": dl_key,
            }  # fmt: skip
            dead = msg.dead_lettered(death, self.now())
            if dl_key is None:
                dl_key = key
            if not self.route(x, dead, dl_key, on_stored):
                log.info("a dead-lettered message from %r reached no queue through %r", queue, x.name)
                return False
            return True
        dla = policy.dead_letter_address
        target = self.lookup(dla, create=True) if dla else None
        if target is None:
            log.warning("a %s message: dead-letter address %r has no node", reason, dla)
            return False
        dead = msg.copy()
        dead.expiry = None  # an expired message must not expire again where it is kept
        dead.arrival = self.now()  # (its new queue's TTL counts from now)
        return bool(target.publish(dead, on_stored))  # (False: refused, full)

    def queues(self) -> list[Queue | Stream]:
        """Every queue and stream, subscription queues of 1.0 topics included, each once
        (a wildcard subscription's queue is bound to every topic that matches)."""
        out: dict[Queue | Stream, None] = {}
        for node in self.nodes.values():
            if isinstance(node, (Queue, Stream)):
                out[node] = None
            elif isinstance(node, Topic):
                out.update(dict.fromkeys(node.subscriptions.values()))
        out.update(dict.fromkeys(self.pattern_subscriptions.values()))
        return list(out)

    def total_bytes(self) -> int:
        return sum(q.bytes for q in self.queues())

    # -- exchanges ----------------------------------------------------------------------------
    def exchange(self, name: str) -> Exchange | None:
        return self.exchanges.get(name)

    def declare_exchange(
        self,
        name: str,
        type_: str,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        alternate: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        passive: bool = False,
        persist: bool = True,
    ) -> Exchange:
        """Declare an exchange: the existing one if its type matches, else a new one."""
        x = self.exchanges.get(name)
        if x is not None:
            if not passive and x.type != type_:
                raise PreconditionFailed(
                    f"exchange {name!r} in vhost {self.name!r} has type {x.type!r}, not {type_!r}"
                )
            return x
        if passive:
            raise NotFound(f"no exchange {name!r} in vhost {self.name!r}")
        if name == DEFAULT_EXCHANGE or name.startswith("amq."):
            raise AccessRefused(f"exchange names starting with 'amq.' are reserved: {name!r}")
        alternate = alternate or _str_or_none((arguments or {}).get("alternate-exchange"))
        x = make_exchange(
            type_,
            name,
            router=self.route,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            alternate=alternate,
            arguments=arguments,
        )
        self.exchanges[name] = x
        if durable and persist:
            self.journal.submit((_store.EXCHANGE, self.name, name, x.type, _exchange_properties(x)))
        if persist:
            self.share("exchange", name, x.type, durable, auto_delete, internal, alternate, arguments or {})
        log.info("declared %s exchange %r in vhost %r", x.type, name, self.name)
        return x

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        x = self.exchanges.get(name)
        if x is None:
            raise NotFound(f"no exchange {name!r} in vhost {self.name!r}")
        if name == DEFAULT_EXCHANGE or name in PREDECLARED or isinstance(x, Topic):
            raise AccessRefused(f"exchange {name!r} in vhost {self.name!r} cannot be deleted")
        if if_unused and x.bindings:
            raise PreconditionFailed(f"exchange {name!r} in vhost {self.name!r} in use")
        self._drop_exchange(x)
        self.share("drop-exchange", name)

    def _drop_exchange(self, x: Exchange) -> None:
        """Remove ``x``, its bindings and its store records (no checks)."""
        del self.exchanges[x.name]
        x.deleted = True
        self._unbind_everywhere(x)
        if x.durable:
            self.journal.submit((_store.DROP_EXCHANGE, self.name, x.name))

    # -- bindings -----------------------------------------------------------------------------
    def _destination(self, kind: str, name: str) -> Destination:
        if kind == "exchange":
            x = self.exchanges.get(name)
            if x is None:
                raise NotFound(f"no exchange {name!r} in vhost {self.name!r}")
            return x
        q = self.queue(name)
        if q is None:
            raise NotFound(f"no queue {name!r} in vhost {self.name!r}")
        if self.broker.placement is not None:  # a queue another worker owns: its messages go
            remote = self.elsewhere(name)  # to the owner (not an exclusive queue made here)
            if remote is not None:
                return remote
        return q

    def _bindable(self, source: str) -> Exchange:
        """The exchange ``source``, if its bindings may be changed."""
        x = self.exchanges.get(source)
        if x is None:
            raise NotFound(f"no exchange {source!r} in vhost {self.name!r}")
        if x is self.default_exchange:
            raise AccessRefused("the default exchange's bindings cannot be changed")
        return x

    def bind(
        self,
        source: str,
        destination: str,
        key: str = "",
        arguments: Mapping[str, Any] | None = None,
        *,
        destination_kind: str = "queue",
        persist: bool = True,
    ) -> Binding:
        """Bind ``destination`` (a queue, or an exchange) to exchange ``source``."""
        x = self._bindable(source)
        dest = self._destination(destination_kind, destination)
        binding = Binding(x, dest, key, arguments)
        try:
            added = x.bind(binding)
        except ValueError as exc:
            raise PreconditionFailed(str(exc)) from None
        if added and persist and _durable(x) and _durable(dest):
            self.journal.submit((_store.BIND, self.name, *_binding_row(binding)))
        if added and persist:
            self.share("bind", source, destination, key, arguments or {}, destination_kind)
        if added and self.holding:
            self.retry_dead_letters()  # (a dead letter kept may have a route now)
        return binding

    def unbind(
        self,
        source: str,
        destination: str,
        key: str = "",
        arguments: Mapping[str, Any] | None = None,
        *,
        destination_kind: str = "queue",
    ) -> None:
        x = self._bindable(source)
        ident = (destination_kind, destination, key, args_key(arguments))
        binding = x.unbind(ident)
        if binding is None:
            raise NotFound(f"no such binding from {source!r} to {destination!r} in vhost {self.name!r}")
        self._unbound(binding)
        self.share("unbind", source, destination, key, arguments or {}, destination_kind)

    def unbind_key(self, source: str, destination: str, key: str = "", *, destination_kind: str = "queue") -> int:
        """Remove every binding from ``source`` to ``destination`` with ``key``, whatever its
        arguments (0-10 names a binding by exchange, queue and key; 0-9-1 and 1.0 add the
        arguments: :meth:`unbind`); return how many went (0: none was there). Each goes as
        :meth:`unbind` removes one (stored, shared with the other workers); a queue another
        worker owns is bound as its stand-in."""
        x = self._bindable(source)
        if destination_kind == "exchange":
            dest: Destination | NodeElsewhere | None = self.exchanges.get(destination)
        else:  # (a queue another worker owns, exclusive ones too, is bound as its stand-in)
            dest = self.elsewhere(destination) or self.queue(destination)
        if dest is None:
            return 0
        gone = [b for b in x.bindings_to(dest) if b.key == key]
        for b in gone:  # (an auto-delete exchange goes with the last one)
            self.unbind(source, destination, key, b.arguments, destination_kind=destination_kind)
        return len(gone)

    def unbind_elsewhere(self, name: str) -> None:
        """Queue ``name`` of another worker went (workers > 1: an exclusive queue, with its
        connection or its worker): the bindings here to its stand-in go, as a deleted
        queue's do (its own worker removed its own)."""
        remote = self.elsewhere(name)
        if remote is not None:
            self._unbind_everywhere(remote)

    def _unbound(self, binding: Binding) -> None:
        x = binding.source
        if _durable(x) and _durable(binding.destination):
            self.journal.submit((_store.UNBIND, self.name, *_binding_row(binding)))
        if x.auto_delete and not x.bindings and self.exchanges.get(x.name) is x:
            log.info("auto-deleting exchange %r in vhost %r: its last binding is gone", x.name, self.name)
            self._drop_exchange(x)

    def _unbind_everywhere(self, dest: Destination) -> None:
        """Remove every binding to ``dest`` (and, for an exchange, from it)."""
        if isinstance(dest, Exchange):
            for b in list(dest.bindings.values()):
                dest.unbind(b.identity)
        for x in list(self.exchanges.values()):
            for b in x.bindings_to(dest):
                x.unbind(b.identity)
                self._unbound(b)

    # -- routing ----------------------------------------------------------------------------
    def destinations(self, exchange: Exchange, msg: QueuedMessage, key: str | None) -> list[Queue | Stream | NodeElsewhere]:
        """The queues ``msg`` reaches from ``exchange``: through exchange-to-exchange bindings,
        and through an exchange's alternate exchange when its own bindings match nothing;
        by ``key`` and by the message's extra keys (1.0's ``x-cc``), each queue once."""
        queues: dict[int, Queue | Stream | NodeElsewhere] = {}  # (a stand-in: another worker's queue)
        seen: set[int] = set()
        pending = [exchange]
        cc = msg.extra_routing_keys() if msg.has_extra_routing_keys else ()
        if not cc and type(exchange) is _DefaultExchange and not exchange.alternate:
            return exchange.match(msg, key)  # type: ignore[return-value]  # (one queue at most: the loop's answer)
        keys = (key, *cc) if cc else (key,)
        while pending:
            x = pending.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            matched = False
            for k in keys:
                for d in x.match(msg, k):
                    matched = True
                    if isinstance(d, Exchange):
                        pending.append(d)
                    else:
                        queues[id(d)] = d
            if not matched and x.alternate:
                ae = self.exchanges.get(x.alternate)
                if ae is not None:
                    pending.append(ae)
        return list(queues.values())

    def route(
        self,
        exchange: Exchange,
        msg: QueuedMessage,
        key: str | None,
        on_stored: Callable[[], None],
        on_refused: Refused | None = None,
        reached: Sequence[Queue | Stream | NodeElsewhere] | None = None,
    ) -> PublishResult:
        """Publish ``msg`` to every queue it reaches from ``exchange`` (``key`` None: the
        message's own routing key). ``on_stored`` runs once every queue that took it has it
        safe. :attr:`~PublishResult.TAKEN` if any queue took it; else (``on_stored`` never
        called) :attr:`~PublishResult.UNROUTABLE` if it reached no queue,
        :attr:`~PublishResult.FULL` if every queue it reached refused it. A queue another
        worker owns answers later: if every queue that took it was such a queue and did not
        take it after all, ``on_refused`` is told why instead of ``on_stored`` (without
        ``on_refused``: ``on_stored`` runs then, as these callers treat a message no queue
        took: done with, dropped); if one of them could not be reached (its worker down
        longer than ``worker_down_hold``), ``on_refused`` gets None once the others answered,
        though the others took it (the publisher may send it again). ``reached``: the queues :meth:`destinations` found for
        it already (a transaction's commit with several workers, which routed it to learn
        the workers it reaches): it is not routed again (a queue deleted since is left out)."""
        queues = self.destinations(exchange, msg, key) if reached is None else [q for q in reached if not q.deleted]
        if not queues:
            return PublishResult.UNROUTABLE
        msg.mark_published(exchange.name, key)
        if len(queues) == 1:
            q = queues[0]
            if isinstance(q, NodeElsewhere):  # (a queue another worker owns)
                return q.publish_answered(msg, on_stored, on_refused or _dropped(on_stored))
            return q.publish(msg, on_stored)
        remaining = len(queues) + 1  # one extra hold, let go below if any queue took it
        taken = 0
        unreached = False  # a copy's worker was down past the bound: the publish is refused
        routing = True  # the loop below runs: a refusal now only records itself
        refused_now = False

        def one_stored() -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                if unreached:
                    (on_refused or _dropped(on_stored))(None)
                else:
                    on_stored()

        def one_refused(result: PublishResult | None) -> None:  # (a queue another worker owns)
            nonlocal taken, unreached, refused_now
            if result is None:
                unreached = True
            if routing:  # refused at once (its worker down past the bound): not taken, below
                refused_now = True
                return
            taken -= 1
            if taken == 0:
                (on_refused or _dropped(on_stored))(PublishResult.FULL if result is not None else None)
                return
            one_stored()

        for q in queues:
            if isinstance(q, NodeElsewhere):
                result = q.publish_answered(msg.copy(), one_stored, one_refused)
                if refused_now:
                    refused_now = False
                    result = PublishResult.FULL
            else:
                result = q.publish(msg.copy(), one_stored)
            if result is PublishResult.TAKEN:  # (no __bool__ call)
                taken += 1
            else:
                remaining -= 1
        routing = False
        if not taken:
            if not unreached:
                return PublishResult.FULL
            (on_refused or _dropped(on_stored))(None)  # (refused at once: the bound was passed)
            return PublishResult.TAKEN
        one_stored()
        return PublishResult.TAKEN

    # -- runtime policies -----------------------------------------------------------------------
    def declare_policy(self, policy: RuntimePolicy, *, persist: bool = True) -> None:
        """Add or replace a runtime policy; it applies at once to the queues it matches."""
        try:
            policy.check()
        except ArgumentError as exc:
            raise PreconditionFailed(f"policy {policy.name!r} in vhost {self.name!r}: {exc}") from None
        self.policies[policy.name] = policy
        if persist:
            self.journal.submit(
                (_store.POLICY, self.name, policy.name, policy.pattern, policy.apply_to, policy.definition_json(), policy.priority)
            )
        log.info("policy %r in vhost %r: %r applies to %s", policy.name, self.name, policy.pattern, policy.apply_to)
        self._reapply_policies()
        if persist:
            self.share("policy", policy.name, policy.pattern, policy.apply_to, policy.definition, policy.priority)

    def delete_policy(self, name: str) -> None:
        if self.policies.pop(name, None) is None:
            raise NotFound(f"no policy {name!r} in vhost {self.name!r}")
        self.journal.submit((_store.DROP_POLICY, self.name, name))
        self._reapply_policies()
        self.share("drop-policy", name)

    def _reapply_policies(self) -> None:
        """Give every queue and stream the policy the runtime policies now make."""
        for node in list(self.nodes.values()):
            if isinstance(node, Queue):
                policy = self.queue_policy(node.name, "queue", node.arguments)
                if policy != node.policy:
                    node.set_policy(policy)
            elif isinstance(node, Stream):
                node.policy = self.queue_policy(node.name, "stream", self.stream_arguments.get(node.name))

    def _check_replicated(
        self,
        name: str,
        kind: str,
        arguments: Mapping[str, Any] | None,
        durable: bool,
        exclusive_owner: object | None,
        auto_delete: bool,
    ) -> None:
        """A new stream or quorum queue is durable, not exclusive and not auto-delete: else
        refused as RabbitMQ 3.10 refuses it (``rabbit_queue_type_util:check_auto_delete/1``,
        ``check_exclusive/1``, ``check_non_durable/1``, in that order). A stream here is
        always durable, so its durability is read from ``durable`` as declared."""
        if kind != "stream" and (arguments or {}).get("x-queue-type") != "quorum":
            return
        refused = (
            "auto-delete" if auto_delete
            else "exclusive-owner" if exclusive_owner is not None
            else "non-durable" if not durable
            else None
        )  # fmt: skip
        if refused is not None:
            raise PreconditionFailed(f"invalid property '{refused}' for queue '{name}' in vhost '{self.name}'")

    def set_metadata(self, metadata: Mapping[str, Any], *, persist: bool = True) -> None:
        """Record the host's description, tags and default queue type (kept in the store). No
        default queue type is written ``undefined`` too (RabbitMQ's definitions export of a
        host without one) or left empty; one RabbitMQ does not know is refused
        (``invalid_queue_type``), or, read back from the store (not ``persist``), dropped with
        a warning (the host declares classic queues)."""
        metadata = dict(metadata)
        queue_type = given_queue_type(metadata.pop("default_queue_type", None))
        if queue_type is None:
            pass
        elif isinstance(queue_type, str) and queue_type in QUEUE_TYPES:
            metadata["default_queue_type"] = queue_type
        elif persist:
            raise PreconditionFailed(f"invalid_queue_type: a default queue type is classic, quorum or stream, not {queue_type!r}")
        else:
            log.warning("vhost %r: default queue type %r is not classic, quorum or stream: left out", self.name, queue_type)
        self.metadata = metadata
        if persist:
            self.journal.submit((_store.VHOST, self.name, json.dumps(self.metadata, sort_keys=True)))
            self.share("vhost-metadata", self.metadata)

    def declared_arguments(
        self, arguments: Mapping[str, Any], *, durable: bool, exclusive: bool, auto_delete: bool
    ) -> Mapping[str, Any]:
        """A 0-9-1 declaration's arguments as RabbitMQ 3.10 declares and compares them
        (``rabbit_amqqueue:augment_declare_args/5``): without ``x-queue-type``, in a host
        with a default queue type, that type is added where the type takes such a queue
        (classic: any; quorum and stream: durable, not exclusive, not auto-delete); else
        ``arguments`` as they are."""
        default_type = self.metadata.get("default_queue_type")
        if not isinstance(default_type, str) or "x-queue-type" in arguments:
            return arguments
        if default_type != "classic" and not (durable and not exclusive and not auto_delete):
            return arguments
        with_type = dict(arguments)
        with_type["x-queue-type"] = default_type
        return with_type

    def delete_contents(self) -> None:
        """Remove everything the host holds (as RabbitMQ deletes a virtual host): its queues,
        streams and topics with their messages, its exchanges (the predeclared ones too),
        its policies, and their store records; its record goes with
        :meth:`~amqp10.broker.core.broker.Broker.delete_vhost`."""
        for name in list(self.nodes):
            self.delete_node(name)
        for q in list(self.pattern_subscriptions.values()):
            self.drop_pattern_subscription(q)
        for x in list(self.exchanges.values()):
            self._drop_exchange(x)
        for name in list(self.policies):
            self.delete_policy(name)

    # -- recovery -----------------------------------------------------------------------------
    def restore_policy(self, rec: _store.PolicyRecord) -> None:
        policy = RuntimePolicy(rec.name, rec.pattern, rec.apply_to, json.loads(rec.definition), rec.priority)
        try:
            self.declare_policy(policy, persist=False)
        except ModelError as exc:
            log.warning("not restoring a policy in vhost %r: %s", self.name, exc)

    def restore_node(self, rec: _store.NodeRecord) -> None:
        """Recreate a durable queue, topic or stream from its store record."""
        if rec.name in self.nodes:
            return
        props = json.loads(rec.properties or "{}")
        arguments = props.get("arguments")  # (as a broker before typed_arguments wrote them)
        typed_arguments = props.get("typed_arguments")
        if typed_arguments is not None:
            try:
                read = untyped(typed_arguments)
                if not isinstance(read, dict):
                    raise ValueError(f"not a table: {typed_arguments!r}")
                arguments = read
            except ValueError as exc:  # (a malformed record: this queue's alone)
                log.warning(
                    "queue %r in vhost %r: its stored typed_arguments do not read (%s); recreated %s",
                    rec.name,
                    self.name,
                    exc,
                    "with its arguments as stored without their types" if arguments else "without arguments",
                )
        if arguments and rec.kind in ("queue", "stream"):
            try:
                self.declare_queue(rec.name, kind=rec.kind, arguments=arguments, persist=False)
                return
            except ModelError as exc:
                log.warning("queue %r in vhost %r: %s; recreated without its arguments", rec.name, self.name, exc)
        self.create_node(rec.name, rec.kind, persist=False)

    def restore_exchange(self, rec: _store.ExchangeRecord) -> None:
        props = json.loads(rec.properties or "{}")
        if rec.name in self.exchanges:
            return
        self.declare_exchange(
            rec.name,
            rec.type,
            durable=True,
            auto_delete=bool(props.get("auto_delete")),
            internal=bool(props.get("internal")),
            alternate=props.get("alternate"),
            arguments=props.get("arguments") or {},
            persist=False,
        )

    def restore_binding(self, rec: _store.BindingRecord) -> None:
        try:
            self.bind(
                rec.source,
                rec.destination,
                rec.routing_key,
                json.loads(rec.arguments) if rec.arguments else None,
                destination_kind=rec.destination_kind,
                persist=False,
            )
        except ModelError as exc:
            log.warning("not restoring a binding in vhost %r: %s", self.name, exc)


class _DefaultExchange(DirectExchange):
    """The nameless exchange: routing key = queue name, bound to every queue implicitly."""

    def __init__(self, vhost: VirtualHost) -> None:
        super().__init__(DEFAULT_EXCHANGE, router=vhost.route, durable=True)
        self.vhost = vhost

    def match(self, msg: QueuedMessage, key: str | None) -> list[Destination]:
        name = routing_key_of(msg, key)
        vhost = self.vhost
        if vhost.broker.placement is not None:  # a queue another worker owns: its owner says
            remote = vhost.elsewhere(name)  # whether it is there
            if remote is not None:
                return [remote]  # (a stand-in routes as the queue)
        q = vhost.queue(name)
        return [q] if q is not None else []


def _durable(d: Destination) -> bool:
    if isinstance(d, Exchange):
        return d.durable
    if isinstance(d, Queue):
        return d.durable_node
    return True  # streams are always durable


def _binding_row(b: Binding) -> tuple[str, str, str, str, str]:
    kind, dest, key, args = b.identity
    return (b.source.name, kind, dest, key, args)


def _exchange_properties(x: Exchange) -> str:
    return json.dumps(
        {"auto_delete": x.auto_delete, "internal": x.internal, "alternate": x.alternate, "arguments": x.arguments},
        sort_keys=True,
        default=repr,
    )


def _str_or_none(v: Any) -> str | None:
    return None if v is None else str(v)
