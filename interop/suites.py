"""Third-party 0-9-1 client libraries' own test suites against our broker: one command each.

::

    python -m interop.suites pika             # pika's tests/acceptance (~30 s)
    python -m interop.suites pika -k Blocking  # a subset (pytest's -k)
    python -m interop.suites amqplib          # amqplib's node --test suite (npm install first)
    python -m interop.suites aio-pika         # aio-pika's tests, from its PyPI sdist
    python -m interop.suites aiormq           # aiormq's tests, from its PyPI sdist
    python -m interop.suites aiormq --broker rabbitmq   # the same against RabbitMQ 3.10

pika's and amqplib's source trees live outside the repository, in ``../shared/suites``
relative to the repository root (``--suites DIR`` elsewhere; see that
directory's README: run them, never copy them in); aio-pika's and aiormq's tests
ship in their sdists, which the runner fetches with ``pip download`` into
``interop/.build/sdists`` (git-ignored) and runs in a virtualenv of their test
dependencies there. The runner unpacks the suite into a scratch directory, starts
``amqp10 broker`` (on 127.0.0.1:5672 where the suite hard-codes it, else on free
ports, TLS too), runs the suite with the suite's own copy of the client, prints
pass/fail/skip counts and every failure, and (unless ``--no-write``) records them
in the marked section of ``interop/RESULTS.md``. ``--broker rabbitmq`` runs a
suite that takes its broker's address (aio-pika, aiormq) against a private RabbitMQ
(``interop/peers/rabbitmq.py``) instead, for the reference counts; it records nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .peers.base import free_port
from .peers.ours import LISTENING, broker_command

__all__ = ["SUITES", "Outcome", "Suite", "main", "record", "run_suite"]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SUITES = next(
    (d for d in (REPO.parent / "shared" / "suites", REPO.parent.parent / "shared" / "suites") if d.is_dir()),
    REPO.parent / "shared" / "suites",
)
"""``../shared/suites`` from the repository root (from a worktree's parent, one level up)."""
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
BUILD = Path(__file__).resolve().parent / ".build"
"""Git-ignored: the fetched sdists (``sdists/``) and the suites' virtualenv (``suites-venv/``)."""
SHIMS = Path(__file__).resolve().parent / "shims"
PORT = 5672
BEGIN = "<!-- suites:begin (written by interop/suites.py) -->"
END = "<!-- suites:end -->"


@dataclass(frozen=True)
class Suite:
    name: str
    tarball: str
    """The file in the suites directory."""
    root: str
    """The directory inside the tarball to run from."""
    command: tuple[str, ...]
    """The test command, run in ``root`` (``{python}`` and ``{report}`` filled in)."""
    setup: tuple[str, ...] = ()
    """A command that prepares ``root`` first (installs the suite's dev dependencies)."""
    notes: tuple[str, ...] = ()
    """How this runner's command differs from the suite's own, and why."""
    reference: tuple[str, int | None, int | None, int | None, int | None, str] = ("", None, None, None, None, "")
    """RabbitMQ's run on this machine (the suites README, or ``--broker rabbitmq``): broker,
    passed, failed, errors, skipped, and a note."""
    sdist: str = ""
    """``name==version`` on PyPI: the suite is that sdist's (fetched into ``BUILD/sdists``),
    not ``tarball``."""
    venv: tuple[str, ...] = ()
    """The suite's test dependencies: it runs in ``BUILD/suites-venv`` with these installed
    (``{python}`` is that virtualenv's Python)."""
    shims: tuple[tuple[str, str], ...] = ()
    """(a file under ``root``, a file of ``interop/shims``): copied over it before the run."""
    certs: str = ""
    """The suite's own TLS files under ``root`` (``ca.pem``, ``server.pem``, ``server.key``)
    for the broker's TLS listener; empty: a throwaway CA's (``interop/certs.py``)."""

    @property
    def addressed(self) -> bool:
        """The suite takes its broker's address (``SUITE_BROKER_*``, read by
        ``interop/shims/suite_broker.py``): any port, and RabbitMQ for reference runs."""
        return bool(self.shims) or any("suite_broker" in part for part in self.command)


AIO_TEST_DEPS = (
    "pytest>=8.4,<10", "aiomisc-pytest>=2,<3", "shortuuid", "timeout-decorator", "yarl",
    "pamqp==4.0.1", "aiormq==7.2.4",
)
"""aio-pika's and aiormq's test dependency groups (less coverage, linters, docs), with the
aiormq and pamqp of /work/main/.venv (aio-pika's suite runs over aiormq as installed)."""
AIO_PYTEST = (
    "{python}", "-m", "pytest", "-p", "suite_broker", "-p", "no:cacheprovider", "-o", "log_cli=false",
    "-q", "--tb=native", "--aiomisc-test-timeout=60", "--junitxml={report}",
)
AIO_NOTES = (
    "The suite starts RabbitMQ in Docker (`tests/docker_client.py`, image mosquito/aiormq-rabbitmq); "
    "the runner starts the broker itself and points the suite at it with a pytest plugin "
    "(`interop/shims/suite_broker.py`, also copied over aio-pika's `tests/docker_client.py`). "
    "Each test is limited to 60 s (aiomisc's `--aiomisc-test-timeout`), so a test that waits "
    "for what never comes fails instead of stopping the run. Tracebacks are printed natively "
    "(`--tb=native`): pytest's own formatter re-parses source and hits CPython 3.11.7's "
    "\"AST constructor recursion depth mismatch\" on a deep asyncio traceback, which ends the "
    "whole run as an internal error. Nothing else differs.",
)

SUITES = {
    "pika": Suite(
        name="pika",
        tarball="pika-2126d43a.tar.gz",
        root="pika",
        command=(
            "{python}", "-m", "pytest", "tests/acceptance", "-p", "no:cacheprovider",
            "-o", "addopts=", "-o", "filterwarnings=", "-q", "--junitxml={report}",
        ),
        reference=("RabbitMQ 3.10.8", 560, 1, 0, 40, "the failure expects RabbitMQ 4's behaviour; the skips need kqueue"),
    ),
    "amqplib": Suite(
        name="amqplib",
        tarball="amqplib-f7503e57.tar.gz",
        root="amqplib",
        setup=("npm", "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts"),
        command=(
            "node", "--test", "--test-timeout=30000",
            "--test-reporter=junit", "--test-reporter-destination={report}",
        ),
        reference=("RabbitMQ 3.10.8", 317, None, None, None, "the suites README gives the passed count only"),
        notes=(
            "The package's own command is `node --test --test-timeout=1000`; a test file is one "
            "test to node, so on this shared 2-core machine even broker-free files (codec, frame) "
            "exceed 1 s under load. The runner allows 30 s; nothing else differs.",
        ),
    ),
    "aio-pika": Suite(
        name="aio-pika",
        tarball="aio_pika-10.2.1.tar.gz",
        sdist="aio-pika==10.2.1",
        root="aio_pika-10.2.1",
        venv=(*AIO_TEST_DEPS, "aio-pika==10.2.1"),
        shims=(("tests/docker_client.py", "suite_broker.py"),),
        command=(*AIO_PYTEST, "tests"),
        notes=AIO_NOTES,
        reference=(
            "RabbitMQ 3.10.8", 1068, 11, 0, 28,
            "`--broker rabbitmq`; its failures: test_robust_recovery (3: they restart the Docker "
            "container), test_channel_reconnect_stairway (7, TimeoutError under this machine's load), "
            "test_create_channels_during_reconnect (1)",
        ),
    ),
    "aiormq": Suite(
        name="aiormq",
        tarball="aiormq-7.2.4.tar.gz",
        sdist="aiormq==7.2.4",
        root="aiormq-7.2.4",
        venv=AIO_TEST_DEPS,
        certs="tests/certs",
        command=(*AIO_PYTEST, "tests"),
        notes=AIO_NOTES,
        reference=(
            "RabbitMQ 3.10.8", 1036, 6, 0, 1,
            "`--broker rabbitmq`; its failures: test_closing_waiter_cancellation (4, "
            "[...-connection-True]: no AMQPConnectionError) and test_connection_close_during_publish_drain (2)",
        ),
    ),
}  # fmt: skip


@dataclass
class Outcome:
    """What a suite run came to."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)
    """(test id, first line of its message) of each failure and error."""

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.errors} errors, {self.skipped} skipped"


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds: TIME_WAIT is fine
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Tls:
    """A TLS listener's port and files (the CA verifies client certificates)."""

    port: int
    ca: Path
    cert: Path
    key: Path


@contextmanager
def broker_on(
    port: int, workdir: Path, tls: Tls | None = None, workers: int = 1
) -> Iterator[subprocess.Popen[bytes]]:
    """``amqp10 broker`` (this checkout) on 127.0.0.1:``port`` (and ``tls``), its log in
    ``workdir``; ``workers`` > 1: ``--workers N`` (issue 31's preview), once each listens."""
    log_path = workdir / "broker.log"
    log = log_path.open("wb")
    args = ["--port", str(port)]
    if tls is not None:
        config = workdir / "broker.toml"
        config.write_text(
            f"[[listeners]]\nport = {port}\n\n[[listeners]]\nport = {tls.port}\n"
            f"tls_cert = {str(tls.cert)!r}\ntls_key = {str(tls.key)!r}\ntls_ca = {str(tls.ca)!r}\n"
        )
        args = ["--config", str(config)]
    argv, env = broker_command(*args, "--no-http", "--data-dir", str(workdir / "data"), workers=workers)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    ready = workers * (1 if tls is None else 2)  # each worker's line for each listener
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while len(re.findall(LISTENING, log_path.read_text(errors="replace"))) < ready:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the broker did not start:\n" + log_path.read_text(errors="replace"))
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


@contextmanager
def rabbitmq_on(workdir: Path, tls: Tls) -> Iterator[tuple[int, int, str]]:
    """A private RabbitMQ (``interop/peers/rabbitmq.py``) with ``tls``'s files: its AMQP and
    AMQPS ports and its name. Stopped (and its epmd) on leaving."""
    from .certs import Certs
    from .peers.rabbitmq import RabbitMQ

    peer = RabbitMQ()
    missing = peer.available()
    if missing:
        raise RuntimeError(missing)
    certs = Certs(directory=tls.ca.parent, ca=tls.ca, server_cert=tls.cert, server_key=tls.key, server_p12=tls.ca)
    try:
        endpoint = peer.start(workdir, certs)
        assert endpoint.tls_port is not None
        yield endpoint.port, endpoint.tls_port, endpoint.name
    finally:
        peer.stop()


def parse_junit(path: Path) -> Outcome:
    """Counts and failures from a JUnit XML report (pytest's, or node --test's nested suites)."""
    out = Outcome()

    def walk(node: ET.Element, suites: list[str]) -> None:
        for child in node:
            if child.tag == "testsuite":
                name = child.get("name", "")
                walk(child, suites if name in ("pytest", "") else [*suites, name])
            elif child.tag == "testcase":
                _count(out, child, suites)

    walk(ET.parse(path).getroot(), [])
    return out


def _count(out: Outcome, case: ET.Element, suites: list[str]) -> None:
    classname = case.get("classname", "")
    ident = "::".join([*suites, *([classname] if classname not in ("", "test") else []), case.get("name", "")])
    failure = case.find("failure")
    error = case.find("error")
    node = failure if failure is not None else error
    if node is not None:
        message = (node.get("message") or node.text or "").strip().splitlines()
        out.failures.append((ident, message[0][:200] if message else ""))
        if failure is not None:
            out.failed += 1
        else:
            out.errors += 1
    elif case.find("skipped") is not None:
        out.skipped += 1
    else:
        out.passed += 1


def run_suite(
    suite: Suite,
    suites_dir: Path,
    workdir: Path,
    *,
    port: int = PORT,
    select: str | None = None,
    rabbitmq: bool = False,
    workers: int = 1,
) -> Outcome:
    """Unpack ``suite``, run it against a broker of this checkout (``workers`` processes)
    or RabbitMQ, return the counts."""
    tarball = fetch_sdist(suite) if suite.sdist else suites_dir / suite.tarball
    if not tarball.is_file():
        raise FileNotFoundError(f"{tarball} not found (see --suites)")
    with tarfile.open(tarball) as tar:
        tar.extractall(workdir / "src", filter="data")
    root = workdir / "src" / suite.root
    report = workdir / "report.xml"
    for target, shim in suite.shims:
        shutil.copyfile(SHIMS / shim, root / target)
    if suite.setup:
        subprocess.run(suite.setup, cwd=root, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    python = str(suites_venv(suite.venv)) if suite.venv else sys.executable
    command = [part.format(python=python, report=report) for part in suite.command]
    if select:
        command += ["-k", select]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the suite's own client, not ours or the venv's first
    tls: Tls | None = None
    if suite.addressed:
        certs = root / suite.certs if suite.certs else _throwaway_certs(workdir)
        tls = Tls(free_port(), certs / "ca.pem", certs / "server.pem", certs / "server.key")
        port = free_port()
        env["PYTHONPATH"] = str(SHIMS)
    started = time.monotonic()
    with ExitStack() as stack:
        if rabbitmq:
            assert tls is not None, f"{suite.name} hard-codes its broker: it runs against ours only"
            port, tls_port, _ = stack.enter_context(rabbitmq_on(workdir, tls))
            tls = Tls(tls_port, tls.ca, tls.cert, tls.key)
        else:
            stack.enter_context(broker_on(port, workdir, tls, workers))
        if tls is not None:
            env.update(SUITE_BROKER_HOST="127.0.0.1", SUITE_BROKER_PORT=str(port), SUITE_BROKER_TLS_PORT=str(tls.port))
        tail = _run_logged(command, root, env)
    outcome = parse_junit(report) if report.exists() else Outcome()
    outcome.seconds = time.monotonic() - started
    if not report.exists():
        outcome.failures.append(("(the suite did not run)", "".join(tail)[-500:]))
    return outcome


def _run_logged(command: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """Run the suite; its output's last lines."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    tail: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            tail.append(raw.decode(errors="replace"))
            del tail[:-50]

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    proc.wait()
    reader.join(5)
    return tail


def _throwaway_certs(workdir: Path) -> Path:
    """A throwaway CA's server certificate, named as the suites name theirs."""
    from .certs import make_certs

    made = make_certs(workdir / "certs")
    for name, path in (("ca.pem", made.ca), ("server.pem", made.server_cert), ("server.key", made.server_key)):
        if path.name != name:
            shutil.copyfile(path, made.directory / name)
    return made.directory


def suites_venv(requirements: Sequence[str]) -> Path:
    """``BUILD/suites-venv`` with ``requirements`` (pip installs what is missing): its Python."""
    venv = BUILD / "suites-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *requirements], check=True)
    return python


def fetch_sdist(suite: Suite) -> Path:
    """``suite.sdist`` from PyPI into ``BUILD/sdists`` (once). pip prepares an sdist's metadata
    even to download it, so the build backends (uv_build) come from the suites' virtualenv,
    without build isolation."""
    out = BUILD / "sdists"
    path = out / suite.tarball
    if path.is_file():
        return path
    out.mkdir(parents=True, exist_ok=True)
    python = suites_venv(("uv_build",))
    env = dict(os.environ, PATH=str(python.parent) + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run(
        [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "--no-build-isolation", "-d", str(out), suite.sdist],
        check=True,
        env=env,
    )  # fmt: skip
    return path


def record(path: Path, suite: Suite, outcome: Outcome, reasons: dict[str, str], workers: int = 1) -> None:
    """Write ``outcome`` (a run against ``workers`` processes) into ``path``'s marked suites
    section (kept by interop.matrix), next to the suite's recorded runs at other N."""
    text = path.read_text() if path.exists() else ""
    section = _section(text)
    runs = _runs(section.get(suite.name, ""))
    runs[workers] = _run(suite, outcome, reasons, workers)
    section[suite.name] = _render(suite, runs)
    body = "\n".join(section[k].rstrip("\n") + "\n" for k in sorted(section))
    block = f"{BEGIN}\n## Client libraries' own test suites → our broker (0-9-1)\n\n{body}{END}\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def _section(text: str) -> dict[str, str]:
    if BEGIN not in text or END not in text:
        return {}
    inner = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    parts = re.split(r"(?m)^### ", inner)
    return {p.split(None, 1)[0]: "### " + p for p in parts[1:]}


@dataclass
class Run:
    """A recorded run of a suite against our broker as N processes: its lines of the section."""

    command: str
    """The command, when and how long."""
    row: str
    """Its row of the table."""
    failures: list[str]
    """Its failures' lines (``- `id`: reason``)."""


def _flag(workers: int) -> str:
    return f" --workers {workers}" if workers > 1 else ""


def _run(suite: Suite, o: Outcome, reasons: dict[str, str], workers: int) -> Run:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return Run(
        f"`python -m interop.suites {suite.name}{_flag(workers)}` ({suite.tarball}), {when}, {o.seconds:.0f}s",
        f"| amqp10 broker{_flag(workers)} (this checkout) | {o.passed} | {o.failed} | {o.errors} | {o.skipped} | |",
        [f"- `{ident}`: {reason_for(ident, message, reasons)}" for ident, message in o.failures],
    )


def _runs(section: str) -> dict[int, Run]:
    """The runs ``section`` records, by N (what :func:`_render` wrote)."""
    runs: dict[int, Run] = {}
    commands = re.findall(r"(?m)^(`python -m interop\.suites \S+(?: --workers (\d+))?` .*)$", section)
    rows = dict(
        (int(n or 1), row) for row, n in re.findall(r"(?m)^(\| amqp10 broker(?: --workers (\d+))? \(this checkout\) \|.*)$", section)
    )
    failures = dict(
        (int(n or 1), lines.splitlines())
        for n, lines in re.findall(r"(?m)^Failures(?: at `--workers (\d+)`)?:\n\n((?:- .*\n?)+)", section)
    )
    for command, n in commands:
        workers = int(n or 1)
        if workers in rows:
            runs[workers] = Run(command, rows[workers], failures.get(workers, []))
    return runs


def _render(suite: Suite, runs: dict[int, Run]) -> str:
    order = sorted(runs)
    lines = [
        f"### {suite.name}",
        "",
        *(line for n in order for line in (runs[n].command, "")),
        "| broker | passed | failed | errors | skipped | note |",
        "|---|---|---|---|---|---|",
        *(runs[n].row for n in order),
        "| {} | {} | {} | {} | {} | {} |".format(*("?" if v is None else v for v in suite.reference)),
        "",
    ]
    lines += [*suite.notes, ""] if suite.notes else []
    for n in order:
        if runs[n].failures:
            lines += [f"Failures{f' at `--workers {n}`' if n > 1 else ''}:", "", *runs[n].failures, ""]
    return "\n".join(lines) + "\n"


def reason_for(ident: str, message: str, reasons: dict[str, str]) -> str:
    """The recorded reason of a known failure (by any part of its id, a parametrized test's
    also by its name without the parameters), else its message."""
    for part in reversed(re.split(r"::|\.", ident)):
        for key in (part, part.split("[", 1)[0]):
            if key in reasons:
                return reasons[key]
    return message.replace("|", "\\|")


REASONS: dict[str, dict[str, str]] = {
    "pika": {},
    "amqplib": {
        "ipv6": "connects to [::1]:5672; the broker listens on 127.0.0.1 only here "
        "(the project's rule for servers on this machine); `--host ::1` would serve it",
        "serverProperties": "expects server property product = 'RabbitMQ'; ours says 'amqp10'",
    },
    "aiormq": {
        "test_confirm_multiple": "timed: 10 publisher confirms within 0.2 s; on this shared 2-core machine "
        "under load one batch was late (all 16 pass run alone: `-k test_confirm_multiple`)",
        "test_closing_waiter_cancellation": "timed on the client's side (a connect cancelled or timed out while "
        "the connection closes); fails against RabbitMQ 3.10 here too (4 of 32), passes run alone",
        "test_connection_close_during_publish_drain": "fails against RabbitMQ 3.10 the same way: the client's "
        "pending publish ends with a bare Exception where the test expects ConnectionClosed (client-side)",
    },
    "aio-pika": {
        "test_channel_reconnect_stairway": "reconnects through the suite's TCP proxy many times with "
        "0.1 s timeouts: TimeoutError under this shared machine's load; fails against RabbitMQ 3.10 here "
        "too (7 of its parametrizations)",
        "test_leak_unclosed_channel": "a race in the client: whether its channels' close callbacks "
        "(Channel._on_close) have run when the test collects garbage right after the connection closes "
        "depends on whether the broker's close-ok arrives while aiormq's writer still drains its "
        "Connection.Close (a prompt close-ok loses); the wire is the same (close, close-ok, the client "
        "closes the socket). Run alone (`-k leak_unclosed`, its 2 tests): against this broker 8 of 10 passed "
        "(5 runs), against RabbitMQ 3.10 on this machine 1 of 8 (4 runs)",
        "test_create_channels_during_reconnect": "a reconnect race on the client's side; fails against "
        "RabbitMQ 3.10 too (there a channel finds the connection closed)",
        "test_restore_topology_and_consumers": "restarts, stops and kills the suite's Docker container "
        "(`rabbitmqctl stop_app` by docker exec); there is none: fails against RabbitMQ 3.10 too",
        "test_pool_consumer_survives_broker_restart": "restarts the suite's Docker container; there is none: "
        "fails against RabbitMQ 3.10 too",
    },
}
"""Why a known failure fails, by test class or test name (recorded with the raw message's place)."""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m interop.suites", description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=sorted(SUITES))
    ap.add_argument("--suites", default=str(DEFAULT_SUITES), help="directory of the suite tarballs")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one, removed)")
    ap.add_argument("-k", dest="select", help="run only the tests pytest's -k selects")
    ap.add_argument("--no-write", action="store_true", help=f"do not record the counts in {RESULTS.name}")
    ap.add_argument(
        "--broker",
        choices=("ours", "rabbitmq"),
        default="ours",
        help="rabbitmq: a private RabbitMQ 3.10 instead (the reference counts; records nothing)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="our broker as N worker processes (issue 31; recorded in its own row)",
    )
    args = ap.parse_args(argv)
    suite = SUITES[args.suite]
    rabbitmq = args.broker == "rabbitmq"
    if rabbitmq and not suite.addressed:
        print(f"the {suite.name} suite hard-codes 127.0.0.1:{PORT}: it runs against ours only", file=sys.stderr)
        return 2
    if not suite.addressed and not port_free(PORT):
        print(f"127.0.0.1:{PORT} is in use: the {suite.name} suite needs it (stop what listens there)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix=f"suite-{suite.name}-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        outcome = run_suite(
            suite, Path(args.suites), workdir, select=args.select, rabbitmq=rabbitmq, workers=args.workers
        )
    if rabbitmq:
        print(f"{suite.name} against RabbitMQ: {outcome.summary()} in {outcome.seconds:.0f}s")
        for ident, message in outcome.failures:
            print(f"FAILED {ident}: {message}")
        return 1 if outcome.failed or outcome.errors else 0
    print(f"{suite.name}: {outcome.summary()} in {outcome.seconds:.0f}s")
    ref, *counts, note = suite.reference
    shown = ", ".join(f"{'?' if n is None else n} {what}" for n, what in zip(counts, ("passed", "failed", "errors", "skipped"), strict=True))
    print(f"reference: {ref}: {shown}" + (f" ({note})" if note else ""))
    for ident, message in outcome.failures:
        print(f"FAILED {ident}: {message}")
    if not args.no_write and not args.select:
        record(RESULTS, suite, outcome, REASONS.get(suite.name, {}), args.workers)
        print(f"recorded in {RESULTS}", file=sys.stderr)
    return 1 if outcome.failed or outcome.errors else 0


if __name__ == "__main__":
    sys.exit(main())
