"""Proton's own Python examples against our broker, unmodified, where Debian installs them.

Debian's ``libqpid-proton11-dev-examples`` installs Proton's Python examples in
``/usr/share/proton/examples/python`` together with Proton's own test of them,
``test_examples.py`` (a ``unittest`` module that runs each example as a program
and compares what it prints). The examples connect to ``localhost:5672`` (most
hard-code it), and the "direct" ones listen on ``localhost:8888``; so this runner
gives them a private network namespace (``unshare --net``: only its own loopback,
brought up here, nothing else reachable, no port shared with anyone), starts our
broker there on 127.0.0.1:5672, and runs:

- **one by one**: each example test that needs a broker, in a fresh broker;
- **in one sequence**: all of ``test_examples.py`` (the direct ones too) and then the
  examples it does not cover, against one broker.

The examples ``test_examples.py`` does not cover, which need a broker, are driven
here the way their README describes them: ``queue_browser.py`` (browses
``examples``: it prints messages, which are still there afterwards),
``abstract_server.py`` (a server on ``proton_server.py``, answering ``client.py``)
and ``tx_recv_interactive.py`` (``fetch``/``abort``/``commit`` typed on its stdin).
Nothing of the examples is copied here: they run from the Debian package's
directory, with the Python that runs this module (its ``python-qpid-proton``).

``python -m interop.proton_examples [--mode one-by-one|sequence|both] [--json]``
prints one line per example test (or a JSON document) and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from .peers.base import Endpoint, PeerUnavailable, apt_install
from .peers.ours import OurBroker
from .scenarios.proton_c import dpkg_version

__all__ = [
    "EXAMPLES_PACKAGE",
    "EXTRA",
    "examples_dir",
    "needs_broker",
    "run_examples",
    "unittest_names",
]

EXAMPLES_PACKAGE = "libqpid-proton11-dev-examples"
_DIRS = (
    Path("/usr/share/proton/examples/python"),
    Path("/usr/share/doc/libqpid-proton11-dev-examples/examples/python"),
)
BROKER_PORT = 5672  # what the examples connect to
CASE_TIMEOUT = 90.0  # one test_examples test (it has no time limits of its own)
WAIT = 20.0  # one wait for an example's output line
NETNS_ENV = "AMQP10_PROTON_EXAMPLES_NETNS"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
BEGIN = "<!-- proton-examples:begin (written by interop/proton_examples.py) -->"
END = "<!-- proton-examples:end -->"


def examples_dir() -> Path | None:
    for d in _DIRS:
        if (d / "test_examples.py").exists():
            return d
    return None


def unittest_names(directory: Path) -> list[str]:
    """The test methods of Proton's ``test_examples.py`` (read from its source, in order)."""
    tree = ast.parse((directory / "test_examples.py").read_text())
    return [
        f.name
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "ExamplesTest"
        for f in cls.body
        if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
    ]


def needs_broker(name: str) -> bool:
    """The "direct" examples talk to each other, not to a broker."""
    return "direct" not in name


