"""``qpid.messaging`` (qpid-python 1.36, AMQP 0-10) against our broker: one command.

::

    python -m interop.qpid_messaging                  # the scenarios of interop/qpid_client.py
    python -m interop.qpid_messaging --conformance    # + qpid-python's qpid_tests.broker_0_10
    python -m interop.qpid_messaging --conformance --record   # + write interop/RESULTS.md's section

qpid-python runs under Python 2.7 (``$QPID_PYTHON2``, else pyenv's 2.7.18, else
``python2.7`` on PATH). Its PyPI sdist is fetched once with that interpreter's pip
(``pip download qpid-python==1.36.0 --no-deps``) into ``interop/.build/`` (git-ignored) and
unpacked there; nothing is installed. The conformance tests' ``qpid.testlib`` also imports
qpid-qmf 0.28 and qpid-tools 1.36.0, fetched the same way. The broker is ``amqp10 broker`` on a free port of
127.0.0.1 with a users file (:class:`~interop.peers.ours.OurBroker`), so both ANONYMOUS
and PLAIN logins are tried.

The conformance run is qpid-python's own ``qpid-python-test -m qpid_tests.broker_0_10``
logged in as the users file's user; its counts and every failing test with the last line
of its failure are printed (and recorded with ``--record``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .certs import have_openssl, make_certs, make_client_certificate
from .peers.base import Endpoint, PeerUnavailable
from .peers.ours import OurBroker

__all__ = [
    "Unavailable",
    "conformance",
    "main",
    "cross_side",
    "python2",
    "run_scenarios",
    "scenario_ids",
    "sdist",
    "start_broker",
]

HERE = Path(__file__).resolve().parent
BUILD = HERE / ".build"
RESULTS = HERE / "RESULTS.md"
CLIENT = HERE / "qpid_client.py"
VERSION = "1.36.0"
QMF_VERSION = "0.28"
BEGIN = "<!-- qpid-0-10:begin (written by interop/qpid_messaging.py) -->"
END = "<!-- qpid-0-10:end -->"
CLIENT_CN = "qpid-interop-client"
"""The subject of the client certificate the ``tls-external`` scenario logs in with."""


class Unavailable(Exception):
    """Python 2.7 or the qpid-python sdist cannot be had here (the reason)."""


def python2() -> str:
    """The Python 2.7 interpreter qpid-python runs under."""
    for candidate in (
        os.environ.get("QPID_PYTHON2"),
        "/root/.pyenv/versions/2.7.18/bin/python",
        shutil.which("python2.7"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    raise Unavailable("no Python 2.7 (set QPID_PYTHON2, or install 2.7 with pyenv)")


def fetch(package: str, version: str) -> Path:
    """``package``'s sdist, downloaded once with Python 2.7's pip and unpacked under interop/.build."""
    unpacked = BUILD / f"{package}-{version}"
    if unpacked.is_dir():
        return unpacked
    BUILD.mkdir(parents=True, exist_ok=True)
    tarball = BUILD / f"{package}-{version}.tar.gz"
    if not tarball.exists():
        proc = subprocess.run(
            [
                python2(),
                "-m",
                "pip",
                "download",
                f"{package}=={version}",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(BUILD),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode or not tarball.exists():
            raise Unavailable(
                f"pip download {package}=={version} failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
            )
    with tarfile.open(tarball) as tf:
        tf.extractall(BUILD, filter="data")
    return unpacked


def sdist() -> Path:
    """The unpacked qpid-python 1.36 sdist (``qpid.messaging``, ``qpid-python-test``)."""
    return fetch("qpid-python", VERSION)


def test_path() -> str:
    """PYTHONPATH for the conformance tests: qpid-python, and the two packages its
    ``qpid.testlib`` imports (``qmf.console`` from qpid-qmf, ``qpidtoollibs`` from qpid-tools)."""
    return os.pathsep.join(
        (
            str(sdist()),
            str(fetch("qpid-qmf", QMF_VERSION) / "src" / "py"),
            str(fetch("qpid-tools", VERSION) / "lib"),
        )
    )


def scenario_ids() -> list[str]:
    """The scenarios interop/qpid_client.py runs, in order (read from its SCENARIOS list:
    that file is Python 2.7's, it is not imported here)."""
    return re.findall(r'^\s+\("([a-z-]+)", s_\w+\),$', CLIENT.read_text(), re.M)


def _env(path: Path | str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(path)
    env.pop("PYTHONHOME", None)
    return env


@dataclass
class Outcome:
    id: str
    ok: bool
    detail: str
    seconds: float = 0.0


def start_broker(workdir: Path) -> tuple[OurBroker, Endpoint]:
    """Our broker for the scenarios: a plain listener, and a TLS one that asks for a client
    certificate signed by a throwaway CA (``CN=qpid-interop-client``, a user of its users
    file, for EXTERNAL). Stop it with ``broker.stop()``."""
    if not have_openssl():
        raise PeerUnavailable("the openssl command is needed to make the TLS certificates")
    certs = make_certs(workdir / "certs")
    client = make_client_certificate(certs, CLIENT_CN)
    broker = OurBroker(certificate_user=f"CN={CLIENT_CN}")
    endpoint = broker.start(workdir, certs)
    endpoint.extra["client_certificate"] = client
    return broker, endpoint


def run_scenarios(
    endpoint: Endpoint, only: Sequence[str] = (), timeout: float = 300
) -> list[Outcome]:
    """Run interop/qpid_client.py's scenarios against ``endpoint``."""
    root = sdist()
    user, password = endpoint.plain or ("", "")
    env = _env(root)
    client = endpoint.extra.get("client_certificate")
    if endpoint.tls_port is not None and endpoint.ca is not None and client is not None:
        env["QPID_TLS"] = os.pathsep.join(map(str, (endpoint.tls_port, endpoint.ca, *client)))
    proc = subprocess.run(
        [python2(), str(CLIENT), f"127.0.0.1:{endpoint.port}", user, password, ",".join(only)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(root),
    )
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out.append(Outcome(d["id"], d["ok"], d["detail"], d.get("seconds", 0.0)))
    if proc.returncode and not out:
        raise RuntimeError(f"qpid_client.py failed: {proc.stderr.strip()[-500:]}")
    return out


def cross_side(action: str, endpoint: Endpoint, queue: str, timeout: float = 60) -> dict[str, Any]:
    """qpid.messaging's side of a cross-protocol matrix row: ``action`` "send" (the 0-10
    message of interop/qpid_client.py's ``cross_send``) or "receive" (one message from
    ``queue``, as qpid.messaging reads it) on ``endpoint``; what it printed."""
    root = sdist()
    user, password = endpoint.plain or ("", "")
    proc = subprocess.run(
        [python2(), str(CLIENT), f"--{action}", f"127.0.0.1:{endpoint.port}", user, password, queue],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(root),
        cwd=str(root),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"qpid.messaging --{action}: {proc.stderr.strip().splitlines()[-1:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@dataclass
class Conformance:
    """qpid-python-test's outcome."""

    total: int = 0
    passed: int = 0
    dtx_passed: int = 0
    """Of ``passed``, the ``dtx`` (XA) tests."""
    failed: dict[str, str] = field(default_factory=dict)
    """Each failing test and the last line of its failure."""
    skipped: int = 0
    seconds: float = 0.0
    command: str = ""


_RESULT = re.compile(r"^(qpid_tests\.\S+) \.+ (pass|fail|skip)\s*$")
_TOTALS = re.compile(
    r"Totals: (\d+) tests, (\d+) passed, (\d+) skipped, (\d+) ignored, (\d+) failed"
)


def conformance(
    endpoint: Endpoint, patterns: Sequence[str] = (), timeout: float = 1800
) -> Conformance:
    """qpid-python's ``qpid_tests.broker_0_10`` against ``endpoint`` (as its PLAIN user)."""
    root = sdist()
    user, password = endpoint.plain or ("guest", "guest")
    broker = f"{user}/{password}@127.0.0.1:{endpoint.port}"
    patterns = list(patterns) or ["qpid_tests.broker_0_10.*"]  # (not the client's own qpid.tests)
    cmd = [python2(), "qpid-python-test", "-b", broker, "-m", "qpid_tests.broker_0_10", *patterns]
    start = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=_env(test_path()), cwd=str(root)
    )
    result = parse_results(proc.stdout)
    if not result.total:
        raise RuntimeError(
            f"qpid-python-test ran nothing: {(proc.stderr or proc.stdout).strip()[-500:]}"
        )
    result.seconds = time.monotonic() - start
    result.command = " ".join(["qpid-python-test", "-m", "qpid_tests.broker_0_10", *patterns])
    return result


def parse_results(stdout: str) -> Conformance:
    """qpid-python-test's output read: counts, and each failure's last line.

    A test's line is its name, dots and its status; a long name is broken onto two lines
    (``the.Class. \\``, then the method indented); a failure's traceback follows its line."""
    result = Conformance()
    current: str | None = None
    lines: list[str] = []
    pending_name = ""
    for line in stdout.splitlines():
        stripped = line.strip()
        m = _RESULT.match(stripped) or _RESULT.match(
            f"{pending_name}{stripped}" if pending_name else ""
        )
        if m:
            pending_name = ""
            if current is not None:
                result.failed[current] = _reason(lines)
                current = None
            name, status = m.groups()
            result.total += 1
            if status == "pass":
                result.passed += 1
                result.dtx_passed += ".dtx." in name
            elif status == "skip":
                result.skipped += 1
            else:
                current, lines = name, []
            continue
        if re.fullmatch(r"qpid_tests\.\S+\. \\", stripped):
            pending_name = stripped[:-2]  # a long name: its method and status on the next line
            if current is not None:
                result.failed[current] = _reason(lines)
                current = None
            continue
        if current is not None:
            if _TOTALS.search(line):
                result.failed[current] = _reason(lines)
                current = None
            else:
                lines.append(line)
    if current is not None:
        result.failed[current] = _reason(lines)
    return result


def _reason(lines: list[str]) -> str:
    text = [ln.strip() for ln in lines if ln.strip() and not set(ln.strip()) <= {"-", "="}]
    for ln in reversed(text):
        if not ln.startswith(("File ", "Traceback")):
            return ln[:300]
    return "(no output)"


def render(outcomes: list[Outcome], conf: Conformance | None) -> str:
    lines = ["| scenario | qpid.messaging 1.36 → our broker | detail |", "|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o.id} | {'pass' if o.ok else 'FAIL'} | {o.detail.replace('|', '/')} |")
    if conf is not None:
        lines += [
            "",
            f"`{conf.command}` (qpid-python {VERSION}'s own 0-10 broker tests), {conf.seconds:.0f}s: "
            f"{conf.total} tests, {conf.passed} passed, {len(conf.failed)} failed, {conf.skipped} skipped.",
        ]
        if conf.failed:
            qmf = [
                n
                for n, why in conf.failed.items()
                if "qmf" in why or "qpid.management" in why or ".management.ManagementTest." in n
            ]  # (the management module's tests are QMF's: its old API times out with no answer)
            dtx = [n for n in conf.failed if ".dtx." in n]
            dtx_passed = conf.dtx_passed
            lines += [
                "",
                f"`dtx` (the XA tests, {dtx_passed + len(dtx)}): {dtx_passed} pass. "
                f"Of the failures, {len(qmf)} need QMF, the Qpid C++ broker's management agent "
                f"(`qpid.management`, `qmf.default.*`: listed, not built); the other "
                f"{len(conf.failed) - len(qmf)} are Qpid broker features the core lacks or "
                "differ in detail, as each line says.",
            ]
            lines += ["", "Failures (the last line of each):", ""]
            lines += [
                f"- `{name}`: {why.replace('|', '/')}" for name, why in sorted(conf.failed.items())
            ]
    return "\n".join(lines)


def record(text: str, when: str) -> None:
    """Write the section between BEGIN and END at the end of interop/RESULTS.md."""
    doc = RESULTS.read_text() if RESULTS.exists() else ""
    section = (
        f"{BEGIN}\n## qpid.messaging (qpid-python {VERSION}, AMQP 0-10) → our broker\n\n"
        f"`python -m interop.qpid_messaging --conformance --record`, {when}\n\n{text}\n{END}\n"
    )
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + section + doc[doc.index(END) + len(END) :].lstrip("\n")
    else:
        doc = doc.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(doc)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m interop.qpid_messaging", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--only", default="", help="comma-separated scenario ids")
    p.add_argument("--conformance", action="store_true", help="also run qpid_tests.broker_0_10")
    p.add_argument(
        "--tests", nargs="*", default=(), help="qpid-python-test patterns (with --conformance)"
    )
    p.add_argument("--record", action="store_true", help="write the section in interop/RESULTS.md")
    p.add_argument("--workdir", help="keep the broker's config, store and log here")
    args = p.parse_args(argv)
    try:
        sdist()
        python2()
    except Unavailable as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="qpid010-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        try:
            broker, endpoint = start_broker(workdir)
        except PeerUnavailable as exc:
            print(f"our broker did not start: {exc}", file=sys.stderr)
            return 1
        try:
            outcomes = run_scenarios(endpoint, [s for s in args.only.split(",") if s])
            conf = conformance(endpoint, args.tests) if args.conformance else None
        finally:
            broker.stop()
    text = render(outcomes, conf)
    print(text)
    if args.record:
        record(text, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
