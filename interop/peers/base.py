"""What every peer of the matrix shares: its endpoint description and process handling.

A *peer* is the server side of a pairing (our broker, the Proton broker, RabbitMQ,
ActiveMQ). ``start()`` brings it up on 127.0.0.1 and returns an :class:`Endpoint`
that the client drivers read; ``stop()`` takes it down with bounded waits. A peer
that cannot run here raises :class:`PeerUnavailable` with the reason, which the
matrix shows in every cell of its column.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..certs import Certs

__all__ = [
    "HOST",
    "Endpoint",
    "Peer",
    "PeerUnavailable",
    "Process",
    "apt_install",
    "free_port",
    "wait_for_port",
]

HOST = "127.0.0.1"


class PeerUnavailable(Exception):
    """The peer cannot run here (not installed, not startable); ``str()`` says why."""


@dataclass
class Endpoint:
    """How a client reaches a running peer, and what the peer is known to lack.

    ``na`` maps scenario ids to the reason the peer cannot do that scenario
    (checked before running it). ``address`` turns a queue name into the
    peer's address syntax. ``plain`` is a (user, password) pair for SASL PLAIN.
    """

    name: str
    port: int
    tls_port: int | None = None
    ca: Path | None = None
    tls_hostname: str = "localhost"
    plain: tuple[str, str] | None = None
    idle_timeout: float | None = None
    """The idle timeout the peer was configured with (seconds), if any."""
    na: dict[str, str] = field(default_factory=dict)
    faults: list[tuple[str, str, str]] = field(default_factory=list)
    """Known bugs of the peer: (scenario id, regex on the failure, explanation). A failure
    that matches is shown as n/a ("peer bug: ...") instead of FAIL."""
    address: Callable[[str], str] = field(default=lambda name: name)
    log: Path | None = None
    version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    scheme: str = "amqp"
    """``amqp``, or ``ws``/``wss`` for AMQP over WebSockets (then ``path`` is the HTTP path)."""
    path: str = ""

    @property
    def url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.port}{self.path}"

    @property
    def tls_url(self) -> str | None:
        if self.tls_port is None:
            return None
        scheme = "amqps" if self.scheme == "amqp" else "wss"
        return f"{scheme}://{HOST}:{self.tls_port}{self.path}"

    def log_text(self) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return self.log.read_text(errors="replace")


class Peer:
    """A server peer: ``with peer.running(workdir, certs) as endpoint: ...``."""

    id = "peer"
    title = "peer"

    def available(self) -> str | None:
        """None if the peer can be started here, else why not (e.g. not installed)."""
        return None

    def install(self) -> None:
        """Install what the peer needs (apt-get); only called with ``--install``."""

    def start(self, workdir: Path, certs: Certs | None) -> Endpoint:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def running(self, workdir: Path, certs: Certs | None) -> Any:
        reason = self.available()
        if reason is not None:
            raise PeerUnavailable(reason)
        try:
            endpoint = self.start(workdir, certs)
        except BaseException:
            self.stop()
            raise
        try:
            yield endpoint
        finally:
            self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Poll until something accepts on 127.0.0.1:``port``; False after ``timeout`` or if not ``alive()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((HOST, port)) == 0:
                return True
        time.sleep(0.2)
    return False


def apt_install(*packages: str, timeout: float = 900) -> None:
    """``apt-get install -y`` (non-interactive; one ``apt-get update`` and a retry if that fails).

    Raises PeerUnavailable with apt's last line on failure.
    """
    if shutil.which("apt-get") is None:
        raise PeerUnavailable("apt-get is not available on this machine")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    last = ""
    for attempt in range(2):
        if attempt:
            subprocess.run(
                ["apt-get", "update"], capture_output=True, timeout=timeout, env=env, check=False
            )
        try:
            subprocess.run(install, check=True, capture_output=True, timeout=timeout, env=env)
            return
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            tail = getattr(exc, "stderr", b"") or b""
            lines = tail.decode(errors="replace").strip().splitlines() or [str(exc)]
            last = lines[-1]
    raise PeerUnavailable(f"apt-get install {' '.join(packages)} failed: {last}")


class Process:
    """A child process whose output goes to a log file, watched for lines that say it is ready.

    ``stop()`` sends SIGTERM to the whole process group, waits ``grace``
    seconds, then SIGKILLs it: it never waits without a bound.
    """

    def __init__(
        self,
        argv: list[str],
        log: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = argv
        self.log = log
        self._lines: list[str] = []
        self._cond = threading.Condition(threading.RLock())
        self._logf: IO[str] = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group: stop() reaches its children
        )
        self._reader = threading.Thread(target=self._read, name=f"log:{log.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._logf.write(line)
            self._logf.flush()
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        with self._cond:
            return "\n".join(self._lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str] | None:
        """The first output line matching ``pattern`` (regex), waiting at most ``timeout`` seconds."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self._lines)
                left = deadline - time.monotonic()
                if left <= 0 or (not self.alive and not self._reader.is_alive()):
                    return None
                self._cond.wait(min(left, 0.5))

    def wait_count(self, pattern: str, n: int, timeout: float) -> list[re.Match[str]]:
        """Wait until ``n`` output lines match ``pattern`` (at most ``timeout`` seconds); the matches so far."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = self.all_matches(pattern)
                left = deadline - time.monotonic()
                if len(found) >= n or left <= 0 or (not self.alive and not self._reader.is_alive()):
                    return found
                self._cond.wait(min(left, 0.5))

    def all_matches(self, pattern: str) -> list[re.Match[str]]:
        rx = re.compile(pattern)
        with self._cond:
            return [m for m in (rx.search(line) for line in self._lines) if m]

    def stop(self, grace: float = 15.0) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(5)
        else:
            # the leader is gone; children it left in its group go too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._logf.close()

    def last_lines(self, n: int = 5, pattern: str | None = None) -> str:
        with self._cond:
            lines = self._lines
            if pattern is not None:
                rx = re.compile(pattern)
                lines = [ln for ln in lines if rx.search(ln)]
            return " | ".join(ln.strip() for ln in lines[-n:])