# -- the examples test_examples.py does not run -----------------------------------------------
class Program:
    """An example program in its own process group, whose output lines are collected."""

    def __init__(self, directory: Path, argv: list[str], *, stdin: bool = False) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # line by line through the pipe
        self.proc = subprocess.Popen(
            [sys.executable, str(directory / argv[0]), *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_lines(self, n: int, timeout: float = WAIT) -> list[str]:
        """Wait until ``n`` lines were printed (or the program ended, or ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.lines) < n and self._reader.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            return list(self.lines)

    def wait_for(self, text: str, after: int = 0, timeout: float = WAIT) -> int:
        """The index of the first line from ``after`` on equal to ``text``; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(after, len(self.lines)):
                    if self.lines[i] == text:
                        return i
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(f"no {text!r} line; it printed {self.lines[after:]}")
                self._cond.wait(min(left, 0.5))

    def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = WAIT) -> list[str]:
        """Wait for the program to end by itself (bounded); its output."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"did not end within {timeout:g}s; printed {self.lines}") from None
        self._reader.join(5)
        return list(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(5)
        self._reader.join(5)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


@contextlib.contextmanager
def _program(directory: Path, argv: list[str], *, stdin: bool = False) -> Iterator[Program]:
    p = Program(directory, argv, stdin=stdin)
    try:
        yield p
    finally:
        p.stop()


def _sequence(n: int, start: int = 1) -> list[str]:
    return ["{'sequence': %i}" % i for i in range(start, start + n)]


def _send(directory: Path, n: int) -> None:
    with _program(directory, ["simple_send.py", "-m", str(n)]) as s:
        out = s.finish()
    assert out == ["all messages confirmed"], f"simple_send.py printed {out}"


def _receive(directory: Path, n: int) -> list[str]:
    with _program(directory, ["simple_recv.py", "-m", str(n)]) as r:
        return r.finish()


def queue_browser(directory: Path) -> None:
    """``queue_browser.py`` prints what ``examples`` holds, in order, and leaves it there."""
    _send(directory, 10)
    with _program(directory, ["queue_browser.py"]) as b:
        printed = b.finish()  # each line is a Message's repr
    seen = [int(m.group(1)) for m in map(re.compile(r"'sequence': (\d+)").search, printed) if m]
    assert printed and seen == list(range(1, len(printed) + 1)), (
        f"queue_browser.py printed {printed}"
    )
    got = _receive(directory, 10)
    assert got == _sequence(10), f"after browsing, simple_recv.py got {got}"


def abstract_server(directory: Path) -> None:
    """``abstract_server.py`` (``proton_server.Server``, an anonymous sender) answers ``client.py``."""
    with (
        _program(directory, ["abstract_server.py"]) as server,
        _program(directory, ["client.py"]) as client,
    ):
        out = client.finish()
        assert len(out) == 4 and all(
            " => " in line and line.split(" => ")[1] == line.split(" => ")[0].upper()
            for line in out
        ), f"client.py printed {out}"
        lines = server.wait_lines(4)
        assert sum(ln.startswith("Request from: ") for ln in lines) == 4, f"server printed {lines}"


def tx_recv_interactive(directory: Path) -> None:
    """``tx_recv_interactive.py``: a fetch in an aborted transaction comes back; a committed one not."""
    _send(directory, 3)
    with _program(directory, ["tx_recv_interactive.py"], stdin=True) as rx:
        at = rx.wait_for("transaction declared")
        rx.type("fetch")
        at = rx.wait_for("{'sequence': 1}", at)
        rx.type("abort")
        at = rx.wait_for("transaction aborted", at)
        at = rx.wait_for("transaction declared", at)
        rx.type("fetch")  # the aborted acceptance is undone: message 1 again
        at = rx.wait_for("{'sequence': 1}", at)
        rx.type("commit")
        at = rx.wait_for("transaction committed", at)
        rx.wait_for("transaction declared", at)
        rx.type("quit")
        rx.proc.stdin.close()  # type: ignore[union-attr]
        rx.finish()
    got = _receive(directory, 2)
    assert got == _sequence(2, start=2), f"after the commit, simple_recv.py got {got}"


EXTRA: dict[str, Callable[[Path], None]] = {
    "queue_browser": queue_browser,
    "abstract_server": abstract_server,
    "tx_recv_interactive": tx_recv_interactive,
}


# -- running test_examples.py -----------------------------------------------------------------
_RESULT = re.compile(r"^(test_\w+) \(test_examples\.ExamplesTest\.\1\) \.\.\. (ok|FAIL|ERROR)$")


def _run_unittest(directory: Path, names: list[str], work: Path) -> dict[str, dict[str, str]]:
    """Run ``test_examples.ExamplesTest.<name>`` for each name in one ``unittest`` process."""
    env = dict(os.environ, PYTHONPATH=str(directory))
    # the examples start as "#!/usr/bin/env python3": the Python running this module
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    argv = [sys.executable, "-m", "unittest", "-v"]
    argv += [f"test_examples.ExamplesTest.{n}" for n in names]
    proc = subprocess.Popen(
        argv,
        cwd=work,  # db_ctrl.py makes ./src_db and ./dst_db
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=CASE_TIMEOUT * len(names))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        out, _ = proc.communicate(timeout=10)
        out += f"\n(timed out after {CASE_TIMEOUT * len(names):g}s)"
    results: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        m = _RESULT.match(line.strip())
        if m:
            status = "pass" if m.group(2) == "ok" else "fail"
            results[m.group(1)] = {"status": status, "detail": ""}
    for name, status in results.items():
        if status["status"] == "fail":
            status["detail"] = _failure(out, name)
    for name in names:
        results.setdefault(name, {"status": "fail", "detail": _tail(out)})
    return results


def _failure(out: str, name: str) -> str:
    """The exception line of ``name``'s traceback in unittest's report."""
    block = re.search(
        rf"^(?:FAIL|ERROR): {name} .*?(?=^={{20,}}|^-{{20,}}\nRan )", out, re.M | re.S
    )
    if not block:
        return _tail(out)
    lines = [ln for ln in block.group(0).splitlines() if re.match(r"^\w*(Error|Exception)", ln)]
    return (lines[-1] if lines else _tail(block.group(0)))[:300]


def _tail(out: str) -> str:
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:300]


def _run_extra(directory: Path, name: str) -> dict[str, str]:
    try:
        EXTRA[name](directory)
    except Exception as exc:  # a failed check or a broken example: the cell says which
        return {"status": "fail", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    return {"status": "pass", "detail": ""}


@contextlib.contextmanager
def _broker(work: Path) -> Iterator[Endpoint]:
    broker = OurBroker(port=BROKER_PORT, plain=False)  # the examples log in anonymously
    with broker.running(work, None) as ep:
        yield ep


def run_examples(mode: str, work: Path, directory: Path) -> dict[str, Any]:
    """Run the examples against our broker on 127.0.0.1:5672 (in this network namespace)."""
    names = unittest_names(directory)
    report: dict[str, Any] = {"examples": str(directory), "tests": names, "extra": list(EXTRA)}
    if mode in ("one-by-one", "both"):
        started = time.monotonic()
        one: dict[str, dict[str, str]] = {}
        for i, name in enumerate([n for n in names if needs_broker(n)] + list(EXTRA)):
            case = work / f"one-{i:02d}-{name}"
            case.mkdir()
            with _broker(case):
                if name in EXTRA:
                    one[name] = _run_extra(directory, name)
                else:
                    one.update(_run_unittest(directory, [name], case))
        report["one-by-one"] = {"results": one, "seconds": round(time.monotonic() - started, 1)}
    if mode in ("sequence", "both"):
        started = time.monotonic()
        case = work / "sequence"
        case.mkdir()
        with _broker(case):
            seq = _run_unittest(directory, names, case)
            for name in EXTRA:
                seq[name] = _run_extra(directory, name)
        report["sequence"] = {"results": seq, "seconds": round(time.monotonic() - started, 1)}
    return report


# -- a private network namespace --------------------------------------------------------------
def loopback_up() -> None:
    """``ip link set lo up``, without iproute2 (SIOCGIFFLAGS / SIOCSIFFLAGS on ``lo``)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, siocgifflags, struct.pack("16sH", b"lo", 0))
        flags = struct.unpack("16sH", ifr[:18])[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def _in_netns(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``python -m interop.proton_examples ARGV`` again inside ``unshare --net``."""
    if shutil.which("unshare") is None:
        raise PeerUnavailable("unshare (util-linux) is not installed")
    repo = Path(__file__).resolve().parents[1]
    cmd = ["unshare", "--net", "--", sys.executable, "-m", "interop.proton_examples", *argv]
    env = dict(os.environ, **{NETNS_ENV: "1"})
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m interop.proton_examples", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--mode",
        choices=("one-by-one", "sequence", "both"),
        default="both",
        help="each example test in a fresh broker, all against one broker, or both (default)",
    )
    p.add_argument("--json", action="store_true", help="print the results as one JSON document")
    p.add_argument(
        "--install",
        action="store_true",
        help=f"apt-get install {EXAMPLES_PACKAGE} first if its examples are missing",
    )
    p.add_argument(
        "--workdir", help="keep broker logs and example files here (default: a temp dir)"
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write the results into their marked section of interop/RESULTS.md",
    )
    args = p.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    try:
        if examples_dir() is None and args.install:
            apt_install(EXAMPLES_PACKAGE)
        directory = examples_dir()
        if directory is None:
            raise PeerUnavailable(
                f"Proton's Python examples are not installed (apt-get install {EXAMPLES_PACKAGE})"
            )
        if os.environ.get(NETNS_ENV) != "1":
            inner = [a for a in given if a not in ("--install", "--record")]
            if args.record:
                return _recorded(
                    inner, args.json, " ".join(["python -m interop.proton_examples", *given])
                )
            r = _in_netns(inner, timeout=1200)
            sys.stdout.write(r.stdout)
            sys.stderr.write(r.stderr)
            if r.returncode not in (0, 1) and not args.json:
                print(f"unshare --net failed (status {r.returncode})", file=sys.stderr)
            return r.returncode
        loopback_up()
        with contextlib.ExitStack() as stack:
            if args.workdir:
                work = Path(args.workdir)
                work.mkdir(parents=True, exist_ok=True)
            else:
                work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="proton-ex-")))
            report = run_examples(args.mode, work, directory)
    except PeerUnavailable as exc:
        if args.json:
            print(json.dumps({"error": str(exc)}))
        else:
            print(f"cannot run Proton's examples: {exc}", file=sys.stderr)
        return 2
    return _print(report, args.json)


def _recorded(inner: list[str], as_json: bool, command: str) -> int:
    """Run in the namespace for a JSON report, write it into RESULTS.md, print it."""
    r = _in_netns([*inner, "--json"] if "--json" not in inner else inner, timeout=1200)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"error": (r.stderr or r.stdout)[-300:]}
    if "error" in report:
        print(f"cannot run Proton's examples: {report['error']}", file=sys.stderr)
        return 2
    record(RESULTS, report, command)
    return _print(report, as_json)


def record(path: Path, report: dict[str, Any], command: str) -> None:
    """Write ``report`` into ``path``'s marked section (replaced; appended if absent)."""
    version = dpkg_version(EXAMPLES_PACKAGE)
    import proton

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    one = report.get("one-by-one", {}).get("results", {})
    seq = report.get("sequence", {}).get("results", {})
    rows = [
        "| example test | one by one (fresh broker) | in one sequence (one broker) |",
        "|---|---|---|",
    ]
    for name in [*report["tests"], *report["extra"]]:
        cells = [_cell(part.get(name)) if part else "not run" for part in (one, seq)]
        if report.get("one-by-one") and name not in one:
            cells[0] = "n/a (no broker: a direct example)"
        rows.append(f"| `{name}` | {cells[0]} | {cells[1]} |")
    totals = [
        f"{mode}: {sum(v['status'] == 'pass' for v in part.values())} of {len(part)} passed"
        f", {report[mode]['seconds']}s"
        for mode, part in (("one-by-one", one), ("sequence", seq))
        if part
    ]
    block = "\n".join(
        [
            BEGIN,
            "## Proton's own Python examples → our broker",
            "",
            f"`{command}`, {when}: Debian {EXAMPLES_PACKAGE} {version}"
            f" ({report['examples']}), python-qpid-proton {'.'.join(map(str, proton.VERSION))}."
            " Their `test_examples.py` runs unmodified; the last three rows are the"
            " broker-needing examples it leaves out (see interop/README.md).",
            "",
            *rows,
            "",
            "; ".join(totals) + ".",
            END,
            "",
        ]
    )
    write_section(path, block, BEGIN, END)


def write_section(path: Path, block: str, begin: str, end: str) -> None:
    """Put ``block`` (from its ``begin`` marker to its ``end`` marker) into ``path``: in
    place of the marked section there, or appended if there is none."""
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def _cell(result: dict[str, str] | None) -> str:
    if result is None:
        return "not run"
    return "pass" if result["status"] == "pass" else f"FAIL ({result['detail'][:120]})"


def _print(report: dict[str, Any], as_json: bool, out: IO[str] = sys.stdout) -> int:
    failed = 0
    for mode in ("one-by-one", "sequence"):
        part = report.get(mode)
        if part is None:
            continue
        for name, r in part["results"].items():
            failed += r["status"] != "pass"
            if not as_json:
                detail = f" ({r['detail']})" if r["detail"] else ""
                print(f"{mode:10} {name:32} {r['status']}{detail}", file=out)
        if not as_json:
            n = len(part["results"])
            print(
                f"{mode}: {n - sum(r['status'] == 'pass' for r in part['results'].values())} "
                f"of {n} failed, {part['seconds']}s",
                file=out,
            )
    if as_json:
        print(json.dumps(report), file=out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
