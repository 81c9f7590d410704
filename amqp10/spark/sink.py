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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ._client import CHUNK, BrokerClient
from .options import OptionError, SourceOptions
from .rows import WRITE_COLUMNS, message_from_row

if TYPE_CHECKING:
    from pyspark import TaskContext

__all__ = ["AMQPStreamWriter", "AMQPWriter", "Published", "publish_rows"]

log = logging.getLogger("amqp10.spark")


@dataclass
class Published(WriterCommitMessage):
    """What one write task sent: ``count`` messages, ids starting ``id_prefix``."""

    partition: int
    count: int
    id_prefix: str


def _check_schema(schema: StructType, options: SourceOptions) -> list[tuple[str, int]]:
    """The columns the writer uses, with their positions; raises if there is no body."""
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
    return [(n, i) for i, n in enumerate(names) if n in WRITE_COLUMNS]


def publish_rows(
    options: SourceOptions, rows: Iterator[Row], columns: list[tuple[str, int]], id_prefix: str
) -> int:
    """Publish ``rows`` (message-id ``<id_prefix>:<row index>``); return how many.

    Connects only if there is a row to send.
    """
    stream = options.mode == "stream"
    n = 0
    client: BrokerClient | None = None
    try:
        buf: list[bytes] = []
        for row in rows:
            values = {name: row[i] for name, i in columns}
            buf.append(
                message_from_row(values, f"{id_prefix}:{n}", durable=options.durable).encode()
            )
            n += 1
            if len(buf) >= CHUNK:
                client = client or BrokerClient(options)
                client.publish(options.address, buf, stream=stream)
                buf = []
        if buf:
            client = client or BrokerClient(options)
            client.publish(options.address, buf, stream=stream)
    finally:
        if client is not None:
            client.close()
    return n


def _task() -> tuple[int, TaskContext | None]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # called outside a Spark task (tests)
        return 0, None
    return tc.partitionId(), tc


class AMQPWriter(DataSourceWriter):
    """``df.write.format("amqp10")``."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _check_schema(schema, options)
        self.write_id = options.write_id or str(uuid.uuid4())

    def write(self, iterator: Iterator[Row]) -> Published:
        partition, _ = _task()
        prefix = f"{self.write_id}:{partition}"
        return Published(
            partition, publish_rows(self.options, iterator, self.columns, prefix), prefix
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


class AMQPStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("amqp10")``."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _check_schema(schema, options)
        self.fallback_id = str(uuid.uuid4())

    def write(self, iterator: Iterator[Row]) -> Published:
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
            partition, publish_rows(self.options, iterator, self.columns, prefix), prefix
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
