"""Operating the broker: config errors, graceful shutdown, and the limits that protect it.

``amqp10 broker`` runs as a subprocess where the process itself is under test
(exit codes, SIGTERM); the limits are checked against an in-process broker
(``broker_with``), over loopback sockets, with our client, Proton and raw sockets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from proton import Endpoint
from proton import Message as PMessage
from proton.utils import BlockingConnection, ConnectionClosed

from amqp10 import errors
from amqp10.broker.config import load_config
from amqp10.client import connect
from amqp10.message import Message
from amqp10.transport import Connection as Engine
from amqp10.transport import ConnectionClosed as EngineClosed
from amqp10.transport import ConnectionOpened
from amqp10.types import Accepted, Source, Target
from tests.client.helpers import wait_for

from .conftest import RunningBroker, broker_process, broker_with, cli

pytestmark = pytest.mark.anyio

T = 10.0  # seconds any single wait may take
QUIET = 0.5  # how long "nothing happens" is watched for

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- the broker as a process -------------------------------------------------------------------
def write_config(path: Path, data_dir: Path, extra: str = "") -> Path:
    path.write_text(
        f"""
[[listeners]]
host = "127.0.0.1"
port = 0

[store]
path = "{data_dir / "store.sqlite3"}"
commit_interval_ms = 3000   # a group commit waits long: shutdown must flush it
{extra}
"""
    )
    return path


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[limits]\nmax_connections = 0\n", "limits.max_connections"),
        ("[[listeners]]\nport = 70000\n", "listeners.0.port"),
        ('[sasl]\nmechanisms = ["ANONYMOUS", "KERBEROS"]\n', "sasl.mechanisms"),
        ('[[addresses]]\npattern = "x.*"\nkind = "exchange"\n', "addresses.0.kind"),
        ("[limits]\nmax_frame_size = 100\n", "limits.max_frame_size"),
        ("[store]\nbogus = 1\n", "store.bogus"),
    ],
)
def test_bad_config_exits_2_with_one_line_naming_the_field(
    tmp_path: Path, toml: str, field: str
) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(toml)
    res = subprocess.run(cli("--config", str(cfg)), capture_output=True, timeout=60, text=True)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("amqp10 broker: ") and field in lines[0], lines[0]
    assert "Traceback" not in res.stderr


def test_unreadable_config_and_users_file(tmp_path: Path) -> None:
    res = subprocess.run(
        cli("--config", str(tmp_path / "missing.toml")), capture_output=True, timeout=60, text=True
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not found" in res.stderr
    cfg = tmp_path / "broken.toml"
    cfg.write_text("[limits\n")
    res = subprocess.run(cli("--config", str(cfg)), capture_output=True, timeout=60, text=True)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not valid TOML" in res.stderr


def test_command_line_flags_override_only_what_they_name(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('[store]\ncommit_interval_ms = 50\n[sasl]\nmechanisms = ["SCRAM-SHA-256"]\n')
    # what `--data-dir D --users-file U --no-anonymous` pass to load_config
    config = load_config(
        cfg,
        store={"path": str(tmp_path / "d" / "amqp10.sqlite3")},
        sasl={"users_file": str(tmp_path / "u.toml"), "allow_anonymous": False},
    )
    assert config.store.path == tmp_path / "d" / "amqp10.sqlite3"
    assert config.store.commit_interval_ms == 50  # the file's other [store] settings stay
    assert config.sasl.mechanisms == ["SCRAM-SHA-256"] and not config.sasl.allow_anonymous


async def test_sigterm_closes_clients_with_connection_forced_and_flushes_the_store(
    tmp_path: Path,
) -> None:
    cfg = write_config(tmp_path / "broker.toml", tmp_path)
    with broker_process("--config", str(cfg)) as bp:
        url = f"amqp://127.0.0.1:{bp.port}"
        async with await connect(url, timeout=T) as conn:
            sender = await conn.open_sender("kept", settle_mode="at-most-once")
            for i in range(50):
                await sender.send(Message(body=i, durable=True))
            # an attach round trip: the broker has read (and journalled) every transfer before it
            await conn.open_receiver("barrier", credit=0)
            pconn = BlockingConnection(f"127.0.0.1:{bp.port}", timeout=T)
            code = await anyio.to_thread.run_sync(bp.terminate)
            with anyio.fail_after(T):
                await conn.wait_closed()
            assert isinstance(conn.error, errors.ConnectionError)
            assert conn.error.condition == "amqp:connection:forced", conn.error
            with pytest.raises(ConnectionClosed) as info:
                pconn.wait(lambda: pconn.conn.state & Endpoint.REMOTE_CLOSED, timeout=T)
            assert info.value.condition == "amqp:connection:forced"
            pconn.close()
        assert code == 0, bp.log
        assert "broker stopped" in bp.log
    with broker_process("--config", str(cfg)) as bp:
        assert "recovered 50 messages" in bp.log, bp.log
        async with await connect(f"amqp://127.0.0.1:{bp.port}", timeout=T) as conn:
            r = await conn.open_receiver("kept", credit=100)
            got = []
            for _ in range(50):
                d = await r.receive(timeout=T)
                got.append(d.message.body)
                await d.accept()
        assert got == list(range(50))
        assert bp.terminate() == 0, bp.log


# -- limits -------------------------------------------------------------------------------------
async def in_broker(b: RunningBroker, fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(b.portal.call, fn)


async def until_in_broker(
    b: RunningBroker, predicate: Callable[[], bool], timeout: float = T
) -> None:
    """Wait until ``predicate()`` holds in the broker's loop (re-checked every 10 ms; the
    broker has no event to await for these internal states)."""

    async def wait() -> None:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.01)

    await anyio.to_thread.run_sync(b.portal.call, wait)


async def test_max_connections(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits={"max_connections": 2}) as b:
        url = f"amqp://{b.url}"
        async with await connect(url, timeout=T), await connect(url, timeout=T) as second:
            with pytest.raises(errors.ConnectionError) as info:
                await connect(url, timeout=T)
            assert not isinstance(info.value, errors.TimeoutError)
            await second.aclose()
            await until_in_broker(b, lambda: len(b.service.clients) == 1)
            async with await connect(url, timeout=T) as again:  # a slot is free again
                assert again.is_open


async def test_max_sessions_per_connection(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits={"max_sessions_per_connection": 2}) as b:
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            assert conn._engine.remote_open.channel_max == 1  # channels 0 and 1
            s1 = await conn.session()
            s2 = await conn.session()
            with pytest.raises(errors.SessionError):
                await conn.session()
            assert s1.is_open and s2.is_open
        # Proton keeps to the advertised channel-max as well
        pconn = BlockingConnection(b.url, timeout=T)
        try:
            assert pconn.conn.transport.remote_channel_max == 1
        finally:
            pconn.close()


def test_a_peer_that_ignores_channel_max_is_closed(tmp_path: Path) -> None:
    # our engine as a raw client over a blocking socket, told to believe a larger channel-max
    with broker_with(tmp_path, limits={"max_sessions_per_connection": 2}) as b:
        engine = Engine("rude-client")
        engine.open()
        with socket.create_connection(("127.0.0.1", b.port), timeout=T) as sock:
            events = _pump(
                sock, engine, lambda evs: any(isinstance(e, ConnectionOpened) for e in evs)
            )
            assert engine.remote_channel_max == 1
            engine.remote_channel_max = 10  # ignore what the broker said
            for _ in range(3):
                engine.session().begin()
            events = _pump(sock, engine, lambda evs: any(isinstance(e, EngineClosed) for e in evs))
        closed = next(e for e in events if isinstance(e, EngineClosed))
        assert (
            closed.error is not None and closed.error.condition == "amqp:connection:framing-error"
        )
        assert "channel 2 exceeds channel-max 1" in str(closed.error.description)


def test_pipelined_open_begin_attach_close_is_answered_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # every frame in one write: the broker sees the close in the same batch as the begin and attach
    with broker_with(tmp_path) as b:
        engine = Engine("hasty-client")
        engine.open()
        session = engine.session()
        session.begin()
        session.sender("hasty", source=Source(), target=Target(address="hasty")).attach()
        engine.close()
        with socket.create_connection(("127.0.0.1", b.port), timeout=T) as sock:
            events = _pump(sock, engine, lambda evs: any(isinstance(e, EngineClosed) for e in evs))
        closed = next(e for e in events if isinstance(e, EngineClosed))
        assert closed.error is None
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def _pump(sock: socket.socket, engine: Engine, done: Callable[[list[Any]], bool]) -> list[Any]:
    """Write what ``engine`` has, read and feed it until ``done(events so far)`` (bounded)."""
    sock.settimeout(T)
    events: list[Any] = []
    deadline = time.monotonic() + T
    while not done(events):
        assert time.monotonic() < deadline, events
        out = engine.data_to_send()
        if out:
            sock.sendall(out)
        data = sock.recv(65536)
        events += engine.receive_data(data)
        if not data:
            break
    out = engine.data_to_send()
    if out:
        try:
            sock.sendall(out)
        except OSError:
            pass
    return events


async def test_max_links_per_session(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits={"max_links_per_session": 2}) as b:
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            s = await conn.session()
            await s.open_sender("l1")
            await s.open_receiver("l2")
            with pytest.raises(errors.LinkError) as info:
                await s.open_sender("l3")
            assert info.value.condition == "amqp:resource-limit-exceeded"
            other = await conn.session()  # the limit is per session
            await other.open_sender("l3")


async def test_max_message_size(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits={"max_message_size": 2000}) as b:
        # Proton ignores the advertised limit, so the broker's engine enforces it
        def proton_send() -> str | None:  # in a thread: BlockingConnection blocks
            pconn = BlockingConnection(b.url, timeout=T)
            try:
                snd = pconn.create_sender("sized")
                snd.send(PMessage(body=b"x" * 1000))
                snd.link.send(PMessage(body=b"x" * 5000))
                # the broker detaches with the error, without closing the link: Proton
                # records the condition but raises nothing, so wait for the condition
                pconn.wait(lambda: snd.link.remote_condition is not None, timeout=T)
                cond = snd.link.remote_condition
                return None if cond is None else str(cond.name)
            finally:
                pconn.close()

        assert await anyio.to_thread.run_sync(proton_send) == "amqp:link:message-size-exceeded"
        # our client reads the broker's max-message-size and refuses before sending
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            sender = await conn.open_sender("sized")
            assert sender._link.remote_max_message_size == 2000
            with pytest.raises(errors.IllegalStateError, match="max-message-size"):
                await sender.send(Message(body=b"x" * 5000))
            assert isinstance(await sender.send(Message(body=b"x" * 1000)), Accepted)
        q = b.broker.nodes["sized"]
        assert await in_broker(b, lambda: q.count) == 2


def _read_until_closed(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """Everything the peer sends until it closes the socket, and how long that took."""
    sock.settimeout(limit)
    started = time.monotonic()
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - started


@pytest.mark.parametrize(
    "greeting", [b"", SASL_HEADER, AMQP_HEADER], ids=["silent", "sasl-header", "amqp-header"]
)
def test_handshake_timeout(tmp_path: Path, greeting: bytes) -> None:
    with broker_with(tmp_path, limits={"handshake_timeout": 0.5}) as b:
        with socket.create_connection(("127.0.0.1", b.port), timeout=T) as sock:
            if greeting:
                sock.sendall(greeting)
            data, took = _read_until_closed(sock, T)
        assert 0.4 <= took < T, took  # closed by the broker after its timeout, not by ours
        if greeting == SASL_HEADER:
            assert (
                data.startswith(SASL_HEADER) and b"ANONYMOUS" in data
            )  # header, mechanisms, then close
        elif greeting == AMQP_HEADER:
            assert data.startswith(AMQP_HEADER)  # SASL is optional here: the AMQP header comes back
        else:
            assert data in (b"", SASL_HEADER)  # §2.2: a server may name its protocol before closing

        async def forgotten() -> None:
            with anyio.fail_after(T):
                while b.service.clients:  # no event for this: re-checked every 10 ms
                    await anyio.sleep(0.01)

        b.portal.call(forgotten)


def test_a_slow_but_complete_handshake_is_fine(tmp_path: Path) -> None:
    # the timeout bounds the handshake, not the connection: idle time after open is fine
    with broker_with(tmp_path, limits={"handshake_timeout": 0.5}) as b:
        pconn = BlockingConnection(b.url, timeout=T)
        try:
            snd = pconn.create_sender("after-handshake")
            with pytest.raises(
                Exception, match="timed out"
            ):  # idle for longer than the handshake timeout
                pconn.wait(lambda: False, timeout=1.0)
            snd.send(PMessage(body="still here"))
        finally:
            pconn.close()


async def test_memory_limit_stops_publisher_credit(tmp_path: Path) -> None:
    limits = {"memory_limit_bytes": 4096, "credit_window": 2}
    with broker_with(tmp_path, limits=limits) as b:
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            sender = await conn.open_sender("mem")
            await wait_for(conn._activity, lambda: sender.credit > 0, timeout=T)
            body = b"m" * 1000
            sent = 0
            # the broker takes the credit back (a flow) before it accepts the message
            # that crossed the limit, so the credit seen after each send is current
            while sender.credit > 0 and sent < 20:  # bounded: the limit is ~4 messages
                assert isinstance(await sender.send(Message(body=body), timeout=T), Accepted)
                sent += 1
            assert 4 <= sent <= 6, sent
            with pytest.raises(errors.TimeoutError, match="no credit"):
                await sender.send(Message(body=b"withdrawn"), timeout=QUIET)
            assert sender.credit == 0
            q = b.broker.nodes["mem"]
            assert await in_broker(b, lambda: b.broker.memory_ok()) is False
            outcome: list[Any] = []

            async def late() -> None:
                outcome.append(await sender.send(Message(body=b"late"), timeout=T))

            async with anyio.create_task_group() as tg:
                tg.start_soon(late)
                r = await conn.open_receiver("mem", credit=100)
                for _ in range(sent):
                    d = await r.receive(timeout=T)
                    await d.accept()
            assert isinstance(outcome[0], Accepted)  # credit came back once memory was freed
            assert (await r.receive(timeout=T)).message.body == b"late"
        assert await in_broker(b, lambda: q.stats.enqueued) == sent + 1


def test_users_add_cli_then_login(tmp_path: Path) -> None:
    PASSWORD = "correct horse battery staple"
    users = tmp_path / "users.toml"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "amqp10.cli",
            "users",
            "add",
            str(users),
            "carol",
            "--password",
            PASSWORD,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert PASSWORD not in users.read_text()  # random base64 could hold a short one by chance
    assert oct(os.stat(users).st_mode & 0o777) == "0o600"
    with broker_with(tmp_path, sasl={"users_file": users, "allow_anonymous": False}) as b:
        pconn = BlockingConnection(
            b.url,
            timeout=T,
            user="carol",
            password=PASSWORD,
            allowed_mechs="PLAIN",
            allow_insecure_mechs=True,
        )
        pconn.close()
