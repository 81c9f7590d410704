"""Our broker as a peer: ``python -m amqp10.cli broker --config ...`` in a subprocess.

It listens on 127.0.0.1 with a plain and a TLS listener, offers ANONYMOUS and
PLAIN (a users file made with ``amqp10 users add``), and has a short idle
timeout so that the idle-timeout scenario does not take long.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..certs import Certs
from .base import HOST, Endpoint, Peer, PeerUnavailable, Process

__all__ = ["OurBroker"]

USER, PASSWORD = "interop", "interop-secret"
IDLE_TIMEOUT = 2.0
START_TIMEOUT = 30.0


class OurBroker(Peer):
    id = "ours"
    title = "our broker"

    def __init__(self, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.idle_timeout = idle_timeout
        self.proc: Process | None = None

    def start(self, workdir: Path, certs: Certs | None) -> Endpoint:
        d = workdir / "our-broker"
        d.mkdir(parents=True, exist_ok=True)
        users = d / "users.toml"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "amqp10.cli",
                "users",
                "add",
                str(users),
                USER,
                "--password",
                PASSWORD,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        listeners = [f'[[listeners]]\nhost = "{HOST}"\nport = 0\n']
        if certs is not None:
            listeners.append(
                f'[[listeners]]\nhost = "{HOST}"\nport = 0\n'
                f'tls_cert = "{certs.server_cert}"\ntls_key = "{certs.server_key}"\n'
            )
        config = d / "broker.toml"
        config.write_text(
            'container_id = "amqp10-interop-broker"\nlog_level = "info"\n'
            + "\n".join(listeners)
            + f'\n[sasl]\nusers_file = "{users}"\n'
            + f'\n[store]\npath = "{d / "store.sqlite3"}"\ncommit_interval_ms = 1\n'
            + f"\n[limits]\nidle_timeout = {self.idle_timeout}\n"
        )
        self.proc = proc = Process(
            [sys.executable, "-m", "amqp10.cli", "broker", "--config", str(config)],
            d / "broker.log",
        )
        want = 2 if certs is not None else 1
        found = proc.wait_count(r"listening on 127\.0\.0\.1:(\d+)( \(TLS\))?", want, START_TIMEOUT)
        ports = {bool(m.group(2)): int(m.group(1)) for m in found}
        if len(ports) < want:
            raise PeerUnavailable(f"our broker did not start: {proc.last_lines(3)}")
        return Endpoint(
            name=self.title,
            port=ports[False],
            tls_port=ports.get(True),
            ca=certs.ca if certs is not None else None,
            plain=(USER, PASSWORD),
            idle_timeout=self.idle_timeout,
            log=d / "broker.log",
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
