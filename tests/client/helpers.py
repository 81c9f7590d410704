"""Test helpers for the driver and the client: backends, certificates, a scriptable peer.

Every test talks over real sockets on 127.0.0.1. Waits go through ``wait_for``
(signal-driven, bounded in time), never through sleeps.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.client import Connection, Delivery, Receiver, Sender, serve
from amqp10.io import Signal
from amqp10.message import Message
from amqp10.types import Error, ErrorCondition

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None

BACKENDS = [
    pytest.param(("asyncio", {"use_uvloop": HAS_UVLOOP}), id="asyncio"),
    pytest.param(("trio", {}), id="trio"),
]

WAIT = 5.0  # seconds any single wait in a test may take before it fails


async def wait_for(signal: Signal, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait until ``predicate()`` holds, re-checking whenever ``signal`` fires."""
    with anyio.fail_after(timeout):
        while not predicate():
            await signal.wait()


@dataclass
class DurableTraffic:
    """What :func:`durable_traffic` saw: sends that resolved Accepted, sends that raised,
    bodies the consumer took (in order, duplicates kept)."""

    total: int
    accepted: set[int]
    failed: list[BaseException]
    received: list[int]
    progress: Signal
    """Fires after each outcome and each message received."""
    paused: bool = False
    """While set, the consumer takes no more messages (its credit runs out): set it in
    ``during`` to build a backlog, clear it and fire ``progress`` to resume."""


async def durable_traffic(
    conn: Connection,
    address: str,
    during: Callable[[DurableTraffic], Any],
    *,
    n_tasks: int = 10,
    per_task: int = 150,
    timeout: float = 20,
) -> DurableTraffic:
    """``n_tasks`` producers send durable messages (bodies 0..total-1) to ``address`` at
    least once, ``n_tasks`` in flight at a time, while a consumer takes and accepts them;
    ``await during(traffic)`` runs while they do (a crash, a failover). Returns once every
    producer is done and the consumer has every accepted message (bounded by ``timeout``)."""
    from amqp10 import errors
    from amqp10.client import SettleMode
    from amqp10.types import Accepted

    t = DurableTraffic(n_tasks * per_task, set(), [], [], Signal())
    sender = await conn.open_sender(address, settle_mode=SettleMode.AT_LEAST_ONCE)
    receiver = await conn.open_receiver(address, credit=50)

    async def produce(k: int) -> None:
        for i in range(k, t.total, n_tasks):
            try:
                outcome = await sender.send(Message(body=i, durable=True))
            except errors.AMQPError as exc:
                t.failed.append(exc)
                continue
            if isinstance(outcome, Accepted):
                t.accepted.add(i)
            t.progress.fire()

    async def consume() -> None:
        async for d in receiver:
            while t.paused:
                await t.progress.wait()
            t.received.append(d.message.body)
            await d.accept()
            t.progress.fire()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        async with anyio.create_task_group() as producers:
            for k in range(n_tasks):
                producers.start_soon(produce, k)
            await during(t)
        await wait_for(t.progress, lambda: t.accepted <= set(t.received), timeout)
        tg.cancel_scope.cancel()
    return t


@asynccontextmanager
async def no_leftover_tasks() -> AsyncIterator[None]:
    """Fail if the body leaves tasks running (checked once it has fully exited)."""
    before = {t.id for t in anyio.get_running_tasks()}
    yield
    # tasks that finish on their own are gone after a few scheduler rounds
    for _ in range(50):
        extra = [t for t in anyio.get_running_tasks() if t.id not in before]
        if not extra:
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError(f"tasks left running: {[t.name for t in extra]}")


