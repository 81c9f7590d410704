"""The interop matrix's columns with our broker or client on one side, as tests (real sockets on 127.0.0.1).

1. our client -> our broker
2. python-qpid-proton clients -> our broker
3. our client -> the Proton-based broker (``interop/proton_broker.py``)
4. rhea (Node.js, from the npm registry) clients -> our broker
7. Proton's C example clients -> our broker (Debian, compiled with gcc)
8. our client -> our broker over ws:// (its HTTP listener, ``/$amqp``)
9. our client -> our broker over wss:// (every scenario over TLS)
10. pika (BlockingConnection) -> our broker, AMQP 0-9-1
11. pika (AsyncioConnection) -> our broker
12. aio-pika -> our broker

A 0-9-1 column runs the rows of 0-9-1 (its own, the shared ones read in 0-9-1 terms,
and the cross-protocol ones with our 1.0 client on the other side).

13. Proton's C++ example clients -> our broker (Debian, compiled with g++)
15. the azure-servicebus SDK -> our broker with [servicebus] on (the rows read in Service
    Bus terms; what the SDK cannot express is n/a: interop/scenarios/azure_sb.py)

Each column runs once per module (its peer in a subprocess); every scenario is
then one test that must be ``pass``, or ``n/a`` for one of the reasons listed
in ``EXPECTED_NA`` (what the peer or client really cannot do). Nothing here
is skipped. The Debian packages of columns 7 and 10 are in ``.ci/debian-packages``; the
examples are compiled once into ``interop/.build`` (kept between runs). RabbitMQ and
ActiveMQ run with ``make interop ARGS="--install --all"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interop.certs import have_openssl, make_certs
from interop.matrix import NA, PAIRINGS, PASS, Column, Pairing, run_column
from interop.peers.proton import LACKS as PROTON_BROKER_LACKS
from interop.scenarios import scenario_ids
from interop.scenarios.azure_sb import NA as AZURE_SB_NA
from interop.scenarios.proton_c import NA as PROTON_C_NA
from interop.scenarios.proton_cpp import NA as PROTON_CPP_NA
from interop.scenarios.rhea import NA as RHEA_NA

pytestmark = pytest.mark.proton

COLUMNS = (
    "ours-ours",
    "protonpy-ours",
    "ours-proton",
    "rhea-ours",
    "protonc-ours",
    "ours-ours-ws",
    "ours-ours-wss",
    "protoncpp-ours",
    "pika-ours",
    "pikaasync-ours",
    "aiopika-ours",
    "azuresb-ours",
)
OURS_ONLY = ("ours-ours", "ours-ours-ws", "ours-ours-wss")  # our client and our broker
NO_NOTE = (*OURS_ONLY, "pika-ours", "pikaasync-ours", "aiopika-ours")  # (0-9-1 rows write none)
CELLS = [
    pytest.param(p, sid, id=f"{p.id}-{sid}")
    for p in PAIRINGS
    if p.id in COLUMNS
    for sid in scenario_ids(p.protocol)
]  # (pairing, scenario): each column's rows; the pairing itself, whose peer (our broker or
# not) tells the suite's collection rule whether the cell runs at AMQP10_TEST_WORKERS=2

# (pairing, scenario) -> a substring of the n/a reason that is acceptable
EXPECTED_NA = {
    ("ours-proton", "link-resume"): "carried no unsettled map",  # Proton has no link recovery
    ("protonpy-ours", "link-resume"): "python-qpid-proton has no link recovery",
    ("ours-proton", "sasl-plain"): "without Cyrus SASL",
    ("ours-proton", "transactions"): "no transaction coordinator",  # our Proton broker has none
    ("protonpy-ours", "transactions"): "blocking API has no transactions",
    ("ours-ours-ws", "tls"): "no TLS listener",  # one HTTP listener: wss is the next column
    ("ours-proton", "anonymous-relay"): "does not offer ANONYMOUS-RELAY",  # our Proton broker
    # rhea's rows are the ones its examples show (see interop/scenarios/rhea.py)
    **{("rhea-ours", sid): "no rhea scenario written" for sid in RHEA_NA},
    # interop/proton_broker.py has queues only (peers/proton.py)
    **{("ours-proton", sid): "has queues only" for sid in PROTON_BROKER_LACKS},
    # what Proton's C and C++ examples cannot express (interop/scenarios/proton_c*.py)
    **{("protonc-ours", sid): reason for sid, reason in PROTON_C_NA.items()},
    ("protonc-ours", "sasl-anonymous"): "without a SASL layer",
    **{("protoncpp-ours", sid): reason for sid, reason in PROTON_CPP_NA.items()},
    # what the azure-servicebus SDK cannot express (interop/scenarios/azure_sb.py)
    **{("azuresb-ours", sid): reason for sid, reason in AZURE_SB_NA.items()},
}


def selected_cells(session: pytest.Session) -> dict[Pairing, list[str]]:
    """The scenarios of each pairing whose ``test_cell`` this run selected (all, at
    ``workers = 1`` without ``-k``), in the matrix's order."""
    cells: dict[Pairing, list[str]] = {}
    for item in session.items:
        params = getattr(item, "callspec", None)
        if getattr(item, "originalname", "") == "test_cell" and params is not None:
            cells.setdefault(params.params["pairing"], []).append(params.params["scenario"])
    return cells


@pytest.fixture(scope="module")
def columns(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Column]]:
    """The columns of the selected cells, each run once (only the selected scenarios)."""
    if not have_openssl():  # pragma: no cover - the CI image has it
        pytest.fail("the openssl command is needed for the TLS scenario")
    base: Path = tmp_path_factory.mktemp("interop")
    certs = make_certs(base / "certs")
    done: dict[str, Column] = {}
    for pairing, scenarios in selected_cells(request.session).items():
        done[pairing.id] = run_column(pairing, base, certs, scenarios=scenarios)
    yield done


@pytest.mark.parametrize(("pairing", "scenario"), CELLS)
def test_cell(columns: dict[str, Column], pairing: Pairing, scenario: str) -> None:
    cell = columns[pairing.id].cells[scenario]
    expected = EXPECTED_NA.get((pairing.id, scenario))
    if expected is not None:
        assert cell.status == NA and expected in cell.reason, f"{cell.status}: {cell.reason}"
    else:
        assert cell.status == PASS, f"{cell.status}: {cell.reason}"
        if pairing.id in NO_NOTE:
            # a pass with a note is a deviation a scenario tolerates in other peers (e.g. a
            # message to no node not rejected): our client against our broker has none
            assert cell.reason == "", cell.reason
