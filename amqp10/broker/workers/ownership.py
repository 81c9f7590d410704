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
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core import Node
    from .remote import RemoteNode, RemoteNodes

__all__ = ["Ownership", "Placement", "spread"]


def spread(h: int) -> int:
    """MurmurHash3's 32-bit finaliser: every bit of ``h`` reaches every bit of the result."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


class Ownership:
    """The owner of each node, as seen from worker ``me`` of ``workers``."""

    __slots__ = ("_overrides", "me", "workers")

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

    def owner(self, vhost: str, name: str) -> int:
        """The worker that owns node ``name`` of virtual host ``vhost``."""
        if self.workers == 1:
            return 0
        placed = self._overrides.get((vhost, name))
        if placed is not None:
            return placed
        return spread(zlib.crc32(f"{vhost}\x00{name}".encode())) % self.workers

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
        return [self.links[k].node(vhost, name) for k in sorted(self.links)]

    def __call__(self, vhost: str, name: str) -> RemoteNode | None:
        owner = self.ownership.owner(vhost, name)
        if owner == self.ownership.me:
            return None
        return self.links[owner].node(vhost, name)
