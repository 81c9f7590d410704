"""The PySpark connector: ``format("amqp10")`` reads and writes broker nodes.

>>> import amqp10.spark                                          # doctest: +SKIP
>>> amqp10.spark.register(spark)
>>> df = (spark.readStream.format("amqp10")
...       .option("url", "amqp://127.0.0.1:5672").option("address", "events")
...       .option("startingOffsets", "earliest").load())

Needs the ``spark`` extra (``pip install 'amqp10[spark]'``: pyspark 4.2 or
later, and pyarrow). Executors must run an interpreter that can import amqp10: set
``PYSPARK_PYTHON`` (and ``PYSPARK_DRIVER_PYTHON``) before the session starts;
:func:`local_session` does that for a local session. Options and schema:
``examples/README.md``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING


def _check_pyspark() -> None:
    try:
        import pyspark
    except ImportError:
        raise ImportError(
            "amqp10.spark needs pyspark 4.2 or later: pip install 'amqp10[spark]'"
        ) from None
    major, minor = (int(x) for x in pyspark.__version__.split(".")[:2])
    if (major, minor) < (4, 2):
        raise ImportError(
            f"amqp10.spark needs pyspark 4.2 or later (streaming read limits and "
            f"availableNow for Python data sources), not {pyspark.__version__}"
        )


_check_pyspark()

from .functions import body_json, body_text  # noqa: E402
from .offsets import lag  # noqa: E402
from .options import OptionError, SourceOptions  # noqa: E402
from .rows import COLUMNS, LEGACY_SCHEMA, SCHEMA  # noqa: E402
from .sink import AMQPStreamWriter, AMQPWriter  # noqa: E402
from .source import AMQPBatchReader, AMQPDataSource, AMQPStreamReader  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "COLUMNS",
    "LEGACY_SCHEMA",
    "SCHEMA",
    "AMQPBatchReader",
    "AMQPDataSource",
    "AMQPStreamReader",
    "AMQPStreamWriter",
    "AMQPWriter",
    "OptionError",
    "SourceOptions",
    "body_json",
    "body_text",
    "lag",
    "local_session",
    "register",
]

QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM flags for short local jobs: the C1 compiler only starts Spark about twice as fast."""


def register(spark: SparkSession) -> None:
    """Make ``format("amqp10")`` available in ``spark``."""
    spark.dataSource.register(AMQPDataSource)


def local_session(
    app_name: str = "amqp10",
    *,
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
    quick_jvm: bool = True,
) -> SparkSession:
    """A local Spark session on loopback with ``amqp10`` registered (examples, tests, benchmarks).

    Sets ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` to this interpreter so the
    Python workers can import amqp10, binds the driver to 127.0.0.1, turns the UI
    and the console progress bar off, and (``quick_jvm``) trades the JVM's peak
    speed for a faster start. ``conf`` adds or overrides settings.
    """
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings: dict[str, str] = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    if quick_jvm:
        settings["spark.driver.extraJavaOptions"] = QUICK_JVM_OPTIONS
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
