"""Topics as 1.0 clients name them: node kinds from addresses and capabilities,
JMS-style subscription names, and wildcard subscriptions.

- ``topic://NAME`` and ``queue://NAME`` (and the terminus capabilities
  ``topic``/``queue``/``stream``) choose the kind of a node the broker
  auto-creates; a node that exists keeps its kind.
- Subscriptions to a topic follow the AMQP JMS mapping: a durable one is named
  by the container-id and the link name (``shared``: the link name up to its
  ``|``, so ``sub``, ``sub|2`` ... are one subscription; ``global``: without
  the container-id); its consumers share (load-balance) its queue.
- A consumer on a topic pattern (``orders.*``: one word, ``orders.#``: zero or
  more, ``.``-separated) gets a queue bound to every topic whose name matches,
  now or created later (:class:`Wildcards`, one per virtual host).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import Broker, Node, Queue, Topic, TopicTrie, VirtualHost, is_pattern

__all__ = [
    "SUBSCRIPTION_QUESTION",
    "Subscription",
    "WildcardSubscription",
    "Wildcards",
    "answer_subscription_question",
    "capabilities_of",
    "durable_subscription",
    "is_pattern",
    "node_name_and_kind",
    "subscription_for",
    "wildcards_of",
]

TOPIC_PREFIX = "topic://"
QUEUE_PREFIX = "queue://"
_KINDS = ("stream", "topic", "queue")  # in order of precedence, if a terminus names several


def capabilities_of(capabilities: Any) -> list[str]:
    """A terminus's capabilities as strings (the field is one symbol or an array of them)."""
    if not capabilities:
        return []
    if isinstance(capabilities, str):
        return [str(capabilities)]
    return [str(c) for c in capabilities]


def node_name_and_kind(address: str, capabilities: Any) -> tuple[str, str | None]:
    """The node name an address means, and the kind to create it as (None: the rules')."""
    if address.startswith(TOPIC_PREFIX):
        return address[len(TOPIC_PREFIX) :], "topic"
    if address.startswith(QUEUE_PREFIX):
        return address[len(QUEUE_PREFIX) :], "queue"
    caps = capabilities_of(capabilities)
    for kind in _KINDS:
        if kind in caps:
            return address, kind
    return address, None


@dataclass(frozen=True)
class Subscription:
    """Which subscription of a topic a consumer's link is (the AMQP JMS mapping)."""

    key: str
    """Its name within the topic; ``tmp.`` ones end with their link."""
    durable: bool
    shared: bool


def subscription_for(container_id: str, link_name: str, capabilities: Any, *, durable: bool, unique: str) -> Subscription:
    """The subscription a consumer attaching ``link_name`` from ``container_id`` means.

    Durable: the container-id and the link name (JMS: client-id and subscription
    name). ``shared``: every link named ``NAME`` or ``NAME|...`` is one
    subscription, its consumers competing; ``global``: shared across containers
    (no client-id). Otherwise a subscription of its own (``unique``).
    """
    caps = capabilities_of(capabilities)
    shared = "shared" in caps
    if not durable and not shared:
        return Subscription(f"tmp.{unique}", durable=False, shared=False)
    name = link_name.split("|", 1)[0] if shared else link_name
    scope = "" if "global" in caps else container_id
    key = f"{scope}#{name}" if durable else f"{scope}#{name}|volatile"
    return Subscription(key, durable=durable, shared=shared)


@dataclass(eq=False)
class WildcardSubscription:
    """A consumer's queue bound to every topic whose name matches ``pattern``."""

    pattern: str
    key: str
    queue: Queue
    topics: list[Topic] = field(default_factory=list)
    durable: bool = False
    """Kept when its link detaches without closing, for the next attach with the same
    container id and link name (as Artemis keeps a durable subscription on a wildcard),
    and over a restart: its queue, ``PATTERN::NAME``, is stored as a topic's durable
    subscription is (:meth:`VirtualHost.pattern_subscription`)."""

    def bind(self, topic: Topic) -> None:
        topic.attach_subscription(self.key, self.queue)
        self.topics.append(topic)


def _matches(pattern: str, name: str) -> bool:
    trie = TopicTrie()
    trie.add(pattern, 0, 0)
    return bool(trie.match(name))


