"""Reading broker nodes from Spark: batch reads, and streaming reads of streams and queues.

Who runs what (pyspark 4's Python data sources):

- ``reader()``/``streamReader()`` build reader objects that Spark pickles to its
  executors, so no reader opens a connection before it is used, and none keeps
  one when pickled.
- The driver keeps one :class:`AMQPStreamReader` alive per query (in Spark's
  Python "streaming source runner"): it answers ``initialOffset``,
  ``latestOffset``, ``partitions`` and ``commit``.
- ``read(partition)`` runs on an executor, with its own connection.

A *stream* is read by offset: a micro-batch is an offset range ``[start,
end)`` per stream partition (see :mod:`.offsets`), split into Spark partitions
that each read exactly their range through a ``amqp10:stream-offset`` filter.
A replayed micro-batch reads the same ranges, so a query into an idempotent
sink gets every message exactly once. The query's progress shows each
partition's offsets (``startOffset``, ``endOffset``, and the stream's end as
``latestOffset``); :func:`.offsets.lag` gives the difference.

A *queue* has no offsets to replay from, so it is read at least once: the
driver's reader takes messages without settling them, records each batch's
messages in a file under ``stateDir``, hands them to the executors inside the
partitions, and accepts them only once Spark is done with the batch. If the
driver dies, its connection drops and the broker puts every unaccepted message
back on the queue.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, TypeAlias

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .. import errors
from ..client import Delivery, Receiver
from ..collector import gc_paused
from ._client import CHUNK, BrokerClient, read_range
from .batches import Chunk, build_batch, is_variant_map, reading, variant_map
from .offsets import (
    OffsetRange,
    PartitionOffsets,
    StreamInfo,
    address_of,
    end_offsets,
    from_spark,
    plan_ranges,
    share_limit,
    start_specs,
    to_spark,
)
from .options import OptionError, SourceOptions, StartSpec
from .rows import choose_columns, column_types

__all__ = [
    "AMQPBatchReader",
    "AMQPDataSource",
    "AMQPStreamReader",
    "BrowsePartition",
    "HeldPartition",
    "OffsetRange",
    "QUEUE_BATCH_CAP",
]

log = logging.getLogger("amqp10.spark")

SparkOffset: TypeAlias = dict[str, Any]
"""An offset as Spark keeps it in its checkpoint (JSON): ``{"<address>": {"0": N, ...}}`` for a
stream (:func:`.offsets.to_spark`), ``{"offset": N}`` for a queue."""

QUEUE_BATCH_CAP = 100_000
"""Most messages one micro-batch takes from a queue when Spark sets no read limit."""


# -- partitions -----------------------------------------------------------------------------
class BrowsePartition(InputPartition):
    """A queue's current messages, copied (browsed) without taking them."""

    def __init__(self) -> None:
        super().__init__(None)


class HeldPartition(InputPartition):
    """Messages the driver took from a queue and holds unsettled: their encoded bytes."""

    def __init__(self, payloads: list[bytes]) -> None:
        super().__init__(len(payloads))
        self.payloads = payloads


class ReadPlan:
    """What a read produces: the columns (a Spark schema) and how map values are typed.

    Pickled to the executors with the reader; the Arrow schema is made there,
    by pyspark's own conversion, so the batches match what Spark expects.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._arrow: Any = None

    def arrow_schema(self) -> Any:
        if self._arrow is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            self._arrow = to_arrow_schema(self.schema, timezone="UTC")
        return self._arrow

    def __getstate__(self) -> dict[str, object]:
        return {"options": self.options, "schema": self.schema, "_arrow": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self.schema = state["schema"]
        self._arrow = None

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The messages of ``partition`` as ``pyarrow.RecordBatch`` es."""
        schema = self.arrow_schema()
        variant = variant_map() if any(is_variant_map(f.type) for f in schema) else None
        rows, open_item, offset_of = reading(schema)
        chunks = _chunks(self.options, partition, open_item, offset_of)
        try:
            while True:
                with gc_paused():  # a chunk's decoding and batch (not Spark's part): a quarter less
                    chunk = next(chunks, None)
                    if chunk is None:
                        return
                    batch = build_batch(schema, chunk, variant, rows=rows) if len(chunk) else None
                if batch is not None:
                    yield batch
        finally:
            chunks.close()  # its connection, now, if Spark stops reading early


