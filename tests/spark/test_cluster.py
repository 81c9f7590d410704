"""The source and the sink where users outgrow one process: a multi-process master, Spark Connect.

``local-cluster[2,1,1024]`` starts a master and two workers whose executors are
separate processes, so nothing may rely on state in the driver's process: the
readers and writers reach the executors pickled, and connect from there. A
Spark Connect session (``remote("local[2]")``: the server jar ships in the
pyspark package; the client needs the ``pyspark[connect]`` extra) runs the same
job with the driver in the server.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest

from .conftest import node_count, numbered

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("cluster_job.py")
N = 90


def run_job(url: str, tmp_path: Path, tag: str, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            str(JOB),
            "--url",
            url,
            "--stream",
            f"events-{tag}",
            "--out",
            f"dedup-{tag}",
            "--out-batch",
            f"dedup-{tag}-batch",
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def check(result: dict[str, Any], broker: Any, tag: str) -> None:
    assert result["offsets"] == list(range(N))
    assert result["bodies"] == sorted(f"m{i}" for i in range(N))
    assert result["partition_column"] == [0]
    assert result["micro_batches"] >= 3  # 40 per trigger
    assert node_count(broker, f"dedup-{tag}") == N
    assert node_count(broker, f"dedup-{tag}-batch") == 100


def test_local_cluster(url: str, publish: Any, broker: Any, tmp_path: Path) -> None:
    publish("events-cluster", numbered(N))
    result = run_job(url, tmp_path, "cluster", "--master", "local-cluster[2,1,1024]")
    # the workers keep executor logs under SPARK_HOME/work (pyspark's own directory)
    shutil.rmtree(Path(pyspark.__file__).parent / "work" / result["app"], ignore_errors=True)
    check(result, broker, "cluster")
    assert result["partitions"] == 3  # messagesPerPartition=30
    assert result["executors"] == 2


def test_spark_connect(url: str, publish: Any, broker: Any, tmp_path: Path) -> None:
    """pyspark's own Connect server, started locally: the data source registered by the client."""
    publish("events-connect", numbered(N))
    result = run_job(url, tmp_path, "connect", "--master", "local[2]", "--connect")
    assert result["session"] == "pyspark.sql.connect.session"
    check(result, broker, "connect")
