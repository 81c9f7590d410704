"""Which worker owns a node: a stable hash of its virtual host and name, unless overridden.

Every worker computes the same answer from the same inputs (the number of workers and the
override table), so no worker asks another where a node lives. The hash is CRC-32 (stable
across processes and Python runs, unlike :func:`hash` of a str), mixed by MurmurHash3's
32-bit finaliser before it is taken mod N: CRC-32 is linear, and its low bits do not see
the low bits of a name's last character, so ``q0``..``q3`` all had one owner of 2 (and
``q0``, ``q2`` one of 4); mixed, they spread as random names do. With one worker every
node is local and nothing else is consulted: the front ends' path is exactly that of a
broker without workers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core import Node
    from .remote import RemoteNode, RemoteNodes

__all__ = ["DYNAMIC_PREFIX", "REPLY_PREFIX", "Ownership", "Placement", "dynamic_prefix", "reply_prefix", "spread"]

DYNAMIC_PREFIX = "amqp10.dynamic.w"
"""What the name of a dynamic node made by a worker starts with, before that worker's number
(:func:`dynamic_prefix`): it is placed on the worker of the connection that asked for it,
and every worker reads the owner from the name (no override to wait for)."""


def dynamic_prefix(worker: int) -> str:
    """What the names of worker ``worker``'s dynamic nodes start with
    (:attr:`Broker.dynamic_prefix <amqp10.broker.core.Broker.dynamic_prefix>`)."""
    return f"{DYNAMIC_PREFIX}{worker}."


REPLY_PREFIX = "amq.rabbitmq.reply-to.w"
"""What a direct reply-to address registered on a worker starts with, before that worker's
number (:func:`reply_prefix`): a reply published on any worker goes to the requester's."""


def reply_prefix(worker: int) -> str:
    """What the reply addresses of worker ``worker``'s requesters start with
    (:attr:`DirectReplies.prefix <amqp10.broker.core.replies.DirectReplies.prefix>`)."""
    return f"{REPLY_PREFIX}{worker}."


HASHED_LIMIT = 65536
"""Names whose owner :class:`Ownership` keeps worked out (then it starts again)."""


def _named_owner(name: str) -> int | None:
    """The worker a dynamic node's name or a reply address names (None: not such a name)."""
    for prefix in (DYNAMIC_PREFIX, REPLY_PREFIX):
        if name.startswith(prefix):
            number = name[len(prefix) :].partition(".")[0]
            return int(number) if number.isdigit() else None
    return None


def _nothing() -> None:
    pass