# -- certificates ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_cert: Path  # a server certificate for another host name
    other_key: Path
    rogue_ca: Path  # a CA that signed nothing we use


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(directory: Path) -> Certs:
    """A throwaway CA, a server certificate for 127.0.0.1/localhost, and a client certificate."""
    d = directory
    for ca in ("ca", "rogue"):
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", f"/CN=amqp10 test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
            cwd=d,
        )  # fmt: skip

    def issue(name: str, cn: str, san: str | None, client: bool = False) -> None:
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={cn}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d,
        )  # fmt: skip
        ext = d / f"{name}.ext"
        lines = ["basicConstraints=CA:FALSE"]
        if san:
            lines.append(f"subjectAltName={san}")
        lines.append("extendedKeyUsage=" + ("clientAuth" if client else "serverAuth"))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext.name, "-out", f"{name}.pem", cwd=d,
        )  # fmt: skip

    issue("server", "localhost", "IP:127.0.0.1,DNS:localhost")
    issue("other", "other.example", "DNS:other.example")
    issue("client", "amqp10-test-client", None, client=True)
    return Certs(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        other_cert=d / "other.pem",
        other_key=d / "other.key",
        rogue_ca=d / "rogue.pem",
    )


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


# -- a scriptable direct peer ---------------------------------------------------------------
class Service:
    """A handler for ``serve()`` that records what happens and answers as scripted.

    Incoming messages are settled by their subject: ``reject``, ``release``,
    ``modify``, ``hold`` (left unsettled in ``held``), ``none`` (settled without
    an outcome); anything else is accepted. A message with ``reply_to`` gets a
    reply (``pong: <body>``) on the peer's reply link, or, with
    ``reply_via_sender``, on a sender the service opens to the reply address.

    A peer receiving from ``gen/N`` gets N messages ``m0``..``m{N-1}`` (queued
    at once, waiting for credit); their outcomes land in ``outcomes``.
    ``gen/N/SIZE`` pads each body with ``:`` and SIZE bytes.
    """

    def __init__(self, *, reply_via_sender: bool = False, manual_credit: bool = False) -> None:
        self.reply_via_sender = reply_via_sender
        self.manual_credit = manual_credit
        self.connections: list[Connection] = []
        self.links: list[Sender | Receiver] = []
        self.received: list[Delivery] = []
        self.held: list[Delivery] = []
        self.outcomes: list[Any] = []
        self.errors: list[BaseException] = []
        self.changed = Signal()

    def _fire(self) -> None:
        self.changed.fire()

    async def wait(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        await wait_for(self.changed, predicate, timeout)

    async def __call__(self, conn: Connection) -> None:
        self.connections.append(conn)
        conn._activity = self.changed  # wake our waiters after every batch of engine events
        self._fire()
        async with anyio.create_task_group() as tg:
            async for link in conn.incoming_links():
                self.links.append(link)
                self._fire()
                if isinstance(link, Receiver):
                    tg.start_soon(self._consume, conn, link)
                elif link.address and link.address.startswith("gen/"):
                    _, n, *size = link.address.split("/")
                    tg.start_soon(self._produce, link, int(n), int(size[0]) if size else 0)

    async def _consume(self, conn: Connection, link: Receiver) -> None:
        async for d in link:
            self.received.append(d)
            self._fire()
            try:
                msg = d.message
                action = msg.subject
                if action == "reject":
                    await d.reject(
                        Error(condition=ErrorCondition.NOT_ALLOWED, description="no thanks")
                    )
                elif action == "release":
                    await d.release()
                elif action == "modify":
                    await d.modify(delivery_failed=True, undeliverable_here=True)
                elif action == "hold":
                    self.held.append(d)
                elif action == "none":
                    await d.settle()
                else:
                    await d.accept()
                if msg.reply_to:
                    response = Message(body=f"pong: {msg.body}")
                    if self.reply_via_sender:
                        async with await conn.open_sender(msg.reply_to) as sender:
                            await sender.send(Message(body=response.body, correlation_id=msg.id))
                    else:
                        await conn.reply(d, response)
            except Exception as exc:  # recorded for the test to see
                self.errors.append(exc)
            self._fire()

    async def _produce(self, link: Sender, n: int, size: int = 0) -> None:
        async def one(i: int) -> None:
            body = f"m{i}" + (":" + "x" * size if size else "")
            try:
                self.outcomes.append(await link.send(Message(body=body), timeout=math.inf))
            except Exception as exc:
                self.errors.append(exc)
            self._fire()

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)


@asynccontextmanager
async def running(service: Any, **kwargs: Any) -> AsyncIterator[Any]:
    """``serve()`` on a free port of 127.0.0.1."""
    async with serve("127.0.0.1", 0, service, **kwargs) as server:
        yield server
