"""``qpid.messaging`` (qpid-python 1.36, AMQP 0-10) against our broker: every scenario of
interop/qpid_client.py passes (``python -m interop.qpid_messaging`` is the same run)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interop.matrix import PAIRINGS, PASS, run_column
from interop.peers.base import Endpoint
from interop.qpid_messaging import (
    Unavailable,
    parse_results,
    python2,
    run_scenarios,
    scenario_ids,
    sdist,
    start_broker,
)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    try:
        python2()
        sdist()
    except Unavailable as exc:
        pytest.skip(f"qpid-python 1.36 cannot run here: {exc}")
    broker, ep = start_broker(Path(tmp_path_factory.mktemp("qpid010")))
    try:
        yield ep
    finally:
        broker.stop()


def test_every_scenario_passes(endpoint: Endpoint) -> None:
    outcomes = run_scenarios(endpoint)
    assert len(scenario_ids()) >= 14
    assert [o.id for o in outcomes] == scenario_ids()
    failed = {o.id: o.detail for o in outcomes if not o.ok}
    assert not failed


OUTPUT = """qpid_tests.broker_0_10.queue.QueueTests.test_purge ...................... pass
qpid_tests.broker_0_10.alternate_exchange.AlternateExchangeTests. \\
    test_add_alternate_to_exchange ...................................... fail
Error during test:  Traceback (most recent call last):
    File "qpid-python-test", line 340, in run
  AssertionError: Expected adding an alternate on an existing exchange to fail
qpid_tests.broker_0_10.tx.TxTests.test_commit ........................... skip
  Skipped: [Errno 111] Connection refused
Totals: 3 tests, 1 passed, 1 skipped, 0 ignored, 1 failed
"""


def test_the_matrix_0_10_column_passes_every_cross_protocol_row(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    """0-10 (qpid.messaging) <-> 1.0 (our client) and <-> 0-9-1 (pika) on the same queues,
    properties mapped, both directions: interop/scenarios/qpid010.py's rows."""
    pairing = next(p for p in PAIRINGS if p.id == "qpid-ours")
    column = run_column(pairing, tmp_path, None)
    assert sorted(column.cells) == sorted(
        ["cross-010-to-10", "cross-10-to-010", "cross-010-to-091", "cross-091-to-010"]
    )
    assert {sid: (c.status, c.reason) for sid, c in column.cells.items()} == {
        sid: (PASS, "") for sid in column.cells
    }


def test_qpid_python_test_output_is_read_long_names_too() -> None:
    r = parse_results(OUTPUT)
    assert (r.total, r.passed, r.skipped) == (3, 1, 1)
    assert r.failed == {
        "qpid_tests.broker_0_10.alternate_exchange.AlternateExchangeTests.test_add_alternate_to_exchange": (
            "AssertionError: Expected adding an alternate on an existing exchange to fail"
        )
    }
