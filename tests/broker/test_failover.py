"""Active/passive failover on PostgreSQL (ActiveMQ's JDBC master/slave is the model).

Two ``amqp10 broker`` processes share one database of a real PostgreSQL server; the one
holding the database lock serves, the other waits. The active one is SIGKILLed while a
publisher pipelines durable messages and a consumer takes them: the standby takes the
lock, recovers and listens; the client fails over through its address list and resumes
its links; no message whose send resolved Accepted is lost. Every wait is bounded and
every process is killed at the end.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from amqp10 import errors
from amqp10.client import SettleMode, connect
from amqp10.client.reconnect import ConnectionLost, Reconnected, ReconnectEvent, ReconnectPolicy
from amqp10.message import Message
from amqp10.types import Accepted
from tests.client.helpers import DurableTraffic, durable_traffic, wait_for

from .conftest import BrokerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the client under test runs on either; the brokers are processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_broker_config(tmp_path: Path, name: str, dsn: str, port: int, **store: object) -> Path:
    """A config file: a listener on ``port``, no HTTP, the store in ``dsn``."""
    settings = {"lock_retry_seconds": 0.1, "commit_interval_ms": 1, **store}
    lines = [f"{key} = {value!r}" for key, value in settings.items()]
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'[[listeners]]\nhost = "127.0.0.1"\nport = {port}\n[http]\nenabled = false\n'
        f'[store]\nbackend = "postgresql"\ndsn = "{dsn}"\n' + "\n".join(lines) + "\n"
    )
    return path


async def start(config: Path, *, wait: bool = True) -> BrokerProcess:
    return await anyio.to_thread.run_sync(lambda: BrokerProcess("--config", str(config), wait=wait))


async def test_sigkill_of_the_active_broker_fails_over_losing_no_confirmed_message(
    tmp_path: Path, pg_server: Any
) -> None:
    dsn = pg_server.new_database()
    port_a, port_b = free_port(), free_port()
    active = await start(pg_broker_config(tmp_path, "a", dsn, port_a))
    standby = await start(pg_broker_config(tmp_path, "b", dsn, port_b), wait=False)
    events: list[ReconnectEvent] = []
    policy = ReconnectPolicy(initial_delay=0.05, max_delay=0.5, max_time=30.0, on_event=events.append)
    at_kill = 0

    async def kill_the_active_one(t: DurableTraffic) -> None:
        nonlocal at_kill
        await wait_for(t.progress, lambda: len(t.received) >= 50, 30)  # both sides under way
        t.paused = True  # a backlog builds that, once the active one dies, only the database holds
        await wait_for(t.progress, lambda: len(t.accepted - set(t.received)) >= 300, 30)
        at_kill = len(t.accepted)
        active.kill()  # SIGKILL mid-stream: no close, the lock's session just ends
        await wait_for(conn._changed, lambda: conn.reconnecting, 10)
        t.paused = False
        t.progress.fire()

    try:
        await anyio.to_thread.run_sync(standby.wait_log, "standby: waiting for the store lock")
        assert standby.port == 0  # nothing bound while it waits
        urls = [f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"]
        async with await connect(urls, reconnect=policy, timeout=20.0) as conn:
            t = await durable_traffic(conn, "failover-q", kill_the_active_one, timeout=30)
            assert conn.reconnects == 1
    finally:
        active.kill()
        standby.kill()
    assert not t.failed, t.failed[:3]
    assert at_kill < len(t.accepted) == t.total  # killed mid-stream, every send then confirmed
    missing = t.accepted - set(t.received)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    assert [type(e) for e in events] == [ConnectionLost, Reconnected]
    lost, back = events
    assert isinstance(lost, ConnectionLost) and isinstance(back, Reconnected)
    assert (lost.peer, back.peer) == (f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}")
    assert back.links == 2
    assert standby.port == port_b
    assert "this broker is active" in standby.log


async def test_an_active_broker_that_loses_the_lock_stops_and_the_standby_takes_over(
    tmp_path: Path, pg_server: Any
) -> None:
    """Fencing: the database ends the active broker's lock session (as it would for a
    broker cut off from it); that broker stops serving, with one line and exit code 1,
    and its clients are told connection:forced; the standby becomes active."""
    dsn = pg_server.new_database()
    port_a, port_b = free_port(), free_port()
    active = await start(pg_broker_config(tmp_path, "a", dsn, port_a, lock_session_timeout_seconds=2))
    standby = await start(pg_broker_config(tmp_path, "b", dsn, port_b), wait=False)
    try:
        await anyio.to_thread.run_sync(standby.wait_log, "standby: waiting for the store lock")
        async with await connect(f"127.0.0.1:{port_a}", timeout=10.0) as conn:
            sender = await conn.open_sender("fenced-q", settle_mode=SettleMode.AT_LEAST_ONCE)
            assert isinstance(await sender.send(Message(body="kept", durable=True)), Accepted)
            with pg_server.connect(dsn.rsplit("=", 1)[1]) as admin:
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                ).fetchall()
            assert ended == [(True,)]
            code = await anyio.to_thread.run_sync(active.proc.wait, 20)
            assert code == 1
            await wait_for(conn._changed, lambda: conn.error is not None, 10)
            assert isinstance(conn.error, errors.ConnectionError)
            assert conn.error.condition == "amqp:connection:forced"
        assert "lost the store lock" in active.log
        await anyio.to_thread.run_sync(standby.wait_listening)
        async with await connect(f"127.0.0.1:{port_b}", timeout=10.0) as conn:
            receiver = await conn.open_receiver("fenced-q", credit=1)
            with anyio.fail_after(10):
                d = await receiver.receive()
            assert d.message.body == "kept"
            await d.accept()
    finally:
        active.kill()
        standby.kill()


async def test_a_standby_stops_cleanly_on_sigterm(tmp_path: Path, pg_server: Any) -> None:
    from amqp10.broker.core.store_postgres import DatabaseLock

    dsn = pg_server.new_database()
    holder = DatabaseLock(dsn)  # stands for the active broker
    assert holder.try_acquire()
    standby = await start(pg_broker_config(tmp_path, "b", dsn, free_port()), wait=False)
    try:
        await anyio.to_thread.run_sync(standby.wait_log, "standby: waiting for the store lock")
        assert await anyio.to_thread.run_sync(standby.terminate) == 0
        assert "received SIGTERM" in standby.log
        assert holder.check()  # the lock stays where it was
    finally:
        standby.kill()
        holder.release()
