"""Our broker as a peer: ``python -m amqp10.cli broker --config ...`` in a subprocess.

It listens on 127.0.0.1 with a plain and a TLS listener, offers ANONYMOUS and
PLAIN (a users file made with ``amqp10 users add``), and has a short idle
timeout so that the idle-timeout scenario does not take long.

At ``AMQP10_TEST_WORKERS=N`` > 1 (the test suite's switch, ``tests/broker/workers_mode.py``)
it is ``amqp10 broker --workers N``, ready once every worker listens: the interop tests
then run against the broker of N processes (``make test-workers2``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from ..certs import Certs
from .base import HOST, Endpoint, Peer, PeerUnavailable, Process

__all__ = ["LISTENING", "OurBroker", "broker_command", "run_workers"]

USER, PASSWORD = "interop", "interop-secret"
IDLE_TIMEOUT = 2.0
START_TIMEOUT = 30.0

LISTENING = r'logger=amqp10\.broker msg="listening on 127\.0\.0\.1:(\d+)( \(TLS\))?"'
"""The line the broker (at N > 1: each worker, not the parent) logs for each AMQP listener."""
HTTP_LISTENING = r'logger=amqp10\.broker msg="HTTP on 127\.0\.0\.1:(\d+)'


def broker_command(*args: str, workers: int = 1) -> tuple[list[str], dict[str, str]]:
    """``amqp10 broker ARGS`` with this interpreter, as ``workers`` processes: its argv and
    environment (at N > 1 ``--workers N``)."""
    argv = [sys.executable, "-m", "amqp10.cli", "broker", *args]
    env = dict(os.environ)
    if workers > 1:
        argv += ["--workers", str(workers)]
    return argv, env


def run_workers() -> int:
    """The N of the test run (``AMQP10_TEST_WORKERS``, read by the test suite's own rule)."""
    from tests.broker.workers_mode import worker_count

    return worker_count()


class OurBroker(Peer):
    id = "ours"
    title = "our broker"

    def __init__(
        self,
        idle_timeout: float = IDLE_TIMEOUT,
        websocket: str = "",
        port: int = 0,
        plain: bool = True,
        config: str = "",
        title: str = "",
        certificate_user: str = "",
    ) -> None:
        """``websocket``: "ws" or "wss" to reach the broker over its HTTP listener (wss: TLS);
        ``port``: its plain listener's port (0: a free one); ``plain``: a users file for
        SASL PLAIN (making one takes a process start and a password hash); ``config``: more
        of its TOML config (tables after the others); ``title``: what the matrix calls it;
        ``certificate_user``: a user of the users file that a client certificate the test
        CA signed logs in as with SASL EXTERNAL on the TLS listener (which then asks for one)."""
        self.idle_timeout = idle_timeout
        self.websocket = websocket
        self.port = port
        self.plain = plain
        self.config = config
        self.certificate_user = certificate_user
        if title:
            self.title = title
        self.proc: Process | None = None
        self.workers = 1

    def start(self, workdir: Path, certs: Certs | None) -> Endpoint:
        d = workdir / "our-broker"
        d.mkdir(parents=True, exist_ok=True)
        users = d / "users.toml"

        def add_user(name: str, password: str, *more: str) -> None:
            subprocess.run(
                [sys.executable, "-m", "amqp10.cli", "users", "add", str(users), name, "--password", password, *more],
                check=True,
                capture_output=True,
                timeout=60,
            )

        if self.plain:
            add_user(USER, PASSWORD)
        external = bool(self.certificate_user) and certs is not None and self.plain
        if external:  # (a password it never uses)
            add_user(self.certificate_user, secrets.token_hex(8), "--iterations", "1000")
        listeners = [f'[[listeners]]\nhost = "{HOST}"\nport = {self.port}\n']
        if certs is not None:
            listeners.append(
                f'[[listeners]]\nhost = "{HOST}"\nport = 0\n'
                f'tls_cert = "{certs.server_cert}"\ntls_key = "{certs.server_key}"\n'
                + (f'tls_ca = "{certs.ca}"\n' if external else "")
            )
        config = d / "broker.toml"
        config.write_text(
            'container_id = "amqp10-interop-broker"\nlog_level = "info"\n'
            + "\n".join(listeners)
            + (f'\n[sasl]\nusers_file = "{users}"\n' if self.plain else "")
            + ('mechanisms = ["EXTERNAL", "ANONYMOUS", "PLAIN", "SCRAM-SHA-256"]\n' if external else "")
            + f'\n[store]\npath = "{d / "store.sqlite3"}"\ncommit_interval_ms = 1\n'
            + f"\n[limits]\nidle_timeout = {self.idle_timeout}\n"
            + self._http_config(certs)
            + ("\n" + self.config if self.config else "")
        )
        self.workers = run_workers()
        argv, env = broker_command("--config", str(config), workers=self.workers)
        self.proc = proc = Process(argv, d / "broker.log", env=env)
        want = 2 if certs is not None else 1
        found = proc.wait_count(LISTENING, want * self.workers, START_TIMEOUT)
        ports = {bool(m.group(2)): int(m.group(1)) for m in found}
        if len(found) < want * self.workers or len(ports) < want:
            raise PeerUnavailable(f"our broker did not start: {proc.last_lines(3)}")
        if self.websocket:
            return self._websocket_endpoint(proc, certs)
        return Endpoint(
            name=self.title,
            port=ports[False],
            tls_port=ports.get(True),
            ca=certs.ca if certs is not None else None,
            plain=(USER, PASSWORD) if self.plain else None,
            idle_timeout=self.idle_timeout,
            log=d / "broker.log",
            version=_version(),
            extra={"process": proc},
        )

    def _http_config(self, certs: Certs | None) -> str:
        if not self.websocket:
            return ""  # the default: an HTTP listener on a free port, unused here
        tls = ""
        if self.websocket == "wss":
            if certs is None:
                raise PeerUnavailable("wss:// needs the test certificates")
            tls = f'tls_cert = "{certs.server_cert}"\ntls_key = "{certs.server_key}"\n'
        return f'\n[http]\nhost = "{HOST}"\nport = 0\n' + tls

    def _websocket_endpoint(self, proc: Process, certs: Certs | None) -> Endpoint:
        found = proc.wait_count(HTTP_LISTENING, self.workers, START_TIMEOUT)
        if len(found) < self.workers:
            raise PeerUnavailable(f"our broker's HTTP listener did not start: {proc.last_lines(3)}")
        port = int(found[0].group(1))
        wss = self.websocket == "wss"
        return Endpoint(
            name=f"{self.title} over {self.websocket}://",
            port=port,
            tls_port=port if wss else None,
            ca=certs.ca if certs is not None and wss else None,
            scheme=self.websocket,
            path="/$amqp",
            plain=(USER, PASSWORD),
            idle_timeout=self.idle_timeout,
            log=proc.log,
            version=_version(),
            extra={"process": proc},
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=15)
            self.proc = None


def _version() -> str:
    import amqp10

    return f"amqp10 {amqp10.__version__}"