def spread(h: int) -> int:
    """MurmurHash3's 32-bit finaliser: every bit of ``h`` reaches every bit of the result."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


class Ownership:
    """The owner of each node, as seen from worker ``me`` of ``workers``."""

    __slots__ = ("_hashed", "_overrides", "changed", "me", "workers")

    def __init__(self, workers: int, me: int = 0, overrides: Mapping[tuple[str, str], int] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if not 0 <= me < workers:
            raise ValueError(f"worker {me} is not one of {workers}")
        table = dict(overrides or {})
        for (vhost, name), owner in table.items():
            if not 0 <= owner < workers:
                raise ValueError(f"node {name!r} of vhost {vhost!r} is placed on worker {owner}, not one of {workers}")
        self.workers = workers
        self.me = me
        self._overrides = table
        self._hashed: dict[tuple[str, str], int] = {}
        """What the name says or its hash gives, by (vhost, name), as asked: a publish asks
        for its queue's owner every message. A function of the name and ``workers`` only
        (overrides are looked up first), so never stale; emptied at :data:`HASHED_LIMIT`."""
        self.changed: Callable[[], None] = _nothing
        """Called after each change of the override table (:meth:`place`, :meth:`unplace`,
        :meth:`unplace_worker`, :meth:`replace`): what keeps its answers forgets them
        (:meth:`Broker.placement_changed <amqp10.broker.core.Broker.placement_changed>`)."""

    def owner(self, vhost: str, name: str) -> int:
        """The worker that owns node ``name`` of virtual host ``vhost``."""
        if self.workers == 1:
            return 0
        key = (vhost, name)
        placed = self._overrides.get(key)
        if placed is not None:
            return placed
        owner = self._hashed.get(key)
        if owner is None:
            named = _named_owner(name)
            if named is not None and named < self.workers:
                owner = named
            else:
                owner = spread(zlib.crc32(f"{vhost}\x00{name}".encode())) % self.workers
            if len(self._hashed) >= HASHED_LIMIT:
                self._hashed.clear()
            self._hashed[key] = owner
        return owner

    def placed_on(self, vhost: str, name: str) -> int | None:
        """The worker node ``name`` is placed on by an override (None: its name says)."""
        return self._overrides.get((vhost, name))

    def place(self, vhost: str, name: str, owner: int) -> None:
        """Node ``name`` of ``vhost`` is owned by worker ``owner`` whatever its hash says (an
        exclusive queue, made on its connection's worker: the metadata's ``place``)."""
        if 0 <= owner < self.workers:
            self._overrides[(vhost, name)] = owner
            self.changed()

    def unplace(self, vhost: str, name: str) -> None:
        """Node ``name`` of ``vhost`` is owned by its hash's worker again (it was deleted)."""
        if self._overrides.pop((vhost, name), None) is not None:
            self.changed()

    def unplace_worker(self, worker: int) -> None:
        """Worker ``worker`` ended: the nodes placed on it went with it."""
        gone = [key for key, owner in self._overrides.items() if owner == worker]
        for key in gone:
            del self._overrides[key]
        if gone:
            self.changed()

    def owners(self) -> set[int]:
        """The workers that some override places a node on."""
        return set(self._overrides.values())

    def placed(self) -> list[list[Any]]:
        """The override table, as ``[vhost, name, owner]`` rows (for :meth:`replace`)."""
        return [[vhost, name, owner] for (vhost, name), owner in sorted(self._overrides.items())]

    def replace(self, rows: list[list[Any]]) -> None:
        """The override table is ``rows`` (:meth:`placed`'s), nothing else."""
        self._overrides.clear()
        for vhost, name, owner in rows:
            self.place(str(vhost), str(name), int(owner))
        self.changed()

    def is_local(self, vhost: str, name: str) -> bool:
        """Whether this worker owns the node (always, with one worker)."""
        return self.workers == 1 or self.owner(vhost, name) == self.me


class Placement:
    """What :attr:`Broker.placement <amqp10.broker.core.Broker.placement>` asks: for a node
    another worker owns, its stand-in (a :class:`~.remote.RemoteNode` on the internal link
    to that worker); None for a node of this worker's.

    ``links`` maps each other worker to the opening side of this worker's internal link to
    it (:class:`~.remote.RemoteNodes`). With one worker a broker has no placement at all."""

    def __init__(self, ownership: Ownership, links: Mapping[int, RemoteNodes]) -> None:
        missing = set(range(ownership.workers)) - {ownership.me} - set(links)
        if missing:
            raise ValueError(f"no internal link to worker(s) {sorted(missing)}")
        self.ownership = ownership
        self.links = links

    def copies(self, vhost: str, name: str) -> list[Node]:
        """The stand-ins for node ``name`` on every other worker (of a node every worker has
        a copy of: a 1.0 topic), whoever owns the name."""
        copies = [self.links[k].node(vhost, name) for k in sorted(self.links)]
        for copy in copies:
            copy.topic_copy = True  # (the owner makes its copy if the metadata did not yet)
        return list(copies)

    def __call__(self, vhost: str, name: str) -> RemoteNode | None:
        owner = self.ownership.owner(vhost, name)
        if owner == self.ownership.me:
            return None
        return self.links[owner].node(vhost, name)
