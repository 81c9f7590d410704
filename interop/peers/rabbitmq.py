"""RabbitMQ 3.10 (Debian ``rabbitmq-server``) with the ``rabbitmq_amqp1_0`` plugin, as a peer.

It runs from a private directory (config, enabled-plugins file, Mnesia, logs,
Erlang cookie), in the foreground as a child process, with every listener on
127.0.0.1: AMQP (the plugin shares the AMQP 0-9-1 listener), AMQPS with our
throwaway CA, the Erlang distribution port, and a private epmd (also bound to
loopback; epmd adds ``::1`` by itself). The plugin is enabled with
``rabbitmq-plugins --offline enable rabbitmq_amqp1_0`` against the private
enabled-plugins file. ``stop()`` sends SIGTERM (RabbitMQ shuts down cleanly),
SIGKILLs after a bounded wait, and stops the private epmd.

Addresses: ``/queue/NAME`` (the plugin declares the queue). SASL: PLAIN with
guest/guest (a loopback-only user), ANONYMOUS as ``amqp1_0.default_user``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from ..certs import Certs
from .base import (
    HOST,
    Endpoint,
    Peer,
    PeerUnavailable,
    Process,
    apt_install,
    free_port,
    wait_for_port,
)

__all__ = ["RabbitMQ"]

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
PLUGINS = Path("/usr/lib/rabbitmq/bin/rabbitmq-plugins")
LIB = Path("/usr/lib/rabbitmq/lib")
START_TIMEOUT = 120.0
STOP_GRACE = 30.0
HEARTBEAT = 2

CROSS_MAPPING = (
    "RabbitMQ 3.10's AMQP 1.0 plugin maps 0-9-1 and 1.0 its own way (1.0 sections ride in"
    " x-amqp-1.0-* headers, 0-9-1 headers do not become application-properties, timestamps"
    " are off by 1000); our broker follows RabbitMQ 4's mapping (docs/protocols.md)"
)

FAULTS = [
    (
        "drain",
        r"internal-error.*function_clause.*send_drained",
        "RabbitMQ 3.10.8 ends the session when a classic queue's consumer drains"
        " (function_clause on send_drained; rabbitmq-server#7119, fixed in #7141 after 3.10.8)",
    ),
    (
        "browse",
        r"the browsed messages were consumed",
        "RabbitMQ 3.10's AMQP 1.0 plugin echoes distribution-mode copy in its attach but consumes"
        " the messages (no browsing)",
    ),
    (
        "attach-answer",
        r"target not echoed: None",
        "RabbitMQ 3.10's attach answer to a receiver carries a null target (the link stays up)",
    ),
    (
        "filter-expressions",
        r"the amqp:properties-filter consumer got",
        "RabbitMQ 3.10's AMQP 1.0 plugin does not apply the OASIS filter expressions"
        " (properties, application-properties, SQL): the consumer gets every message",
    ),
    (
        "selector",
        r"the selector got .*red",
        "RabbitMQ 3.10's AMQP 1.0 plugin echoes a JMS selector filter in its attach but does not"
        " apply it",
    ),
]


def _version() -> str | None:
    for d in sorted(LIB.glob("rabbitmq_server-*")):
        return d.name.split("-", 1)[1]
    return None


class RabbitMQ(Peer):
    id = "rabbitmq"
    title = "RabbitMQ"

    def __init__(self) -> None:
        self.proc: Process | None = None
        self.env: dict[str, str] | None = None

    def available(self) -> str | None:
        if not SERVER.exists():
            return "rabbitmq-server is not installed (run with --install, or apt-get install rabbitmq-server)"
        if not any(LIB.glob("rabbitmq_server-*/plugins/rabbitmq_amqp1_0-*")):
            return "the rabbitmq_amqp1_0 plugin is not in the installed rabbitmq-server"
        return None

    def install(self) -> None:
        if SERVER.exists():
            return
        apt_install("rabbitmq-server")

    def start(self, workdir: Path, certs: Certs | None) -> Endpoint:
        d = workdir / "rabbitmq"
        for sub in ("mnesia", "log", "home"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        port, tls_port, dist_port, epmd_port = (free_port() for _ in range(4))
        conf = [
            f"listeners.tcp.1 = {HOST}:{port}",
            "amqp1_0.default_user = guest",
            f"heartbeat = {HEARTBEAT}",
            "log.console = true",
            "log.console.level = info",
            "log.file = false",
            "management.tcp.ip = 127.0.0.1",
        ]
        if certs is not None:
            conf += [
                f"listeners.ssl.1 = {HOST}:{tls_port}",
                f"ssl_options.cacertfile = {certs.ca}",
                f"ssl_options.certfile = {certs.server_cert}",
                f"ssl_options.keyfile = {certs.server_key}",
                "ssl_options.verify = verify_none",
                "ssl_options.fail_if_no_peer_cert = false",
            ]
        (d / "rabbitmq.conf").write_text("\n".join(conf) + "\n")
        plugins_file = d / "enabled_plugins"
        interface = "-kernel inet_dist_use_interface {127,0,0,1}"
        self.env = env = dict(
            os.environ,
            HOME=str(d / "home"),
            RABBITMQ_NODENAME="rabbit@localhost",
            RABBITMQ_NODE_IP_ADDRESS=HOST,
            RABBITMQ_NODE_PORT=str(port),
            RABBITMQ_DIST_PORT=str(dist_port),
            ERL_EPMD_ADDRESS=HOST,
            ERL_EPMD_PORT=str(epmd_port),
            RABBITMQ_CONFIG_FILE=str(d / "rabbitmq"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins_file),
            RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
            RABBITMQ_LOG_BASE=str(d / "log"),
            RABBITMQ_PID_FILE=str(d / "rabbitmq.pid"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=interface,
            RABBITMQ_CTL_ERL_ARGS=interface,
        )
        r = subprocess.run(
            [str(PLUGINS), "--offline", "enable", "rabbitmq_amqp1_0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r.returncode != 0 or "rabbitmq_amqp1_0" not in plugins_file.read_text(errors="replace"):
            # the file the command would have written
            plugins_file.write_text("[rabbitmq_amqp1_0].\n")
        self.proc = proc = Process([str(SERVER)], d / "rabbitmq.log", env=env, cwd=d)
        if not wait_for_port(port, START_TIMEOUT, lambda: proc.alive):
            raise PeerUnavailable(
                f"RabbitMQ did not start within {START_TIMEOUT:g}s: {proc.last_lines(2)}"
            )
        if proc.wait_for(r"Server startup complete", START_TIMEOUT) is None:
            raise PeerUnavailable(f"RabbitMQ did not finish starting: {proc.last_lines(2)}")
        if proc.wait_for(r"rabbitmq_amqp1_0", 5) is None:
            raise PeerUnavailable("RabbitMQ started without the rabbitmq_amqp1_0 plugin")
        if certs is not None and not wait_for_port(tls_port, 10, lambda: proc.alive):
            raise PeerUnavailable("RabbitMQ's TLS listener did not come up")
        version = _version() or "?"
        return Endpoint(
            name=f"RabbitMQ {version}",
            port=port,
            tls_port=tls_port if certs is not None else None,
            ca=certs.ca if certs is not None else None,
            plain=("guest", "guest"),
            idle_timeout=float(HEARTBEAT),
            address=lambda name: f"/queue/{name}",
            log=d / "rabbitmq.log",
            version=f"RabbitMQ {version} (rabbitmq_amqp1_0)",
            faults=FAULTS,
            na={
                **{row: CROSS_MAPPING for row in ("cross-091-to-10", "cross-10-to-091")},
                "message-groups": "RabbitMQ 3.10 has no message groups (group-id is not used)",
            },
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=STOP_GRACE)
            self.proc = None
        if self.env is not None:
            epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                # our private epmd (its own port, started by our node): nothing else uses it
                subprocess.run([epmd, "-kill"], env=self.env, capture_output=True, timeout=10)
            self.env = None
