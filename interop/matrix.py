"""The interop matrix: scenarios (rows) x pairings of a client and a server peer (columns).

``python -m interop.matrix`` runs the pairings that need only PyPI packages (and npm):

1. our client -> our broker
2. python-qpid-proton clients (BlockingConnection / reactor) -> our broker
3. our client -> a Proton-based broker (``interop/proton_broker.py``)
4. rhea (Node.js, ``npm install``-ed) clients -> our broker
8, 9. our client -> our broker over ws:// and wss://
10-12. pika (BlockingConnection, AsyncioConnection) and aio-pika -> our broker, over
   AMQP 0-9-1: the rows of 0-9-1 (``Scenario.protocols``), the cross-protocol ones
   with our 1.0 client on the other side

and, when asked (``--peers rabbitmq,activemq,proton-c`` or ``--all``), the
Debian-backed ones (``--install`` apt-gets them first):

5. our client -> RabbitMQ 3.10 (``rabbitmq_amqp1_0`` plugin)
6. our client -> Apache ActiveMQ 5.17 (AMQP transport connector)
7. Proton's C example clients -> our broker
13. pika -> RabbitMQ 3.10 (the 0-9-1 reference)
14. Proton's C++ example clients -> our broker (compiled with g++)

and 15. the ``azure-servicebus`` SDK -> our broker with ``[servicebus]`` on (the rows
read in Service Bus terms: ``interop/scenarios/azure_sb.py``), 16. ``qpid.messaging``
(qpid-python 1.36 under Python 2.7, AMQP 0-10) -> our broker: the rows of 0-10, each one
queue between it and our 1.0 client or pika, both ways (``interop/scenarios/qpid010.py``;
its own scenarios and Qpid's conformance tests are ``python -m interop.qpid_messaging``).

Every peer runs on 127.0.0.1 only and is stopped afterwards. It prints the
table and writes it as Markdown to ``interop/RESULTS.md`` (``--output``).
Cells: ``pass``, ``FAIL (reason)``, ``n/a (reason)``, ``skipped (reason)``;
long reasons become numbered notes under the table.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import re
import shlex
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .certs import Certs, have_openssl, make_certs
from .peers.activemq import EXTRA_LIB_ENV
from .peers.base import Endpoint, Peer, PeerUnavailable
from .proton_examples import BEGIN as EXAMPLES_BEGIN
from .scenarios import SCENARIOS, V010, V091, V10, Ctx, NotApplicable, scenario_ids
from .suites import BEGIN as SUITES_BEGIN

__all__ = [
    "PAIRINGS",
    "Cell",
    "Column",
    "Pairing",
    "main",
    "render_markdown",
    "render_text",
    "run_matrix",
]

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

PASS, FAIL, NA, SKIPPED = "pass", "FAIL", "n/a", "skipped"


@dataclass(frozen=True)
class Cell:
    status: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status in (PASS, NA)


@dataclass(frozen=True)
class Pairing:
    """A column: a client driver against a server peer."""

    id: str
    title: str
    driver: str  # module under interop.scenarios: "ours", "proton_py", "proton_c"
    peer: Callable[[], Peer]
    debian: bool = False
    option: str = ""  # the --peers name that enables it
    protocol: str = V10  # what its client speaks: it runs the rows of that protocol


@dataclass
class Column:
    pairing: Pairing
    cells: dict[str, Cell] = field(default_factory=dict)
    version: str = ""
    seconds: float = 0.0


def _our_broker() -> Peer:
    from .peers.ours import OurBroker

    return OurBroker()


def _our_broker_ws() -> Peer:
    from .peers.ours import OurBroker

    return OurBroker(websocket="ws")


def _our_broker_wss() -> Peer:
    from .peers.ours import OurBroker

    return OurBroker(websocket="wss")


def _our_servicebus() -> Peer:
    from .peers.ours import OurBroker
    from .scenarios.azure_sb import servicebus_config

    return OurBroker(plain=False, config=servicebus_config(), title="our broker ([servicebus])")


def _proton_broker() -> Peer:
    from .peers.proton import ProtonBroker

    return ProtonBroker()


def _rabbitmq() -> Peer:
    from .peers.rabbitmq import RabbitMQ

    return RabbitMQ()


def _activemq() -> Peer:
    from .peers.activemq import ActiveMQ

    return ActiveMQ()


PAIRINGS: tuple[Pairing, ...] = (
    Pairing("ours-ours", "our client → our broker", "ours", _our_broker),
    Pairing("protonpy-ours", "Proton Python clients → our broker", "proton_py", _our_broker),
    Pairing("ours-proton", "our client → Proton broker", "ours", _proton_broker),
    Pairing("rhea-ours", "rhea (Node.js) clients → our broker", "rhea", _our_broker),
    Pairing(
        "ours-rabbitmq",
        "our client → RabbitMQ 3.10",
        "ours",
        _rabbitmq,
        debian=True,
        option="rabbitmq",
    ),
    Pairing(
        "ours-activemq",
        "our client → ActiveMQ 5.17",
        "ours",
        _activemq,
        debian=True,
        option="activemq",
    ),
    Pairing(
        "protonc-ours",
        "Proton C examples → our broker",
        "proton_c",
        _our_broker,
        debian=True,
        option="proton-c",
    ),
    Pairing("ours-ours-ws", "our client → our broker over ws://", "ours", _our_broker_ws),
    Pairing("ours-ours-wss", "our client → our broker over wss://", "ours", _our_broker_wss),
    Pairing(
        "protoncpp-ours",
        "Proton C++ examples → our broker",
        "proton_cpp",
        _our_broker,
        debian=True,
        option="proton-cpp",
    ),
    # AMQP 0-9-1 clients (the 0-9-1 rows, and 1.0 <-> 0-9-1 with our client on the 1.0 side)
    Pairing("pika-ours", "pika BlockingConnection → our broker", "pika_blocking", _our_broker, protocol=V091),
    Pairing("pikaasync-ours", "pika AsyncioConnection → our broker", "pika_async", _our_broker, protocol=V091),
    Pairing("aiopika-ours", "aio-pika → our broker", "aiopika", _our_broker, protocol=V091),
    Pairing(
        "pika-rabbitmq",
        "pika BlockingConnection → RabbitMQ 3.10",
        "pika_blocking",
        _rabbitmq,
        debian=True,
        option="rabbitmq",
        protocol=V091,
    ),
    Pairing("azuresb-ours", "azure-servicebus SDK → our broker", "azure_sb", _our_servicebus),
    Pairing("qpid-ours", "qpid.messaging (0-10) → our broker", "qpid010", _our_broker, protocol=V010),
)
PEER_OPTIONS = {p.option: p for p in PAIRINGS if p.option}


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _one_line(exc.exceptions[0])
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    name = type(exc).__name__
    if not msg:
        return name
    if isinstance(exc, AssertionError):
        return msg
    return f"{name}: {msg}"


def run_column(
    pairing: Pairing,
    workdir: Path,
    certs: Certs | None,
    *,
    scenarios: Sequence[str] | None = None,
    install: bool = False,
    log: Callable[[str], None] = lambda s: None,
) -> Column:
    """Start the pairing's peer, run each scenario with its driver, stop the peer."""
    own = scenario_ids(pairing.protocol)
    wanted = [s for s in scenarios if s in own] if scenarios else own
    column = Column(pairing)
    started = time.monotonic()
    try:
        try:
            driver = importlib.import_module(f"interop.scenarios.{pairing.driver}")
        except ImportError as exc:
            raise PeerUnavailable(
                f"the {pairing.driver} client needs {exc.name} (not installed)"
            ) from None
        prepare = getattr(driver, "prepare", None)
        if prepare is not None:
            prepare(install=install)
        peer = pairing.peer()
        if install:
            peer.install()
        log(f"[{pairing.id}] starting {peer.title}")
        with peer.running(workdir / pairing.id, certs) as ep:
            client = getattr(driver, "client_version", lambda: "")()
            column.version = f"{client} → {ep.version}" if client else ep.version
            log(
                f"[{pairing.id}] {ep.name} on {ep.url}"
                + (f" and {ep.tls_url}" if ep.tls_url else "")
            )
            for sid in wanted:
                cell = _run_cell(driver, ep, sid)
                column.cells[sid] = cell
                log(
                    f"[{pairing.id}] {sid}: {cell.status}"
                    + (f" ({cell.reason})" if cell.reason else "")
                )
    except PeerUnavailable as exc:
        reason = str(exc)
        column.version = "skipped (see the notes)"
        log(f"[{pairing.id}] skipped: {reason}")
        for sid in wanted:
            column.cells.setdefault(sid, Cell(SKIPPED, reason))
    except Exception as exc:  # the peer broke down: what ran stays, the rest fails
        reason = f"peer failed: {_one_line(exc)}"
        log(f"[{pairing.id}] {reason}\n{traceback.format_exc()}")
        for sid in wanted:
            column.cells.setdefault(sid, Cell(FAIL, reason))
    column.seconds = time.monotonic() - started
    return column


