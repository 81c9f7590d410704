"""rhea (Node.js) over its WebSocket transport against our broker's HTTP listener.

rhea's ``websocket_connect`` with the ``ws`` package speaks AMQP 1.0 over
``ws://127.0.0.1:PORT/$amqp`` (subprotocols offered: binary, AMQPWSB10, amqp);
our own client, over ws:// as well, is the other side of each exchange:

- rhea sends messages (the last one 300 KB, so several frames) that our
  client receives, and
- our client sends messages that rhea receives,

anonymously and with SASL PLAIN. rhea and ws are installed from the npm
registry into ``interop/.build/node`` (once; pinned versions) by ``npm``,
which, like ``node``, must be on PATH.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from amqp10.broker.users import add_user
from amqp10.client import connect
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import RunningBroker, broker_with

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "node" / "rhea_ws.js"
NODE_DIR = HERE / ".build" / "node"
PACKAGES = ("rhea@3.0.5", "ws@8.23.0")
T = 20.0


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """rhea and ws installed with npm (skipped when already there)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed for the rhea interop test (Debian: nodejs npm)")
    modules = NODE_DIR / "node_modules"
    stamp = NODE_DIR / "installed.txt"
    wanted = " ".join(PACKAGES)
    if not stamp.exists() or stamp.read_text() != wanted:
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--no-save",
                "--prefix",
                str(NODE_DIR),
                *PACKAGES,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if res.returncode != 0:
            pytest.fail(f"npm install {wanted} failed:\n{res.stderr[-2000:]}")
        stamp.write_text(wanted)
    assert (modules / "rhea").is_dir() and (modules / "ws").is_dir()
    return modules


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    add_user(users, "alice", "secret")
    with broker_with(tmp_path, sasl={"users_file": users}) as b:
        yield b


def run_rhea(
    modules: Path, url: str, send_to: str, count: int, receive_from: str, expected: int, *login: str
) -> dict[str, object]:
    env = {**os.environ, "NODE_PATH": str(modules)}
    res = subprocess.run(
        ["node", str(SCRIPT), url, send_to, str(count), receive_from, str(expected), *login],
        capture_output=True,
        text=True,
        timeout=T + 10,
        env=env,
    )
    lines = res.stdout.strip().splitlines()
    assert lines, f"rhea printed nothing (exit {res.returncode}):\n{res.stderr}"
    result: dict[str, object] = json.loads(lines[-1])
    assert res.returncode == 0 and "error" not in result, (result, res.stderr)
    return result


async def ours_send(url: str, address: str, bodies: list[str]) -> None:
    async with await connect(url, timeout=T) as conn:
        sender = await conn.open_sender(address)
        for body in bodies:
            assert isinstance(await sender.send(Message(body=body)), Accepted)


async def ours_receive(url: str, address: str, count: int) -> list[object]:
    got = []
    async with await connect(url, timeout=T) as conn:
        receiver = await conn.open_receiver(address, credit=count)
        for _ in range(count):
            d = await receiver.receive(timeout=T)
            got.append(d.message.body)
            await d.accept()
    return got


@pytest.mark.parametrize("login", [(), ("alice", "secret")], ids=["anonymous", "plain"])
def test_rhea_over_websockets(node_modules: Path, broker: RunningBroker, login: tuple[str, ...]) -> None:
    port = broker.http_port
    assert port
    ws = f"ws://127.0.0.1:{port}/$amqp"
    ours_url = f"ws://{':'.join(login)}@127.0.0.1:{port}/$amqp" if login else ws
    tag = "-".join(login) or "anon"
    to_rhea, from_rhea = f"to-rhea-{tag}", f"from-rhea-{tag}"
    ours = [f"ours-{i}" for i in range(5)]
    anyio.run(ours_send, ours_url, to_rhea, ours)

    result = run_rhea(node_modules, ws, from_rhea, 10, to_rhea, len(ours), *login)
    assert result["accepted"] == 10
    assert result["received"] == ours

    got = anyio.run(ours_receive, ours_url, from_rhea, 10)
    assert got[:9] == [f"rhea-{i}" for i in range(9)]
    big = got[9]
    assert isinstance(big, str) and big.startswith("rhea-9-") and len(big) == 7 + 300 * 1024


def test_rhea_logs_in_with_plain(
    node_modules: Path, broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """rhea chose PLAIN (our client would have chosen SCRAM), as the broker's log says."""
    port = broker.http_port
    with caplog.at_level(logging.INFO, "amqp10.broker"):
        result = run_rhea(node_modules, f"ws://127.0.0.1:{port}/$amqp", "from-rhea", 1, "nothing", 0, "alice", "secret")
    assert result["accepted"] == 1
    assert "authenticated as alice with PLAIN" in caplog.text
