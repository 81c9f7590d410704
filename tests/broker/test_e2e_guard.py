"""[security] on a real broker: failed logins answered late (and counted), a correct login
from elsewhere on time, connections over a per-address or per-user limit refused with
amqp:resource-limit-exceeded, and the connection rate limit refusing then recovering."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10 import errors
from amqp10.broker.service import BrokerService
from amqp10.client import connect
from amqp10.message import Message
from amqp10.sasl.layer import SaslClient
from amqp10.transport import Connection
from amqp10.transport.framing import SASL_HEADER
from amqp10.types import Accepted, SaslCode

from .conftest import broker_in_loop

pytestmark = pytest.mark.anyio

T = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def secured(users_file: Path, **security: Any) -> dict[str, Any]:
    return {
        "sasl": {"users_file": users_file, "allow_anonymous": False},
        "security": {"connection_rate_per_address": 0, **security},
    }


async def login(service: BrokerService, password: str, *, source: str = "127.0.0.1") -> SaslCode:
    """One PLAIN exchange as alice from ``source``; the sasl-code the broker answered."""
    port = service.ports[0]
    client = SaslClient(username="alice", password=password, mechanisms=["PLAIN"])
    async with await anyio.connect_tcp("127.0.0.1", port, local_host=source) as stream:
        with anyio.fail_after(T):
            while not client.done:
                out = client.data_to_send()
                if out:
                    await stream.send(out)
                client.receive_data(await stream.receive())
    assert client.outcome is not None
    return client.outcome


async def test_failed_logins_take_at_least_the_summed_back_off(
    tmp_path: Path, users_file: Path
) -> None:
    cfg = secured(users_file, login_delay_base=0.01, login_delay_max=0.02)
    async with broker_in_loop(tmp_path, **cfg) as service:
        started = anyio.current_time()
        for _ in range(50):
            assert await login(service, "wrong") is SaslCode.AUTH
        elapsed = anyio.current_time() - started
    assert service.guard.failed_logins == 50
    assert elapsed >= 0.01 + 0.02 * 49  # every answer waited out its back-off


async def test_peers_that_break_sasl_are_not_counted_as_guesses(
    tmp_path: Path, users_file: Path
) -> None:
    async with broker_in_loop(tmp_path, **secured(users_file)) as service:
        for _ in range(3):
            async with await anyio.connect_tcp("127.0.0.1", service.ports[0]) as stream:
                await stream.send(b"GET / HTTP/1.1\r\n\r\n")
                with anyio.fail_after(T):
                    # the header of a version we speak (Part 2 §2.2; 0-9-1 §4.2.2), then closed
                    assert (await stream.receive()).startswith(b"AMQP")
        assert service.guard.failed_logins == 0
        assert service.guard.delay_for("127.0.0.1", None, failed=False) == 0.0


async def test_a_guesser_gets_few_answers_while_the_real_user_elsewhere_is_not_held(
    tmp_path: Path, users_file: Path
) -> None:
    cfg = secured(users_file, login_delay_base=0.1, login_delay_max=2.0)
    async with broker_in_loop(tmp_path, **cfg) as service:
        answered = 0
        with anyio.move_on_after(2.0):
            while True:
                assert await login(service, "wrong") is SaslCode.AUTH
                answered += 1
        # held 0.1, 0.2, 0.4, 0.8, 1.6 ...: at most 4 answers in 2 s (unthrottled: hundreds)
        assert 1 <= answered <= 4
        # the guesser's address now waits 1.6 s or more; alice from another address does not
        with anyio.fail_after(1.5):
            assert await login(service, "secret", source="127.0.0.2") is SaslCode.OK
        # the right password from the guessing address is held like a wrong one
        started = anyio.current_time()
        assert await login(service, "secret") is SaslCode.OK
        assert anyio.current_time() - started >= 1.0


async def test_connections_over_the_per_address_limit_get_resource_limit_exceeded(
    tmp_path: Path, users_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = secured(users_file, max_connections_per_address=2, login_delay_base=0)
    url = "amqp://alice:secret@127.0.0.1:{}"
    async with broker_in_loop(tmp_path, **cfg) as service:
        u = url.format(service.ports[0])
        caplog.set_level(logging.WARNING, "amqp10.broker.guard")
        async with await connect(u, timeout=T), await connect(u, timeout=T) as second:
            with pytest.raises(errors.ConnectionError, match="resource-limit-exceeded"):
                await connect(u, timeout=T)
            assert "connections open, the limit per address" in caplog.text
            await second.close()
            await wait_for(lambda: len(service.clients) == 1)
            async with await connect(u, timeout=T):
                pass


async def test_connections_over_the_per_user_limit_get_resource_limit_exceeded(
    tmp_path: Path, users_file: Path
) -> None:
    cfg = secured(users_file, max_connections_per_user=1)
    port_url = "amqp://{}@127.0.0.1:{}"
    async with broker_in_loop(tmp_path, **cfg) as service:
        alice = port_url.format("alice:secret", service.ports[0])
        async with await connect(alice, timeout=T) as first:
            with pytest.raises(errors.ConnectionError, match="resource-limit-exceeded"):
                await connect(alice, timeout=T)
            async with await connect(port_url.format("bob:hunter2", service.ports[0]), timeout=T):
                pass
            await first.close()
        await wait_for(lambda: not service.clients)
        async with await connect(alice, timeout=T):
            pass


async def test_the_connection_rate_limit_refuses_then_recovers(
    tmp_path: Path, users_file: Path
) -> None:
    cfg = secured(users_file)
    cfg["security"].update(connection_rate_per_address=5.0, connection_burst_per_address=3)

    async def answered() -> bool:
        """Whether the broker answers a SASL header (it closes a refused one at once)."""
        async with await anyio.connect_tcp("127.0.0.1", service.ports[0]) as stream:
            await stream.send(SASL_HEADER)
            try:
                with anyio.fail_after(T):
                    return (await stream.receive()).startswith(SASL_HEADER)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return False

    async with broker_in_loop(tmp_path, **cfg) as service:
        results = [await answered() for _ in range(5)]
        assert results[:3] == [True] * 3 and results[3:] == [False] * 2
        assert service.guard.refused >= 2
        await anyio.sleep(0.5)  # 2.5 tokens back
        assert await answered()


async def wait_for(condition: Any) -> None:
    with anyio.fail_after(T):
        while not condition():
            await anyio.sleep(0.01)


@pytest.mark.parametrize("secure", [True, False], ids=["plain", "anonymous"])
async def test_an_open_connection_is_served_without_the_guard_and_sasl_layers(
    tmp_path: Path, users_file: Path, secure: bool
) -> None:
    """Once SASL is over, the broker's driver calls the engine itself: not through the
    guard's hold and SASL's layer, five calls each way per read (issue 34)."""
    cfg = secured(users_file) if secure else {}
    async with broker_in_loop(tmp_path, **cfg) as service:
        user = "alice:secret@" if secure else ""
        async with await connect(f"amqp://{user}127.0.0.1:{service.ports[0]}", timeout=T) as conn:
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body="m"), timeout=T), Accepted)
            assert [type(c.driver.protocol) for c in service.clients] == [Connection]


async def test_a_held_login_is_answered_late_and_then_served_without_the_layers(
    tmp_path: Path, users_file: Path
) -> None:
    cfg = secured(users_file, login_delay_base=0.3, login_delay_max=1.0)
    async with broker_in_loop(tmp_path, **cfg) as service:
        assert await login(service, "wrong") is SaslCode.AUTH  # this address now waits 0.3 s
        started = anyio.current_time()
        async with await connect(f"amqp://alice:secret@127.0.0.1:{service.ports[0]}", timeout=T) as conn:
            assert anyio.current_time() - started >= 0.3  # the success was held back
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body="m"), timeout=T), Accepted)
            assert [type(c.driver.protocol) for c in service.clients] == [Connection]
