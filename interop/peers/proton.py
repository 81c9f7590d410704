"""The Proton-based broker (``interop/proton_broker.py``) as a peer, in a subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

from ..certs import Certs
from ..scenarios import CONVENTIONS
from .base import Endpoint, Peer, PeerUnavailable, Process

__all__ = ["ProtonBroker"]

IDLE_TIMEOUT = 2.0
# what interop/proton_broker.py does not do (it echoes a source as sent, filters and
# capabilities included, and every address is one queue)
LACKS = tuple(sid for sid in CONVENTIONS if sid != "attach-answer")
NO_CONVENTIONS = (
    "the Proton broker has queues only: no selectors, filters, topics, subscriptions,"
    " scheduling or groups"
)
START_TIMEOUT = 20.0


class ProtonBroker(Peer):
    id = "proton-broker"
    title = "Proton broker (interop/proton_broker.py)"

    def __init__(self, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.idle_timeout = idle_timeout
        self.proc: Process | None = None

    def available(self) -> str | None:
        try:
            import proton  # noqa: F401
        except ImportError:
            return "python-qpid-proton is not installed (pip install -e '.[test]')"
        return None

    def start(self, workdir: Path, certs: Certs | None) -> Endpoint:
        import proton

        d = workdir / "proton-broker"
        d.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "interop.proton_broker",
            "--port",
            "0",
            "--idle-timeout",
            str(self.idle_timeout),
        ]
        if certs is not None:
            argv += [
                "--tls-port",
                "0",
                "--cert",
                str(certs.server_cert),
                "--key",
                str(certs.server_key),
            ]
        repo = Path(__file__).resolve().parents[2]
        self.proc = proc = Process(argv, d / "broker.log", cwd=repo)
        want = 2 if certs is not None else 1
        found = proc.wait_count(r"listening on 127\.0\.0\.1:(\d+)( \(TLS\))?", want, START_TIMEOUT)
        ports = {bool(m.group(2)): int(m.group(1)) for m in found}
        if len(ports) < want:
            raise PeerUnavailable(f"the Proton broker did not start: {proc.last_lines(3)}")
        return Endpoint(
            name=self.title,
            port=ports[False],
            tls_port=ports.get(True),
            ca=certs.ca if certs is not None else None,
            plain=None,
            idle_timeout=self.idle_timeout,
            na={
                "sasl-plain": "a Proton server without Cyrus SASL (this python-qpid-proton build) offers no PLAIN",
                **{sid: NO_CONVENTIONS for sid in LACKS},
            },
            log=d / "broker.log",
            version="python-qpid-proton " + ".".join(map(str, proton.VERSION)),
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=10)
            self.proc = None