def _chunks(
    options: SourceOptions,
    partition: InputPartition,
    open_item: Callable[[bytes], Any],
    offset_of: Callable[[Any], int | None],
) -> Generator[Chunk]:
    """The messages of one partition, a chunk at a time (runs on an executor), each
    opened by ``open_item`` (see :func:`.batches.reading`)."""
    address = options.address
    if isinstance(partition, HeldPartition):
        for i in range(0, len(partition.payloads), CHUNK):
            part = partition.payloads[i : i + CHUNK]
            yield Chunk(address, None, [None] * len(part), [open_item(p) for p in part])
        return
    if isinstance(partition, OffsetRange):
        with BrokerClient(options) as client:
            for offsets, messages in read_range(
                client,
                partition.address,
                partition.start,
                partition.end,
                fail_on_data_loss=options.fail_on_data_loss,
                open_item=open_item,
                offset_of=offset_of,
            ):
                yield Chunk(address, partition.partition, offsets, messages)
        return
    if isinstance(partition, BrowsePartition):
        with BrokerClient(options) as client:
            receiver = client.open_queue(address, browse=True)
            while True:
                batch = client.drain(receiver, CHUNK)
                yield Chunk(
                    address,
                    None,
                    [None] * len(batch),
                    [open_item(d.payload) for d in batch],
                )
                if len(batch) < CHUNK:
                    break
            client.close_link(receiver)
        return
    # an empty plan: Spark reads one partition with no value


def read_schema(options: SourceOptions, given: StructType | None = None) -> StructType | str:
    """The schema a read produces: by ``legacySchema``, ``mapValues`` and ``columns``, or ``given``.

    Raises :class:`OptionError` for a column that does not exist (or has the wrong type).
    """
    offered = column_types(
        legacy=options.legacy_schema, variant_maps=options.map_values == "variant"
    )
    try:
        if given is not None:
            choose_columns(offered, None, {f.name: f.dataType.simpleString() for f in given.fields})
            return given
        chosen = choose_columns(offered, options.columns)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    return ", ".join(f"{name} {t}" for name, t in chosen.items())


# -- offsets -------------------------------------------------------------------------------
def offset_of(offset: SparkOffset) -> int:
    """The position in a queue's Spark offset ``{"offset": N}``."""
    return int(offset["offset"])


def spark_offset(n: int) -> SparkOffset:
    return {"offset": n}


def resolve_start(
    client: BrokerClient, options: SourceOptions, default: StartSpec, infos: list[StreamInfo]
) -> PartitionOffsets:
    """Where a read of a stream (``infos``: its partitions') starts, in each partition.

    ``startingTimestamp`` wins over ``startingOffsets``. An offset before the
    oldest one retained is kept, so that the read reports the loss
    (``failOnDataLoss``); one past the end means the end.
    """
    n = len(infos)
    out: PartitionOffsets = {}
    for k, (spec, info) in enumerate(zip(start_specs(options, default, n), infos, strict=True)):
        first, nxt = info["first"], info["next"]
        if options.starting_timestamp is not None:
            where = address_of(options.address, k, n)
            out[k] = client.offset_at(where, options.starting_timestamp, info)
        elif spec == "first":
            out[k] = first
        elif spec == "last":
            out[k] = max(nxt - 1, first)
        elif spec == "next":
            out[k] = nxt
        else:
            assert isinstance(spec, int)
            out[k] = min(spec, nxt)  # retention may have removed it: the read then says so
    return out


_EMPTY_STREAM: StreamInfo = {"first": 0, "next": 0, "count": 0, "bytes": 0}


def resolve_mode(
    client: BrokerClient, options: SourceOptions
) -> tuple[str, list[StreamInfo] | None]:
    """``("stream", infos by partition)`` or ``("queue", None)``: the option, else what the broker says."""
    if options.mode == "queue":
        return "queue", None
    infos = client.stream_infos(options.address)
    if infos is None:
        if options.mode == "stream":
            return "stream", [dict(_EMPTY_STREAM)]  # created by the first publish or attach
        return "queue", None
    return "stream", infos


