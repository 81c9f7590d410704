"""Writing rows to a broker node: ``df.write.format("amqp10")`` and ``writeStream``.

Each row becomes a message (see :func:`amqp10.spark.rows.message_from_row`),
published at least once: a task succeeds only after the broker accepted every
message it sent. A retried task or a replayed micro-batch sends the same rows
again with the same message-ids, chosen from where the row is in the job:

- streaming: ``<query id>:<batch id>:<partition>:<row index>``, the query id
  being the one kept in the checkpoint, so it survives a restart;
- batch: ``<writeId>:<partition>:<row index>``, ``writeId`` being the option or
  a fresh UUID per ``save()``.

A node whose policy has a ``duplicate_window`` accepts such a repeat and keeps
only the first, so a replay lands once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from ._client import BrokerClient
from .options import OptionError, SourceOptions
from .rows import WRITE_COLUMNS, message_from_row

if TYPE_CHECKING:
    from pyspark import TaskContext

__all__ = ["AMQPStreamWriter", "AMQPWriter", "Published", "encode_rows", "publish_batches"]

log = logging.getLogger("amqp10.spark")


@dataclass
class Published(WriterCommitMessage):
    """What one write task sent: ``count`` messages, ids starting ``id_prefix``."""

    partition: int
    count: int
    id_prefix: str


def _check_schema(schema: StructType, options: SourceOptions) -> list[str]:
    """The columns the writer uses; raises if there is no body."""
    names = schema.fieldNames()
    if "body" not in names and "body_string" not in names:
        raise OptionError(
            f"writing to {options.address!r} needs a 'body' column (binary or string); "
            f"the columns are {', '.join(names) or 'none'}"
        )
    for name in ("body", "body_string"):
        if name in names:
            t = schema[name].dataType
            if not isinstance(t, (BinaryType, StringType)):
                raise OptionError(
                    f"column {name!r} must be binary or string, not {t.simpleString()}"
                )
    return [n for n in names if n in WRITE_COLUMNS]


def publish_batches(
    options: SourceOptions, batches: Iterator[Any], columns: list[str], id_prefix: str
) -> int:
    """Publish the rows of Arrow ``batches`` (message-id ``<id_prefix>:<row index>``); return how many.

    Connects only if there is a row to send. A batch is encoded while the
    broker takes the one before (each batch one :meth:`~.BrokerClient.publish_soon`).
    """
    stream = options.mode == "stream"
    n = 0
    client: BrokerClient | None = None
    pending: Future[None] | None = None
    try:
        for batch in batches:
            payloads = encode_rows(batch, columns, id_prefix, n, options.durable)
            if not payloads:
                continue
            n += len(payloads)
            client = client or BrokerClient(options)
            if pending is not None:
                pending.result()
            pending = client.publish_soon(options.address, payloads, stream=stream)
        if pending is not None:
            pending.result()
    finally:
        if client is not None:
            client.close()
    return n


def encode_rows(
    batch: Any, columns: list[str], id_prefix: str, first: int, durable: bool
) -> list[bytes]:
    """The messages the rows of an Arrow record batch become, encoded."""
    present = [c for c in columns if c in batch.schema.names]
    values = [batch.column(c).to_pylist() for c in present]
    return [
        message_from_row(
            dict(zip(present, row)), f"{id_prefix}:{first + i}", durable=durable
        ).encode()
        for i, row in enumerate(zip(*values))
    ]


def _task() -> tuple[int, TaskContext | None]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # called outside a Spark task (tests)
        return 0, None
    return tc.partitionId(), tc


class AMQPWriter(DataSourceArrowWriter):
    """``df.write.format("amqp10")``: gets the rows as Arrow record batches."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _check_schema(schema, options)
        self.write_id = options.write_id or str(uuid.uuid4())

    def write(self, iterator: Iterator[Any]) -> Published:
        partition, _ = _task()
        prefix = f"{self.write_id}:{partition}"
        return Published(
            partition, publish_batches(self.options, iterator, self.columns, prefix), prefix
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.count for m in messages if isinstance(m, Published))
        log.info(
            "published %d messages to %r (write id %s)", total, self.options.address, self.write_id
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(m.count for m in messages if isinstance(m, Published))
        log.warning(
            "write %s to %r failed after %d messages were accepted; writing again with "
            'option("writeId", %r) sends the same message-ids',
            self.write_id,
            self.options.address,
            done,
            self.write_id,
        )


class AMQPStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("amqp10")``: gets the rows as Arrow record batches."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _check_schema(schema, options)
        self.fallback_id = str(uuid.uuid4())

    def write(self, iterator: Iterator[Any]) -> Published:
        partition, tc = _task()
        query = batch = None
        if tc is not None:
            query = tc.getLocalProperty("sql.streaming.queryId")
            batch = tc.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            # not in a micro-batch as Spark 4 runs them: ids are unique, but not stable over a restart
            log.warning(
                "no streaming query/batch id in the task; message-ids will not survive a restart"
            )
            query = query or self.fallback_id
            batch = batch or uuid.uuid4().hex
        prefix = f"{query}:{batch}:{partition}"
        return Published(
            partition, publish_batches(self.options, iterator, self.columns, prefix), prefix
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.count for m in messages if isinstance(m, Published))
        log.info("batch %d: published %d messages to %r", batchId, total, self.options.address)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "batch %d to %r aborted; a replay sends the same message-ids",
            batchId,
            self.options.address,
        )
