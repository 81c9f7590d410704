"""A throwaway CA and a server certificate for 127.0.0.1, made at run time with the ``openssl`` CLI.

Every TLS peer of the matrix gets the same server certificate: subject CN=localhost,
subjectAltName IP:127.0.0.1, DNS:localhost and DNS:127.0.0.1. The last one is not
good X.509 style, but Proton's C layer (0.37/0.40) matches a peer name given as an
IP address against DNS names only, while Python's ``ssl`` matches it against IP
SANs only; with both, each verifies the same certificate for ``127.0.0.1``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Certs", "have_openssl", "make_certs", "make_client_certificate"]

SERVER_SAN = "IP:127.0.0.1,DNS:localhost,DNS:127.0.0.1"
PKCS12_PASSWORD = "interop"


@dataclass(frozen=True)
class Certs:
    """Paths of the CA certificate and the server's certificate, key and PKCS#12 bundle."""

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    server_p12: Path
    p12_password: str = PKCS12_PASSWORD


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(directory: Path) -> Certs:
    """Make a CA and a server certificate signed by it in ``directory`` (2 days' validity)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=amqp10 interop throwaway CA", "-keyout", "ca.key", "-out", "ca.pem",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "server.key", "-out", "server.csr", cwd=d,
    )  # fmt: skip
    (d / "server.ext").write_text(
        f"basicConstraints=CA:FALSE\nsubjectAltName={SERVER_SAN}\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem", cwd=d,
    )  # fmt: skip
    _openssl(
        "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile", "ca.pem",
        "-name", "server", "-passout", f"pass:{PKCS12_PASSWORD}", "-out", "server.p12", cwd=d,
    )  # fmt: skip
    for key in ("ca.key", "server.key"):
        (d / key).chmod(0o644)  # peers running as another user (RabbitMQ) must read them
    return Certs(
        directory=d,
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        server_p12=d / "server.p12",
    )


def make_client_certificate(certs: Certs, cn: str) -> tuple[Path, Path]:
    """A client certificate with subject ``CN=cn`` signed by ``certs``' CA (for SASL EXTERNAL
    against a listener that trusts that CA): its certificate and key files."""
    d = certs.directory
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
        "-keyout", "client.key", "-out", "client.csr", cwd=d,
    )  # fmt: skip
    (d / "client.ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    _openssl(
        "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "client.ext", "-out", "client.pem", cwd=d,
    )  # fmt: skip
    return d / "client.pem", d / "client.key"