def _check_queue_options(options: SourceOptions) -> None:
    if options.exactly_once:
        raise OptionError(
            f"{options.address!r} is a queue, read at least once: it cannot give the exactly-once "
            "that option exactlyOnce=true asks for (read a stream, or drop the option)"
        )
    if (
        options.starting_offset is not None
        or options.ending_offset is not None
        or options.starting_timestamp is not None
    ):
        raise OptionError(
            f"startingOffsets/endingOffsets/startingTimestamp apply to streams, and "
            f"{options.address!r} is a queue "
            '(set .option("mode", "stream") if it is meant to be a stream)'
        )


# -- the data source -------------------------------------------------------------------------
class AMQPDataSource(DataSource):
    """``format("amqp10")``: read and write the nodes of an AMQP 1.0 broker (amqp10's own).

    Register it with ``amqp10.spark.register(spark)``; see ``examples/README.md``
    for the options and the schema.
    """

    @classmethod
    def name(cls) -> str:
        return "amqp10"

    def schema(self) -> StructType | str:
        return read_schema(self._options())

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def _plan(self, schema: StructType) -> ReadPlan:
        options = self._options()
        read_schema(options, schema)  # checks a schema given with .schema(...)
        return ReadPlan(options, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return AMQPBatchReader(self._options(), self._plan(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return AMQPStreamReader(self._options(), self._plan(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import AMQPWriter

        return AMQPWriter(self._options(), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import AMQPStreamWriter

        return AMQPStreamWriter(self._options(), schema)


class AMQPBatchReader(DataSourceReader):
    """``spark.read.format("amqp10")``: a stream by offset range, a queue by browsing."""

    def __init__(self, options: SourceOptions, plan: ReadPlan) -> None:
        self.options = options
        self.plan = plan

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with BrokerClient(o) as client:
            mode, info = resolve_mode(client, o)
            if mode == "queue":
                _check_queue_options(o)
                return [BrowsePartition()]
            assert info is not None
            start = resolve_start(client, o, "first", info)
        end = end_offsets(o, info)
        start = {k: min(a, end[k]) for k, a in start.items()}
        log.info("reading stream %r offsets from %s to %s", o.address, start, end)
        return plan_ranges(
            o.address, len(info), start, end, o.messages_per_partition, o.min_partitions
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self.plan.read(partition)


class AMQPStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("amqp10")``.

    A stream's offsets are the next offset of each partition,
    ``{"<address>": {"0": N, ...}}``; a queue's are ``{"offset": N}``, N counting
    the messages this query has taken.
    """

    def __init__(self, options: SourceOptions, plan: ReadPlan) -> None:
        self.options = options
        self.plan = plan
        self._impl: _StreamOffsets | _QueueHolds | None = None
        self._available_now = False

    def __getstate__(self) -> dict[str, object]:
        # executors get the options only: the driver's connection stays on the driver
        return {
            "options": self.options,
            "plan": self.plan,
            "_impl": None,
            "_available_now": False,
        }

    def _strategy(self) -> _StreamOffsets | _QueueHolds:
        if self._impl is None:
            client = BrokerClient(self.options)
            try:
                mode, _info = resolve_mode(client, self.options)
                if mode == "stream":
                    self._impl = _StreamOffsets(self.options, client)
                else:
                    _check_queue_options(self.options)
                    self._impl = _QueueHolds(self.options, client)
            except BaseException:
                client.close()
                raise
            log.info(
                "streaming %r from %s as a %s", self.options.address, self.options.safe_url, mode
            )
            if self._available_now:
                self._impl.prepare_available_now()
        return self._impl

    def initialOffset(self) -> SparkOffset:
        return self._strategy().initial()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_messages_per_batch
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def latestOffset(self, start: SparkOffset, limit: ReadLimit) -> SparkOffset:
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self._strategy().latest(start, most)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        if self._impl is not None:
            self._impl.prepare_available_now()

    def reportLatestOffset(self) -> SparkOffset | None:
        return self._strategy().report_latest()

    def partitions(self, start: SparkOffset, end: SparkOffset) -> Sequence[InputPartition]:
        return self._strategy().partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self.plan.read(partition)

    def commit(self, end: SparkOffset) -> None:
        if self._impl is not None:
            self._impl.commit(end)

    def stop(self) -> None:
        impl, self._impl = self._impl, None
        if impl is not None:
            impl.close()


class _StreamOffsets:
    """The driver side of streaming from a stream: each partition's offsets, from stream-info."""

    def __init__(self, options: SourceOptions, client: BrokerClient) -> None:
        self.options = options
        self.client = client
        self.target: PartitionOffsets | None = None  # availableNow: the ends when the query started

    def infos(self) -> list[StreamInfo]:
        try:
            infos = self.client.stream_infos(self.options.address)
        except errors.ConnectionError as exc:
            # the driver holds nothing unsettled for a stream: a fresh connection loses nothing
            log.warning("stream-info for %r failed (%s); reconnecting", self.options.address, exc)
            self.client.close()
            self.client = BrokerClient(self.options)
            infos = self.client.stream_infos(self.options.address)
        return infos or [dict(_EMPTY_STREAM)]

    def _spark(self, offsets: PartitionOffsets) -> SparkOffset:
        return to_spark(self.options.address, offsets)

    def initial(self) -> SparkOffset:
        return self._spark(resolve_start(self.client, self.options, "next", self.infos()))

    def latest(self, start: SparkOffset, most: int | None) -> SparkOffset:
        begun = from_spark(start)
        infos = self.infos()
        base: PartitionOffsets = {}
        available: dict[int, int] = {}
        for k, info in enumerate(infos):
            at = begun.get(
                k, info["first"]
            )  # a partition the checkpoint does not know: from its first
            end = info["next"]
            if self.target is not None:
                end = min(end, self.target.get(k, end))
            base[k] = max(at, info["first"])
            available[k] = max(end - base[k], 0)
            begun.setdefault(k, at)
        if most is not None:
            available = share_limit(available, most)
        return self._spark({k: max(base[k] + available[k], begun[k]) for k in base})

    def prepare_available_now(self) -> None:
        self.target = {k: info["next"] for k, info in enumerate(self.infos())}

    def report_latest(self) -> SparkOffset | None:
        return self._spark({k: info["next"] for k, info in enumerate(self.infos())})

    def partitions(self, start: SparkOffset, end: SparkOffset) -> list[InputPartition]:
        a, b = from_spark(start), from_spark(end)
        o = self.options
        n = max(len(b), max(b, default=0) + 1)
        return list(plan_ranges(o.address, n, a, b, o.messages_per_partition, o.min_partitions))

    def commit(self, end: SparkOffset) -> None:
        """Nothing to do: a stream keeps its messages; Spark's checkpoint has the position."""

    def close(self) -> None:
        self.client.close()


_LEN = struct.Struct(">I")


class _QueueHolds:
    """The driver side of streaming from a queue: at least once, settled after the batch.

    Each ``latestOffset`` drains up to the read limit from the queue without
    settling, numbers the messages on from the start offset, and writes them to
    ``<stateDir>/<start>-<end>.amqp`` (fsynced) before Spark hears of the new
    offset: a micro-batch Spark replays after a driver restart reads that file.
    The held messages are accepted once Spark is done with their batch:
    ``commit(end)``, or ``latestOffset(start)`` for everything before ``start``
    (Spark plans a batch only after the previous one reached the sink and its
    commit log, and its ``commit`` call for the last batch of a run comes only
    with a next batch, which an ``availableNow`` run never plans).
    """

    def __init__(self, options: SourceOptions, client: BrokerClient) -> None:
        self.options = options
        self.client = client
        self.dir = options.queue_state_dir()
        os.makedirs(self.dir, exist_ok=True)
        self.receiver: Receiver | None = None
        self.next_seq: int | None = None
        self.held: list[tuple[int, int, list[Delivery]]] = []  # (start, end, unsettled deliveries)
        self.cache: dict[tuple[int, int], list[bytes]] = {}
        self.available_now = False
        self.exhausted = False

    def _receiver(self) -> Receiver:
        if self.receiver is None:
            self.receiver = self.client.open_queue(self.options.address)
        return self.receiver

    # -- files ----------------------------------------------------------------------------
    def _files(self) -> list[tuple[int, int, str]]:
        out = []
        for name in os.listdir(self.dir):
            stem, _dot, ext = name.partition(".")
            a, dash, b = stem.partition("-")
            if ext == "amqp" and dash and a.isdigit() and b.isdigit():
                out.append((int(a), int(b), os.path.join(self.dir, name)))
        return sorted(out)

    def _record(self, start: int, end: int, payloads: list[bytes]) -> None:
        path = os.path.join(self.dir, f"{start:020d}-{end:020d}.amqp")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            for p in payloads:
                f.write(_LEN.pack(len(p)))
                f.write(p)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.dir)

    @staticmethod
    def _load(path: str) -> list[bytes]:
        with open(path, "rb") as f:
            data = f.read()
        out = []
        pos = 0
        while pos < len(data):
            (n,) = _LEN.unpack_from(data, pos)
            pos += 4
            out.append(data[pos : pos + n])
            pos += n
        return out

    # -- offsets ----------------------------------------------------------------------------
    def initial(self) -> SparkOffset:
        # a new query: state left by an earlier query on this stateDir is stale
        for _a, _b, path in self._files():
            os.remove(path)
        return spark_offset(0)

    def prepare_available_now(self) -> None:
        self.available_now = True

    def report_latest(self) -> SparkOffset | None:
        return None

    def latest(self, offset: SparkOffset, most: int | None) -> SparkOffset:
        return spark_offset(self._latest(offset_of(offset), most))

    def _latest(self, start: int, most: int | None) -> int:
        self._commit(start)
        if self.next_seq is None or self.next_seq < start:
            self.next_seq = start
        if self.next_seq > start:  # handed out before and not yet planned: the same end again
            return self.next_seq
        if self.exhausted:
            return start
        n = QUEUE_BATCH_CAP if most is None else min(most, QUEUE_BATCH_CAP)
        deliveries = self.client.drain(self._receiver(), n)
        if not deliveries:
            if self.available_now:
                # a queue has no end offset: availableNow stops once it is empty
                self.exhausted = True
            return start
        end = start + len(deliveries)
        payloads = [d.payload for d in deliveries]
        self._record(start, end, payloads)
        self.held.append((start, end, deliveries))
        self.cache[(start, end)] = payloads
        self.next_seq = end
        return end

    def partitions(self, first: SparkOffset, last: SparkOffset) -> list[InputPartition]:
        start, end = offset_of(first), offset_of(last)
        payloads: list[bytes] = []
        ranges = [(a, b, self.cache[(a, b)]) for (a, b) in sorted(self.cache)]
        if not _covers(ranges, start, end):
            ranges = [(a, b, self._load(path)) for a, b, path in self._files()]
        for a, b, batch in ranges:
            lo, hi = max(a, start), min(b, end)
            if lo < hi:
                payloads.extend(batch[lo - a : hi - a])
        if len(payloads) < end - start:
            log.warning(
                "queue %r: %d of the %d messages of batch [%d, %d) are not recorded in %s "
                "(they went back to the queue when the earlier run ended)",
                self.options.address,
                end - start - len(payloads),
                end - start,
                start,
                end,
                self.dir,
            )
        size = self.options.messages_per_partition
        return [HeldPartition(payloads[i : i + size]) for i in range(0, len(payloads), size)]

    def commit(self, offset: SparkOffset) -> None:
        self._commit(offset_of(offset))

    def _commit(self, end: int) -> None:
        done = [h for h in self.held if h[1] <= end]
        if done:
            self.client.settle([d for _a, _b, ds in done for d in ds], accept=True)
            self.held = [h for h in self.held if h[1] > end]
        for key in [k for k in self.cache if k[1] <= end]:
            del self.cache[key]
        for _a, b, path in self._files():
            if b <= end:
                os.remove(path)

    def close(self) -> None:
        # unaccepted messages go back to the queue with the connection
        self.client.close()


def _covers(ranges: list[tuple[int, int, list[bytes]]], start: int, end: int) -> bool:
    pos = start
    for a, b, _ in ranges:
        if a <= pos < b:
            pos = b
    return pos >= end


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