class Wildcards:
    """A virtual host's wildcard subscriptions, bound to topics as they appear."""

    def __init__(self, vhost: VirtualHost) -> None:
        # weak: the registry below is keyed by the vhost, which must stay collectable
        self._vhost = weakref.ref(vhost)
        self.trie = TopicTrie()
        self.durable: dict[str, WildcardSubscription] = {}
        """Durable wildcard subscriptions, by name (container id and link name)."""
        vhost.node_listeners.append(self._created)
        for q in vhost.pattern_subscriptions.values():  # kept by the store over a restart
            pattern, _, key = q.name.partition("::")
            self._add(WildcardSubscription(pattern, f"wildcard.{q.name}", q, durable=True), key)

    @property
    def vhost(self) -> VirtualHost:
        vhost = self._vhost()
        assert vhost is not None
        return vhost

    def subscribe(self, pattern: str, durable_key: str | None = None) -> WildcardSubscription:
        """A subscription to every topic matching ``pattern``: a new one, or (``durable_key``:
        a durable subscription's name) the one kept under that name for the same pattern
        (one kept for another pattern is replaced, as JMS replaces a changed subscription)."""
        if durable_key is not None:
            kept = self.durable.get(durable_key)
            if kept is not None and kept.pattern == pattern and not kept.queue.deleted:
                return kept
            if kept is not None:
                self.unsubscribe(kept)
        if durable_key is None:
            q = self.vhost.create_dynamic()
        else:
            q = self.vhost.pattern_subscription(pattern, durable_key)
        sub = WildcardSubscription(pattern, f"wildcard.{q.name}", q, durable=durable_key is not None)
        self._add(sub, durable_key)
        return sub

    def _add(self, sub: WildcardSubscription, durable_key: str | None) -> None:
        """Register ``sub`` (durable: under its name) and bind it to every topic that matches."""
        if durable_key is not None:
            self.durable[durable_key] = sub
        self.trie.add(sub.pattern, sub.key, sub)
        for topic in _topics(self.vhost.nodes.values()):
            if _matches(sub.pattern, topic.name):
                sub.bind(topic)

    def unsubscribe(self, sub: WildcardSubscription) -> None:
        for name, kept in list(self.durable.items()):
            if kept is sub:
                del self.durable[name]
        self.trie.remove(sub.pattern, sub.key)
        for topic in sub.topics:
            topic.unsubscribe(sub.key)
        sub.topics.clear()
        if sub.durable:
            self.vhost.drop_pattern_subscription(sub.queue)
        else:
            self.vhost.delete_node(sub.queue.name)

    def _created(self, node: Node) -> None:
        if isinstance(node, Topic):
            for sub in self.trie.match(node.name).values():
                sub.bind(node)


def _topics(nodes: Iterable[Node]) -> list[Topic]:
    return [n for n in nodes if isinstance(n, Topic)]


def wildcards_of(vhost: VirtualHost) -> Wildcards:
    """The wildcard subscriptions of ``vhost`` (made on first use; kept by its broker)."""
    registry: weakref.WeakKeyDictionary[VirtualHost, Wildcards] = vhost.broker.shared(
        "amqp1.wildcards", weakref.WeakKeyDictionary
    )
    w = registry.get(vhost)
    if w is None:
        w = registry[vhost] = Wildcards(vhost)
    return w


SUBSCRIPTION_QUESTION = "amqp1.durable-subscription"
"""The question (:attr:`Broker.questions <amqp10.broker.core.Broker.questions>`) for a
durable subscription by its names, of the other workers: ``{"vhost": NAME, "keys": [...]}``,
answered ``[address, key, pattern]`` (:func:`durable_subscription`) by the one that keeps it."""


def durable_subscription(vhost: VirtualHost, keys: Sequence[str]) -> tuple[str, str, bool] | None:
    """The durable subscription ``vhost`` keeps here under the first of ``keys`` it has: its
    topic's name (or its pattern), its key, and whether it is a pattern's (None: none here).
    With several workers it is kept by the worker that owns its name (the look-up of the
    others asks them: :data:`SUBSCRIPTION_QUESTION`)."""
    wildcards = wildcards_of(vhost)
    topics = [n for n in vhost.nodes.values() if isinstance(n, Topic)]
    for key in keys:
        wildcard = wildcards.durable.get(key)
        if wildcard is not None:
            return wildcard.pattern, key, True
        for topic in topics:
            if key in topic.subscriptions:
                return topic.name, key, False
    return None


def answer_subscription_question(broker: Broker, args: Mapping[str, Any], reply: Callable[[Any], None]) -> None:
    """:data:`SUBSCRIPTION_QUESTION`, from another worker: the durable subscription kept here."""
    vhost = broker.vhosts.get(str(args.get("vhost")))
    keys = args.get("keys")
    found = None if vhost is None or not isinstance(keys, list) else durable_subscription(vhost, [str(k) for k in keys])
    reply(None if found is None else list(found))
