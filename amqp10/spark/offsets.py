"""Stream offsets per partition: Spark's offset JSON, where reads start and end, how a batch is split.

A stream of one partition is read at its address; a partitioned stream's
partition K at ``<address>/partition/K`` (see :mod:`amqp10.addresses`).
Spark keeps a stream's offset as Kafka's source does, the next offset of each
partition: ``{"<address>": {"0": 120, "1": 98}}``. The first versions of the
connector kept ``{"offset": N}`` (one partition); such a checkpoint still reads.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from pyspark.sql.datasource import InputPartition

from ..addresses import partition_address
from .options import OptionError, SourceOptions, StartSpec

__all__ = [
    "OffsetRange",
    "PartitionOffsets",
    "StreamInfo",
    "address_of",
    "end_offsets",
    "from_spark",
    "lag",
    "plan_ranges",
    "share_limit",
    "start_specs",
    "to_spark",
]

StreamInfo = dict[str, int]
"""``{"first": oldest retained offset, "next": offset of the next message, "count", "bytes"}``."""

PartitionOffsets: TypeAlias = dict[int, int]
"""The next offset to read of each partition, by partition number."""


class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of partition ``partition`` of a stream, read at ``address``."""

    def __init__(self, address: str, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.address = address
        self.partition = partition
        self.start = start
        self.end = end


def address_of(address: str, partition: int, partitions: int) -> str:
    """Where partition ``partition`` of the stream at ``address`` (of ``partitions``) is read."""
    return address if partitions == 1 else partition_address(address, partition)


def to_spark(address: str, offsets: Mapping[int, int]) -> dict[str, Any]:
    """``offsets`` as Spark keeps them: ``{"<address>": {"<partition>": offset}}``."""
    return {address: {str(k): int(offsets[k]) for k in sorted(offsets)}}


def from_spark(offset: Mapping[str, Any]) -> PartitionOffsets:
    """The offsets in a Spark offset of :func:`to_spark` (or the first versions' ``{"offset": N}``)."""
    if set(offset) == {"offset"}:
        return {0: int(offset["offset"])}
    ((_address, partitions),) = offset.items()
    return {int(k): int(v) for k, v in partitions.items()}


def _spec_for(
    value: Any, partition: int, partitions: int, default: Any, name: str, address: str
) -> Any:
    """One partition's value of option ``name`` (``value``: one for all, or a dict by partition)."""
    if value is None:
        return default
    if isinstance(value, dict):
        beyond = sorted(k for k in value if k >= partitions)
        if beyond:
            raise OptionError(
                f"option {name!r} names partition {beyond[0]}, but {address!r} has "
                f"{partitions} (0 to {partitions - 1})"
            )
        return value.get(partition, default)
    if isinstance(value, int) and partitions > 1:
        raise OptionError(
            f"option {name!r}: {address!r} has {partitions} partitions, so a single offset is "
            f'ambiguous: give one per partition, {{"{address}": {{"0": N, "1": M, ...}}}}'
        )
    return value


def start_specs(options: SourceOptions, default: StartSpec, partitions: int) -> list[StartSpec]:
    """Each partition's ``startingOffsets`` (``default`` where the option says nothing)."""
    return [
        _spec_for(
            options.starting_offset, k, partitions, default, "startingOffsets", options.address
        )
        for k in range(partitions)
    ]


def end_offsets(options: SourceOptions, infos: Sequence[StreamInfo]) -> PartitionOffsets:
    """Each partition's exclusive end for a batch read: ``endingOffsets``, at most its end now."""
    n = len(infos)
    out = {}
    for k, info in enumerate(infos):
        end = _spec_for(options.ending_offset, k, n, None, "endingOffsets", options.address)
        out[k] = info["next"] if end is None else min(int(end), info["next"])
    return out


def share_limit(available: Mapping[int, int], most: int) -> dict[int, int]:
    """``most`` offsets shared among partitions in proportion to what each has available.

    Every partition with something available gets its share rounded down, and
    the offsets left over go one each to the partitions whose share lost the most
    to rounding.
    """
    total = sum(available.values())
    if total <= most:
        return dict(available)
    share = {k: available[k] * most // total for k in available}
    left = most - sum(share.values())
    for k in sorted(available, key=lambda k: (-(available[k] * most % total), k))[:left]:
        share[k] += 1
    return share


def plan_ranges(
    address: str,
    partitions: int,
    start: Mapping[int, int],
    end: Mapping[int, int],
    size: int,
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """The Spark partitions of a batch: each stream partition's ``[start, end)``, split.

    A range is split into pieces of at most ``size`` offsets, and further (as
    Kafka's ``minPartitions``), in proportion to its share of the batch, so
    that there are at least ``min_partitions`` pieces.
    """
    spans = {k: (start.get(k, 0), end.get(k, 0)) for k in range(partitions)}
    spans = {k: (a, b) for k, (a, b) in spans.items() if b > a}
    total = sum(b - a for a, b in spans.values())
    out: list[OffsetRange] = []
    for k, (a, b) in sorted(spans.items()):
        pieces = math.ceil((b - a) / size)
        if min_partitions is not None:
            pieces = max(pieces, math.ceil((b - a) * min_partitions / total))
        pieces = min(pieces, b - a)
        where = address_of(address, k, partitions)
        cuts = [a + (b - a) * i // pieces for i in range(pieces + 1)]
        out += [OffsetRange(where, k, lo, hi) for lo, hi in itertools.pairwise(cuts)]
    return out


def lag(progress: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """How far each ``amqp10`` stream source of a query progress is behind, by partition.

    ``progress``: ``query.lastProgress`` (or one of ``query.recentProgress``).
    A partition's lag is its ``latestOffset`` (the stream's end when the batch
    was planned) minus its ``endOffset`` (where the batch read up to): the
    messages the query had yet to read. Sources that are not streams of this
    connector are left out.
    """
    out: dict[str, dict[str, int]] = {}
    for source in progress.get("sources") or []:
        end, latest = _as_dict(source.get("endOffset")), _as_dict(source.get("latestOffset"))
        if not (isinstance(end, dict) and isinstance(latest, dict)) or len(latest) != 1:
            continue
        ((address, newest),) = latest.items()
        read = end.get(address)
        if isinstance(newest, dict) and isinstance(read, dict):
            out[address] = {k: max(int(v) - int(read.get(k, 0)), 0) for k, v in newest.items()}
    return out


def _as_dict(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value