def _run_cell(driver: Any, ep: Endpoint, sid: str) -> Cell:
    reason = getattr(driver, "NA", {}).get(sid) or ep.na.get(sid)
    if reason:
        return Cell(NA, reason)
    ctx = Ctx(ep=ep, scenario=sid)
    try:
        note = driver.run(ctx)
    except NotApplicable as exc:
        return Cell(NA, str(exc))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        reason = _one_line(exc)
        for scenario, pattern, why in ep.faults:
            if scenario == sid and re.search(pattern, reason):
                return Cell(NA, f"peer bug: {why}")
        return Cell(FAIL, reason)
    return Cell(PASS, note or "")


def run_matrix(
    pairings: Sequence[Pairing],
    *,
    scenarios: Sequence[str] | None = None,
    install: bool = False,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> list[Column]:
    """Run every pairing (one after the other) and return the columns."""
    with tempfile.TemporaryDirectory(prefix="amqp10-interop-") as tmp:
        base = Path(workdir) if workdir is not None else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        certs = make_certs(base / "certs") if have_openssl() else None
        if certs is None:
            log("openssl not found: TLS scenarios will be n/a")
        return [
            run_column(p, base, certs, scenarios=scenarios, install=install, log=log)
            for p in pairings
        ]


# -- rendering -------------------------------------------------------------------------------
SHORT = 30  # reasons longer than this become numbered notes
NOT_ITS_ROW = "—"  # the row is not of the column's protocol (1.0, 0-9-1 or 0-10)


def _cells_with_notes(columns: Sequence[Column]) -> tuple[dict[tuple[str, str], str], list[str]]:
    notes: list[str] = []
    index: dict[str, int] = {}
    text: dict[tuple[str, str], str] = {}
    for col in columns:
        for sid, cell in col.cells.items():
            shown = cell.status
            if cell.reason:
                if len(cell.reason) <= SHORT and cell.status in (FAIL, NA):
                    shown = f"{cell.status} ({cell.reason})"
                else:
                    if cell.reason not in index:
                        notes.append(cell.reason)
                        index[cell.reason] = len(notes)
                    shown = f"{cell.status} [{index[cell.reason]}]"
            text[(col.pairing.id, sid)] = shown
    return text, notes


def _rows(columns: Sequence[Column]) -> list[str]:
    seen = {sid for c in columns for sid in c.cells}
    return [s.id for s in SCENARIOS if s.id in seen]


def _titles() -> dict[str, str]:
    return {s.id: s.title for s in SCENARIOS}


def render_markdown(columns: Sequence[Column]) -> str:
    text, notes = _cells_with_notes(columns)
    titles = _titles()
    head = ["scenario", *[f"{_number(c)}. {c.pairing.title}" for c in columns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sid in _rows(columns):
        cells = [text.get((c.pairing.id, sid), NOT_ITS_ROW) for c in columns]
        lines.append("| " + " | ".join([titles[sid], *cells]) + " |")
    if notes:
        lines.append("")
        lines.extend(f"[{i}] {n}  " for i, n in enumerate(notes, 1))
    return "\n".join(lines)


def _number(column: Column) -> int:
    return PAIRINGS.index(column.pairing) + 1


def render_text(columns: Sequence[Column]) -> str:
    text, notes = _cells_with_notes(columns)
    titles = _titles()
    head = ["scenario", *[str(_number(c)) for c in columns]]
    rows = [
        [titles[sid], *[text.get((c.pairing.id, sid), NOT_ITS_ROW) for c in columns]]
        for sid in _rows(columns)
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    out = []
    for c in columns:
        n = _number(c)
        extra = f" ({c.version})" if c.version else ""
        out.append(f"  {n}. {c.pairing.title}{extra}")
    out.append("")
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out.append(fmt.format(*head))
    out.append(fmt.format(*["-" * w for w in widths]))
    out.extend(fmt.format(*r) for r in rows)
    if notes:
        out.append("")
        for i, note in enumerate(notes, 1):
            out.append(textwrap.fill(note, 100, initial_indent=f"[{i}] ", subsequent_indent="    "))
    return "\n".join(out)


def results_document(columns: Sequence[Column], command: str) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        import proton

        proton_v = ".".join(map(str, proton.VERSION))
    except ImportError:  # pragma: no cover
        proton_v = "not installed"
    lines = [
        "# Interop matrix results",
        "",
        "Generated by `interop/matrix.py` (see `interop/README.md`); do not edit by hand.",
        "",
        f"- command: `{command}`",
        f"- run: {when}, Python {platform.python_version()}, python-qpid-proton {proton_v}",
    ]
    for c in columns:
        took = f", {c.seconds:.0f}s" if c.seconds else ""
        lines.append(f"- {c.pairing.title}: {c.version or 'not run'}{took}")
    lines += ["", render_markdown(columns), ""]
    failed = sum(1 for c in columns for cell in c.cells.values() if cell.status == FAIL)
    lines.append(f"{failed} FAIL cell(s).")
    return "\n".join(lines) + "\n"


# -- command line ----------------------------------------------------------------------------
def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m interop.matrix",
        description="Run the interop matrix (scenarios x pairings) on 127.0.0.1.",
    )
    p.add_argument(
        "--peers",
        default="",
        help="comma-separated Debian-backed pairings to add: " + ",".join(PEER_OPTIONS),
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every pairing (same as --peers " + ",".join(PEER_OPTIONS) + ")",
    )
    p.add_argument(
        "--install", action="store_true", help="apt-get install what the chosen peers need first"
    )
    p.add_argument(
        "--only",
        default="",
        help="comma-separated pairing ids to run: " + ",".join(p.id for p in PAIRINGS),
    )
    p.add_argument("--scenarios", default="", help="comma-separated scenario ids (default: all)")
    p.add_argument(
        "--output", default=str(RESULTS), help="Markdown file to write (default interop/RESULTS.md)"
    )
    p.add_argument("--no-write", action="store_true", help="print the table only")
    p.add_argument(
        "--workdir", help="keep configs, logs and certificates here (default: a temp dir)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p.parse_args(argv)


def choose(args: argparse.Namespace) -> list[Pairing]:
    if args.only:
        ids = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [i for i in ids if i not in {p.id for p in PAIRINGS}]
        if unknown:
            raise SystemExit(f"unknown pairing(s): {', '.join(unknown)}")
        return [p for p in PAIRINGS if p.id in ids]
    names = (
        set(PEER_OPTIONS) if args.all else {s.strip() for s in args.peers.split(",") if s.strip()}
    )
    bad = names - set(PEER_OPTIONS)
    if bad:
        raise SystemExit(
            f"unknown peer(s): {', '.join(sorted(bad))} (choose from {', '.join(PEER_OPTIONS)})"
        )
    return [p for p in PAIRINGS if not p.debian or p.option in names]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    chosen = choose(args)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()] or None
    if scenarios:
        bad = [s for s in scenarios if s not in scenario_ids()]
        if bad:
            raise SystemExit(
                f"unknown scenario(s): {', '.join(bad)} (choose from {', '.join(scenario_ids())})"
            )

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    columns = run_matrix(
        chosen,
        scenarios=scenarios,
        install=args.install,
        workdir=Path(args.workdir) if args.workdir else None,
        log=log,
    )
    # Debian-backed pairings not asked for still show, as skipped, so the table says what was left out
    ran = {c.pairing.id for c in columns}
    for p in PAIRINGS:
        if p.id not in ran and p.debian and not args.only:
            why = f"not requested: add --peers {p.option} (or --all)"
            rows = [s for s in scenario_ids(p.protocol) if not scenarios or s in scenarios]
            columns.append(Column(p, {sid: Cell(SKIPPED, why) for sid in rows}))
    columns.sort(key=lambda c: PAIRINGS.index(c.pairing))
    print(render_text(columns))
    if not args.no_write:
        given = sys.argv[1:] if argv is None else list(argv)
        command = " ".join(["python -m interop.matrix", shlex.join(given)]).strip()
        if "ours-activemq" in ran and os.environ.get(EXTRA_LIB_ENV):
            command = f"{EXTRA_LIB_ENV}={shlex.quote(os.environ[EXTRA_LIB_ENV])} {command}"
        out = Path(args.output)
        old = out.read_text() if out.exists() else ""
        doc = results_document(columns, command)
        # keep what interop.suites and interop.proton_examples recorded below the table
        kept = [old.index(m) for m in (SUITES_BEGIN, EXAMPLES_BEGIN) if m in old]
        if kept:
            doc = doc.rstrip("\n") + "\n\n" + old[min(kept) :]
        out.write_text(doc)
        print(f"\nwrote {args.output}", file=sys.stderr)
    failed = any(cell.status == FAIL for c in columns for cell in c.cells.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
