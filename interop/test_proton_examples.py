"""Proton's own Python examples, unmodified, against our broker (``interop/proton_examples.py``).

They are the ones Debian's ``libqpid-proton11-dev-examples`` installs (listed in
``.ci/debian-packages``), run by Proton's own ``test_examples.py`` plus the
examples it leaves out that need a broker, in a private network namespace where our
broker is the ``localhost:5672`` they connect to: each test that needs a broker
alone against a fresh broker, then everything in one sequence against one broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from interop.proton_examples import EXTRA, examples_dir, needs_broker, unittest_names

pytestmark = pytest.mark.proton

REPO = Path(__file__).resolve().parents[1]
# what Proton 0.37's test_examples.py runs (checked against the installed file below)
UNITTESTS = (
    "test_helloworld",
    "test_helloworld_direct",
    "test_helloworld_blocking",
    "test_helloworld_tornado",
    "test_helloworld_direct_tornado",
    "test_simple_send_recv",
    "test_client_server",
    "test_sync_client_server",
    "test_client_server_tx",
    "test_sync_client_server_tx",
    "test_client_server_direct",
    "test_sync_client_server_direct",
    "test_db_send_recv",
    "test_tx_send_tx_recv",
    "test_simple_send_direct_recv",
    "test_direct_send_simple_recv",
    "test_selected_recv",
)
BROKER_CASES = tuple(n for n in UNITTESTS if needs_broker(n)) + tuple(EXTRA)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "interop.proton_examples", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no report (status {r.returncode}): {(r.stderr or r.stdout)[-500:]}"
    doc: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in doc, doc["error"]
    return doc


def test_the_package_ships_these_examples() -> None:
    directory = examples_dir()
    assert directory is not None, "apt-get install libqpid-proton11-dev-examples"
    assert tuple(unittest_names(directory)) == UNITTESTS


@pytest.mark.parametrize("case", BROKER_CASES)
def test_one_by_one(report: dict[str, Any], case: str) -> None:
    result = report["one-by-one"]["results"][case]
    assert result["status"] == "pass", result["detail"]


@pytest.mark.parametrize("case", UNITTESTS + tuple(EXTRA))
def test_in_one_sequence(report: dict[str, Any], case: str) -> None:
    result = report["sequence"]["results"][case]
    assert result["status"] == "pass", result["detail"]
