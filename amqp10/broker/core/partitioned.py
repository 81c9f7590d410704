"""Partitioned streams: one address, N streams of their own offsets, free of any I/O.

A stream whose policy has ``partitions = N`` (N > 1) is a :class:`PartitionedStream`
at its own address, which only places messages, and N ordinary
:class:`~.streams.Stream` nodes named ``<address>/partition/<K>`` (K from 0, as
:mod:`amqp10.addresses` spells it), which hold them. Each partition has its own offsets from 0, its own retention
and duplicate window, and is read (or written) at its own address by any client,
as any stream is. Publishing to the partitioned address places a message:

- with an ``x-opt-partition-key`` annotation, on partition
  ``crc32(UTF-8 of the key) mod N``: the same key always lands on the same
  partition, in publish order, on every broker and across restarts;
- without one, round robin; a message-id a partition has seen goes back to
  that partition, so a publisher's resend is still caught by its duplicate
  window.

The partitioned address itself cannot be read: a reader names a partition.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

from .message import QueuedMessage
from .nodes import Node, PublishResult
from .queue_policy import QueuePolicy
from .streams import Stream

__all__ = ["PartitionedStream", "partition_of_key"]


def partition_of_key(key: str, partitions: int) -> int:
    """The partition a partition key places a message on: crc32 of its UTF-8, mod ``partitions``."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % partitions


class PartitionedStream(Node):
    """A stream of N partitions (each a :class:`Stream` at its own address); places what is published.

    With several workers it is on every worker (as a 1.0 topic is), and a partition another
    worker owns is its stand-in there: what this worker places on it goes to its owner."""

    kind = "stream"

    def __init__(self, name: str, policy: QueuePolicy, partitions: Sequence[Stream | Node]) -> None:
        super().__init__(name, policy)
        self.partitions = list(partitions)
        self._next = 0  # the round robin's next partition

    @property
    def count(self) -> int:
        """Its messages (with several workers: those of this worker's partitions)."""
        return sum(p.count for p in self.partitions if isinstance(p, Stream))

    def place(self, msg: QueuedMessage) -> Stream | Node:
        """The partition ``msg`` goes to (by its key, else where its id went, else round robin)."""
        n = len(self.partitions)
        key = msg.partition_key()
        if key is not None:
            return self.partitions[partition_of_key(key, n)]
        if msg.message_id is not None:
            for p in self.partitions:
                if isinstance(p, Stream) and msg.message_id in p.dedup:  # (one of this worker's)
                    return p
        k, self._next = self._next, (self._next + 1) % n
        return self.partitions[k]

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        self.stats.enqueued += 1
        return self.place(msg).publish(msg, on_stored)

    def info(self) -> dict[str, int]:
        """Totals over the partitions; each partition's own offsets are at its own address."""
        return {
            "partitions": len(self.partitions),
            "count": self.count,
            "bytes": sum(p.bytes for p in self.partitions if isinstance(p, Stream)),
        }

    def delete(self) -> None:
        self.deleted = True
