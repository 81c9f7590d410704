"""A throwaway PostgreSQL server (Debian's ``postgresql`` package) for tests and benchmarks.

``initdb`` into a temporary directory, then ``postgres`` on 127.0.0.1 and a free port,
run as the ``postgres`` OS user when we are root (the server refuses to run as root).
Each test takes a database of its own (:meth:`PostgresServer.new_database`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["PostgresServer", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The directory of Debian's PostgreSQL server binaries (the newest version), if installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """``with PostgresServer() as pg:`` a server for the block; ``pg.new_database()`` a DSN."""

    def __init__(self, *, fsync: bool = True) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        self.bin = bin_dir
        self.fsync = fsync
        self.port = 0
        self.root = Path(tempfile.mkdtemp(prefix="amqp10-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)
        self._user = "postgres" if os.geteuid() == 0 else None

    def _run_as(self) -> dict[str, object]:
        return {"user": self._user} if self._user else {}

    def start(self) -> PostgresServer:
        data = self.root / "data"
        if self._user:
            shutil.chown(self.root, self._user)
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            check=True, capture_output=True, cwd=self.root, **self._run_as(),  # type: ignore[arg-type]
        )  # fmt: skip
        self.port = _free_port()
        settings = {
            "listen_addresses": "127.0.0.1", "port": str(self.port), "unix_socket_directories": str(self.root),
            "fsync": "on" if self.fsync else "off", "max_connections": "40", "shared_buffers": "32MB",
        }  # fmt: skip
        args = [str(self.bin / "postgres"), "-D", str(data)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        with open(self.root / "server.log", "wb") as logfile:
            self.proc = subprocess.Popen(
                args, stdout=logfile, stderr=subprocess.STDOUT, cwd=self.root, **self._run_as()  # type: ignore[arg-type]
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(Exception), self.connect("postgres"):
                return self
            time.sleep(0.1)
        log = (self.root / "server.log").read_text(errors="replace")
        self.stop()
        raise RuntimeError(f"PostgreSQL did not start:\n{log}")

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def connect(self, dbname: str) -> object:
        import psycopg

        return psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=5)

    def new_database(self) -> str:
        """A new, empty database; its DSN."""
        name = f"t{next(self._names)}"
        with self.connect("postgres") as conn:  # type: ignore[attr-defined]
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
