"""A real broker on 127.0.0.1 (random port, temp store) running in a background thread."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from amqp10.broker.config import BrokerConfig, Listener, StoreConfig
from amqp10.broker.service import BrokerService


class RunningBroker:
    def __init__(self, service: BrokerService, portal: Any, cancel: Any) -> None:
        self.service = service
        self.portal = portal
        self._cancel = cancel

    @property
    def port(self) -> int:
        return self.service.ports[0]

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_port(self) -> int | None:
        """The HTTP listener's port (WebSockets, the console, /metrics)."""
        return self.service.http_port

    @property
    def broker(self) -> Any:
        return self.service.broker


HOLD_SECONDS = 10.0


@contextmanager
def held_commits(b: RunningBroker) -> Iterator[Callable[[Callable[[list[Any]], bool]], None]]:
    """Hold the running broker's store commits until the block ends (its group committer
    waits in the store's ``apply``, with the batch it took). Yields ``reached(pred)``: wait
    until a held batch of store operations satisfies ``pred``."""
    store = b.service.committer.store if b.service.committer is not None else None
    assert store is not None
    apply = store.apply
    gate = threading.Event()
    seen = threading.Condition()
    batches: list[list[Any]] = []

    def held_apply(ops: Any) -> None:
        ops = list(ops)
        with seen:
            batches.append(ops)
            seen.notify_all()
        assert gate.wait(HOLD_SECONDS), "commits held too long"
        apply(ops)

    def reached(pred: Callable[[list[Any]], bool]) -> None:
        with seen:
            assert seen.wait_for(lambda: any(pred(ops) for ops in batches), HOLD_SECONDS), "no such batch reached the store"

    store.apply = held_apply  # type: ignore[method-assign]
    try:
        yield reached
    finally:
        gate.set()
        store.apply = apply  # type: ignore[method-assign]


def start_broker(config: BrokerConfig) -> Iterator[RunningBroker]:
    """A broker with ``config``: in a thread of this process, or at ``AMQP10_TEST_WORKERS=N``
    > 1 as ``amqp10 broker --workers N`` (``workers_mode.py``; then only its port and url)."""
    from tests.broker.workers_mode import start_processes, worker_count

    if worker_count() > 1:
        yield from start_processes(config, worker_count())
        return
    with anyio.from_thread.start_blocking_portal() as portal:
        service = BrokerService(config)
        future, _ = portal.start_task(service.run)
        yield RunningBroker(service, portal, future)
        future.cancel()
        try:
            future.result(timeout=10)
        except BaseException:
            pass


@pytest.fixture
def broker_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(
        listeners=[Listener(host="127.0.0.1", port=0)],
        store=StoreConfig(path=tmp_path / "store.sqlite3", commit_interval_ms=1),
    )


@pytest.fixture
def running_broker(broker_config: BrokerConfig) -> Iterator[RunningBroker]:
    yield from start_broker(broker_config)


def make_config(tmp_path: Path, **kw: Any) -> BrokerConfig:
    """A broker config on a free port of 127.0.0.1 with a store in ``tmp_path``.

    ``kw`` are BrokerConfig fields; ``limits``/``sasl`` may be given as dicts.
    """
    kw.setdefault("listeners", [Listener(host="127.0.0.1", port=0)])
    kw.setdefault("store", StoreConfig(path=tmp_path / "store.sqlite3", commit_interval_ms=1))
    return BrokerConfig.model_validate(kw)


@asynccontextmanager
async def broker_in_loop(tmp_path: Path, **kw: Any) -> AsyncIterator[BrokerService]:
    """Our broker in the caller's event loop (its state read without races), stopped on exit."""
    service = BrokerService(make_config(tmp_path, **kw))
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        try:
            yield service
        finally:
            tg.cancel_scope.cancel()


@contextmanager
def broker_with(tmp_path: Path, **kw: Any) -> Iterator[RunningBroker]:
    """``with broker_with(tmp_path, limits={...}) as b:`` a broker for one test."""
    yield from start_broker(make_config(tmp_path, **kw))


@pytest.fixture(scope="session")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A users file with alice/secret and bob/hunter2 (SCRAM credentials, 4096 iterations)."""
    from amqp10.broker.users import add_user

    path = tmp_path_factory.mktemp("users") / "users.toml"
    add_user(path, "alice", "secret")
    add_user(path, "bob", "hunter2")
    return path


def with_certificate_user(users_file: Path, tmp_path: Path) -> Path:
    """A copy of ``users_file`` that also holds the test client certificate's identity: an
    EXTERNAL login names a user of the users file, whose permissions apply (as in RabbitMQ)."""
    import secrets
    import shutil

    from amqp10.broker.users import add_user

    users = tmp_path / "users-with-certificate.toml"
    shutil.copy(users_file, users)
    add_user(users, "CN=amqp10-test-client", secrets.token_hex(8), iterations=1000)
    return users


def cli(*args: str) -> list[str]:
    """The command line of ``amqp10 broker ARGS`` run with this interpreter."""
    return [sys.executable, "-m", "amqp10.cli", "broker", *args]


class BrokerProcess:
    """``amqp10 broker ARGS`` in a subprocess: ``port`` once it listens, ``log`` its stderr."""

    def __init__(self, *args: str, wait: bool = True) -> None:
        """``wait=False``: return at once (a standby broker listens only once it is active;
        see :meth:`wait_listening`)."""
        self.proc = subprocess.Popen(cli(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.port = 0
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if wait:
            self.wait_listening()

    def wait_listening(self, timeout: float = 30) -> None:
        if not self._listening.wait(timeout):
            self.kill()
            raise AssertionError("the broker did not start:\n" + self.log)

    def wait_log(self, text: str, timeout: float = 30) -> None:
        """Until a log line holds ``text`` (bounded; the process must stay up)."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(self.lines)):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"no log line with {text!r}:\n" + self.log)
            time.sleep(0.02)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for raw in self.proc.stderr:
                line = raw.decode(errors="replace")
                self.lines.append(line)
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    self._listening.set()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def terminate(self, timeout: float = 20) -> int:
        """SIGTERM, then the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)


@contextmanager
def broker_process(*args: str) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(*args)
    try:
        yield bp
    finally:
        bp.kill()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A PostgreSQL server for the session (Debian's package, tests/pgserver.py); fsync
    off: tests kill brokers, never the database server."""
    from tests.pgserver import PostgresServer

    with PostgresServer(fsync=False) as pg:
        yield pg


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """``open_store()`` opens the test's store (the same one each call) on each backend;
    what it opened is closed after the test."""
    from amqp10.broker.core.store import Store

    opened: list[Any] = []
    if request.param == "sqlite":
        path = tmp_path / "db.sqlite3"

        def open_() -> Any:
            opened.append(Store(path))
            return opened[-1]
    else:
        from amqp10.broker.core.store_postgres import PostgresStore

        dsn = request.getfixturevalue("pg_server").new_database()

        def open_() -> Any:
            opened.append(PostgresStore(dsn))
            return opened[-1]

    yield open_
    for s in opened:
        s.close()
