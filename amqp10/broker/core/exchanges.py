"""Exchanges and bindings: the AMQ model's routing (direct, fanout, topic, headers).

An :class:`Exchange` matches a message against its bindings and returns the
bound destinations (queues, streams, other exchanges); the virtual host walks
exchange-to-exchange bindings and alternate exchanges
(:meth:`~amqp10.broker.core.vhost.VirtualHost.route`). An exchange is also a
:class:`~amqp10.broker.core.nodes.Node`, so a front end can publish to it
like to a queue: the routing key is then read from the message (1.0:
``subject``), and only by the exchange types that need one.

Routing keys and binding keys are matched as RabbitMQ does: a topic key is a
list of ``.``-separated words (the empty key has none, ``a..b`` has an empty
middle word); in a binding ``*`` stands for exactly one word and ``#`` for zero
or more. Topic bindings live in a trie of words, not a regular expression per
binding. Headers bindings use ``x-match`` = ``all`` (default), ``any``,
``all-with-x`` or ``any-with-x`` (the ``-with-x`` forms also compare the
binding's ``x-`` arguments).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

from .message import QueuedMessage
from .nodes import Consumer, Node, NodeElsewhere, PublishResult, Refused
from .queue_policy import QueuePolicy
from .queues import Queue
from .streams import Stream

Destination: TypeAlias = "Exchange | Queue | Stream | NodeElsewhere"
"""Where a binding routes to."""

__all__ = [
    "EXCHANGE_TYPES",
    "Binding",
    "Destination",
    "DirectExchange",
    "Exchange",
    "ExchangeType",
    "FanoutExchange",
    "HeadersExchange",
    "Topic",
    "TopicExchange",
    "TopicTrie",
    "make_exchange",
    "routing_key_of",
    "split_topic",
]

ExchangeType = Literal["direct", "fanout", "topic", "headers", "x-local-random"]
EXCHANGE_TYPES: tuple[ExchangeType, ...] = ("direct", "fanout", "topic", "headers", "x-local-random")


def args_key(arguments: Mapping[str, Any] | None) -> str:
    """A canonical text of binding arguments (bindings that differ only in order are one)."""
    if not arguments:
        return ""
    return json.dumps(dict(arguments), sort_keys=True, default=repr)


class Binding:
    """A route from an exchange to a destination, with a key and arguments."""

    __slots__ = ("arguments", "destination", "key", "source")

    def __init__(self, source: Exchange, destination: Destination, key: str, arguments: Mapping[str, Any] | None = None) -> None:
        self.source = source
        self.destination = destination
        self.key = key
        self.arguments: dict[str, Any] = dict(arguments or {})

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """What makes two bindings the same: destination kind and name, key, arguments."""
        d = self.destination
        kind = "exchange" if isinstance(d, Exchange) else "queue"
        return (kind, d.name, self.key, args_key(self.arguments))

    def __repr__(self) -> str:
        return f"Binding({self.source.name!r} -> {self.destination.name!r}, key={self.key!r}, args={self.arguments!r})"


RouteFn = Callable[["Exchange", QueuedMessage, "str | None", Callable[[], None], "Refused | None"], PublishResult]
""":meth:`VirtualHost.route <.vhost.VirtualHost.route>`: (exchange, message, key, on_stored, on_refused)."""


class Exchange(Node):
    """An exchange: routes each message to the destinations its bindings match.

    ``router`` is the virtual host's :meth:`route` (which follows
    exchange-to-exchange bindings and the alternate exchange).
    """

    kind = "exchange"
    type: ExchangeType = "direct"
    uses_key = True
    """Whether matching looks at the routing key (a fanout exchange does not)."""

    def __init__(
        self,
        name: str,
        *,
        router: RouteFn | None = None,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        alternate: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        policy: QueuePolicy | None = None,
    ) -> None:
        super().__init__(name, policy or QueuePolicy())
        self.router = router
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.alternate = alternate
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.bindings: dict[tuple[str, str, str, str], Binding] = {}
        self._by_destination: dict[int, dict[tuple[str, str, str, str], Binding]] = {}
        self._init_index()

    def _init_index(self) -> None:
        """A type's own state, set up last by :meth:`__init__` (a subclass has no
        ``__init__(name, **kw)`` passing keywords on: the compiled build miscompiles that)."""

    # -- bindings --------------------------------------------------------------------------
    def bind(self, binding: Binding) -> bool:
        """Add ``binding``; False if the same binding exists."""
        ident = binding.identity
        if ident in self.bindings:
            return False
        self._index(binding)
        self.bindings[ident] = binding
        self._by_destination.setdefault(id(binding.destination), {})[ident] = binding
        return True

    def unbind(self, ident: tuple[str, str, str, str]) -> Binding | None:
        """Remove the binding with ``ident`` (see :attr:`Binding.identity`)."""
        binding = self.bindings.pop(ident, None)
        if binding is not None:
            self._unindex(binding)
            mine = self._by_destination.get(id(binding.destination))
            if mine is not None:
                mine.pop(ident, None)
                if not mine:
                    del self._by_destination[id(binding.destination)]
        return binding

    def bindings_to(self, destination: Destination) -> list[Binding]:
        """Its bindings to ``destination`` (without a scan of the others)."""
        return list(self._by_destination.get(id(destination), {}).values())

    def _index(self, binding: Binding) -> None:
        raise NotImplementedError

    def _unindex(self, binding: Binding) -> None:
        raise NotImplementedError

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        """The destinations of ``msg`` (``key`` None: read it from the message if needed)."""
        raise NotImplementedError

    # -- as a node: a publisher's target ----------------------------------------------------
    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        """Route ``msg`` with the routing key it carries (see :meth:`VirtualHost.route`)."""
        return self.publish_answered(msg, on_stored, None)

    def publish_answered(
        self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused | None
    ) -> PublishResult:
        """:meth:`publish`, with ``on_refused`` told (None: ``on_stored`` is) if a queue on
        another worker did not take it after all (:meth:`VirtualHost.route <.vhost.VirtualHost.route>`)."""
        if self.router is None:
            return PublishResult.UNROUTABLE
        return self.router(self, msg, None, on_stored, on_refused)

    def add_consumer(self, consumer: Consumer) -> None:
        raise TypeError("an exchange has no consumers: consume from a queue bound to it")

    def remove_consumer(self, consumer: Consumer) -> None:
        raise TypeError("an exchange has no consumers")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self.bindings)} bindings)"


def routing_key_of(msg: QueuedMessage, key: str | None) -> str:
    """The key ``msg`` routes by: ``key`` if given, else its subject ("" if none)."""
    if key is not None:
        return key
    return msg.routing.subject or ""


class DirectExchange(Exchange):
    """Routes to the bindings whose key equals the routing key."""

    type = "direct"

    def _init_index(self) -> None:
        self._by_key: dict[str, dict[tuple[str, str, str, str], Destination]] = {}

    def _index(self, binding: Binding) -> None:
        self._by_key.setdefault(binding.key, {})[binding.identity] = binding.destination

    def _unindex(self, binding: Binding) -> None:
        dests = self._by_key.get(binding.key)
        if dests is not None:
            dests.pop(binding.identity, None)
            if not dests:
                del self._by_key[binding.key]

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        dests = self._by_key.get(routing_key_of(msg, key))
        return dests.values() if dests else ()


class FanoutExchange(Exchange):
    """Routes to every binding, whatever the key."""

    type = "fanout"
    uses_key = False

    def _index(self, binding: Binding) -> None:
        pass

    def _unindex(self, binding: Binding) -> None:
        pass

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        return [b.destination for b in self.bindings.values()]


class LocalRandomExchange(Exchange):
    """RabbitMQ 4's ``x-local-random``: each message to one of the bound queues, chosen at
    random (every queue is local on one node), whatever the key.

    As RabbitMQ's ``rabbit_exchange_type_local_random`` validates a binding: its key must
    be empty and its destination a queue (not a stream, not an exchange)."""

    type = "x-local-random"
    uses_key = False

    def _init_index(self) -> None:
        self._random = random.Random()

    def _index(self, binding: Binding) -> None:
        if binding.key:
            raise ValueError(f"Non empty binding '{binding.key}' key not permitted")
        dest = binding.destination
        # (a queue another worker owns is its stand-in here: the binding's check found its record)
        if not isinstance(dest, (Queue, NodeElsewhere)):
            kind = "exchange" if isinstance(dest, Exchange) else dest.kind
            raise ValueError(f"{kind} {dest.name!r} not valid for this exchange type: bind a queue")

    def _unindex(self, binding: Binding) -> None:
        pass

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        dests = [b.destination for b in self.bindings.values()]
        return [self._random.choice(dests)] if dests else ()


def split_topic(key: str) -> list[str]:
    """The words of a topic key: ``""`` has none, ``"a..b"`` three (the middle one empty)."""
    return key.split(".") if key else []


class _TrieNode:
    __slots__ = ("children", "hash", "star", "values")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.star: _TrieNode | None = None
        self.hash: _TrieNode | None = None
        self.values: dict[Any, Any] = {}

    def empty(self) -> bool:
        return not (self.children or self.star or self.hash or self.values)


def is_pattern(name: str) -> bool:
    """Whether a topic name is a pattern (a ``*`` or ``#`` word) rather than a topic's name."""
    return any(word in ("*", "#") for word in name.split("."))


class TopicTrie:
    """Topic binding keys in a trie of words: matching costs the key's length, not the bindings'."""

    def __init__(self) -> None:
        self.root = _TrieNode()

    def add(self, pattern: str, ident: Any, value: Any) -> None:
        node = self.root
        for word in split_topic(pattern):
            node = self._child(node, word)
        node.values[ident] = value

    @staticmethod
    def _child(node: _TrieNode, word: str) -> _TrieNode:
        if word == "*":
            if node.star is None:
                node.star = _TrieNode()
            return node.star
        if word == "#":
            if node.hash is None:
                node.hash = _TrieNode()
            return node.hash
        child = node.children.get(word)
        if child is None:
            child = node.children[word] = _TrieNode()
        return child

    def remove(self, pattern: str, ident: Any) -> None:
        path: list[tuple[_TrieNode, str]] = []
        node: _TrieNode | None = self.root
        for word in split_topic(pattern):
            assert node is not None
            nxt = node.star if word == "*" else node.hash if word == "#" else node.children.get(word)
            if nxt is None:
                return
            path.append((node, word))
            node = nxt
        assert node is not None
        node.values.pop(ident, None)
        # prune the branch of nodes left empty
        for parent, word in reversed(path):
            child = parent.star if word == "*" else parent.hash if word == "#" else parent.children[word]
            if child is None or not child.empty():
                break
            if word == "*":
                parent.star = None
            elif word == "#":
                parent.hash = None
            else:
                del parent.children[word]

    def match(self, key: str) -> dict[Any, Any]:
        """Every (ident, value) whose pattern matches ``key``."""
        words = split_topic(key)
        found: dict[Any, Any] = {}
        n = len(words)
        seen: set[tuple[int, int]] = set()  # (id(node), position): '#' can reach a state twice
        stack: list[tuple[_TrieNode, int]] = [(self.root, 0)]
        while stack:
            node, i = stack.pop()
            state = (id(node), i)
            if state in seen:
                continue
            seen.add(state)
            if node.hash is not None:
                # '#' takes zero or more words: continue from every later position
                h = node.hash
                for j in range(i, n + 1):
                    stack.append((h, j))
            if i == n:
                if node.values:
                    found.update(node.values)
                continue
            word = words[i]
            child = node.children.get(word)
            if child is not None:
                stack.append((child, i + 1))
            if node.star is not None:
                stack.append((node.star, i + 1))
        return found


class TopicExchange(Exchange):
    """Routes by pattern: ``*`` one word, ``#`` zero or more (RabbitMQ's topic exchange)."""

    type = "topic"

    def _init_index(self) -> None:
        self.trie = TopicTrie()

    def _index(self, binding: Binding) -> None:
        self.trie.add(binding.key, binding.identity, binding.destination)

    def _unindex(self, binding: Binding) -> None:
        self.trie.remove(binding.key, binding.identity)

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        return self.trie.match(routing_key_of(msg, key)).values()


_X_MATCH = ("all", "any", "all-with-x", "any-with-x")


def headers_match(arguments: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    """Whether message ``headers`` satisfy a headers binding's ``arguments``.

    A binding argument whose value is None matches the header's presence alone.
    """
    mode = str(arguments.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    any_ = mode.startswith("any")
    for k, v in arguments.items():
        if k == "x-match" or (not with_x and k.startswith("x-")):
            continue
        ok = k in headers and (v is None or headers[k] == v)
        if any_ and ok:
            return True
        if not any_ and not ok:
            return False
    return not any_  # all: nothing failed; any: nothing matched


class HeadersExchange(Exchange):
    """Routes by message headers (1.0 application-properties) against binding arguments."""

    type = "headers"
    uses_key = False

    def _index(self, binding: Binding) -> None:
        mode = binding.arguments.get("x-match", "all")
        if mode not in _X_MATCH:
            raise ValueError(f"x-match must be one of {', '.join(_X_MATCH)}, not {mode!r}")

    def _unindex(self, binding: Binding) -> None:
        pass

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        if not self.bindings:
            return ()
        headers = msg.headers
        return [b.destination for b in self.bindings.values() if headers_match(b.arguments, headers)]


class Topic(FanoutExchange):
    """A 1.0 topic: a fanout exchange whose subscribers each get a bound queue of their own.

    1.0 clients see the node they always saw (attach to its name, publish, and
    subscribe with a receiver); underneath, each subscription is a queue bound
    to this exchange, which ``make_queue`` creates (durable or not).
    """

    kind = "topic"

    def __init__(self, name: str, policy: QueuePolicy, *, make_queue: Callable[[str, bool], Queue], router: RouteFn | None = None) -> None:
        super().__init__(name, router=router, policy=policy)
        self.make_queue = make_queue
        self.subscriptions: dict[str, Queue] = {}
        self.copies: list[Node] = []
        """With several workers a topic is on every worker, each copy holding that worker's
        subscriptions: the stand-ins for its copies on the others. A message published here
        goes to each as to a bound queue (so the publisher's outcome waits for every copy
        that took it); one a copy sent goes to this worker's subscriptions only
        (:meth:`publish_here`). Empty with one worker."""

    def subscribe(self, key: str, *, durable: bool) -> Queue:
        """The subscription queue for ``key`` (created, and bound, on first use)."""
        q = self.subscriptions.get(key)
        if q is None:
            q = self.make_queue(key, durable)
            self.attach_subscription(key, q)
        return q

    def attach_subscription(self, key: str, q: Queue) -> None:
        """Bind an existing subscription queue (one recovered from the store)."""
        self.subscriptions[key] = q
        self.bind(Binding(self, q, ""))

    def unsubscribe(self, key: str) -> Queue | None:
        q = self.subscriptions.pop(key, None)
        if q is not None:
            for b in self.bindings_to(q):
                self.unbind(b.identity)
        return q

    def match(self, msg: QueuedMessage, key: str | None) -> Iterable[Destination]:
        found = [b.destination for b in self.bindings.values()]
        if self.copies:
            found.extend(self.copies)  # type: ignore[arg-type]  # (stand-ins: NodeElsewhere)
        return found

    def publish_here(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        """A message this topic's copy on another worker sent: to this worker's subscriptions
        only (not on to the copies again)."""
        copies, self.copies = self.copies, []
        try:
            return self.publish(msg, on_stored)
        finally:
            self.copies = copies

    def can_accept(self, size: int = 0) -> bool:
        return all(q.can_accept(size) for q in self.subscriptions.values())

    def room(self) -> int | None:
        rooms = [r for r in (q.room() for q in self.subscriptions.values()) if r is not None]
        return min(rooms) if rooms else None

    @property
    def answers_later(self) -> bool:  # type: ignore[override]
        """With copies on other workers, a publish may be refused after it returned (a copy's
        worker down longer than the bound): a front end whose outcome can wait says so."""
        return bool(self.copies)

    def publish_answered(self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused | None) -> PublishResult:
        """Copy ``msg`` to every subscription (with none, it is accepted and dropped), with
        ``on_refused`` told (None: the publish counts as done) if a copy on another worker
        was not taken after all."""
        self.stats.enqueued += 1
        if super().publish_answered(msg, on_stored, on_refused) is not PublishResult.TAKEN:
            self.stats.dropped += 1
            on_stored()
        return PublishResult.TAKEN


_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    "x-local-random": LocalRandomExchange,
}


def make_exchange(type_: str, name: str, **kw: Any) -> Exchange:
    """An exchange of ``type_`` (direct, fanout, topic, headers, x-local-random)."""
    cls = _TYPES.get(type_)
    if cls is None:
        raise ValueError(f"unknown exchange type {type_!r}: use {', '.join(EXCHANGE_TYPES)}")
    return cls(name, **kw)
