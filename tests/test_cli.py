"""``amqp10 send`` / ``amqp10 receive`` run as subprocesses against a real broker on 127.0.0.1.

The broker runs in this process (a background thread); every command is a
separate ``python -m amqp10.cli`` process with a timeout. Each test uses its own
addresses.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from amqp10.cli.progress import Progress
from amqp10.cli.sendrecv import CliError, message_to_json, parse_property
from amqp10.message import Message
from amqp10.types import symbol
from tests.broker.conftest import RunningBroker, make_config, start_broker
from tests.client.helpers import Service, running

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(
    r"^sent (\d+), accepted (\d+), rejected (\d+), released (\d+), modified (\d+) "
    r"in [\d.]+s \([\d,]+ msg/s\)$"
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from start_broker(make_config(tmp_path_factory.mktemp("cli-broker")))


def amqp10(
    *args: str, stdin: str | bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[Any]:
    """Run ``python -m amqp10.cli ARGS``; text out unless ``stdin`` is bytes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    binary = isinstance(stdin, bytes)
    return subprocess.run(
        [sys.executable, "-m", "amqp10.cli", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=not binary,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def one_line_error(r: subprocess.CompletedProcess[Any], command: str) -> str:
    """The failure is one line on stderr, prefixed with the command; never a traceback."""
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"amqp10 {command}: "), lines[0]
    return lines[0]


def summary(r: subprocess.CompletedProcess[Any]) -> tuple[int, ...]:
    m = SUMMARY.match(r.stdout.strip())
    assert m, r.stdout + r.stderr
    return tuple(int(g) for g in m.groups())


def receive_text(url: str, address: str, count: int, *extra: str) -> list[str]:
    """Receive ``count`` messages as text lines (within 10 s of silence)."""
    r = amqp10("receive", url, address, "--count", str(count), "--timeout", "10", *extra)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


# -- send ---------------------------------------------------------------------------------------


def test_send_arguments_then_receive_them_in_order(broker: RunningBroker) -> None:
    r = amqp10("send", broker.url, "cli-args", "one", "two", "three")
    assert r.returncode == 0, r.stderr
    assert summary(r) == (3, 3, 0, 0, 0)
    assert r.stderr == ""  # no progress bar: stderr is not a terminal
    r = amqp10("receive", broker.url, "cli-args", "--count", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["one", "two", "three"]
    r = amqp10("receive", broker.url, "cli-args", "--timeout", "0.5")
    assert r.returncode == 0 and r.stdout == ""  # the three printed were accepted: gone


def test_send_lines_of_a_file(broker: RunningBroker, tmp_path: Path) -> None:
    f = tmp_path / "messages.txt"
    f.write_text("alpha\nbeta\n\ngamma\n", encoding="utf-8")
    r = amqp10("send", f"amqp://{broker.url}", "cli-file", "--file", str(f))
    assert summary(r) == (4, 4, 0, 0, 0)  # the empty line is an empty message
    assert receive_text(broker.url, "cli-file", 4) == ["alpha", "beta", "", "gamma"]


def test_send_lines_of_stdin(broker: RunningBroker) -> None:
    r = amqp10("send", broker.url, "cli-stdin", "-", stdin="héllo\r\nwörld\n")
    assert summary(r) == (2, 2, 0, 0, 0)
    r = amqp10("send", broker.url, "cli-stdin", "--file", "-", stdin="third\n")
    assert summary(r) == (1, 1, 0, 0, 0)
    assert receive_text(broker.url, "cli-stdin", 3) == ["héllo", "wörld", "third"]


def test_count_cycles_through_the_messages(broker: RunningBroker) -> None:
    r = amqp10("send", broker.url, "cli-count", "a", "b", "--count", "5")
    assert summary(r) == (5, 5, 0, 0, 0)
    # from stdin: --count stops early, or cycles through what was read
    r = amqp10("send", broker.url, "cli-count", "-", "--count", "3", stdin="x\ny\nz\nw\n")
    assert summary(r) == (3, 3, 0, 0, 0)
    r = amqp10("send", broker.url, "cli-count", "-", "--count", "3", stdin="q\n")
    assert summary(r) == (3, 3, 0, 0, 0)
    assert receive_text(broker.url, "cli-count", 11) == list("ababa") + list("xyz") + list("qqq")


def test_properties_and_json_output(broker: RunningBroker) -> None:
    r = amqp10(
        "send", broker.url, "cli-json", "payload",
        "--property", "colour=red", "--property", "size:=42", "--property", "ok:=true",
        "--property", "eq=a=b", "--subject", "greeting", "--content-type", "text/plain", "--durable",
    )  # fmt: skip
    assert summary(r) == (1, 1, 0, 0, 0)
    r = amqp10("receive", broker.url, "cli-json", "--count", "1", "--format", "json")
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    doc = json.loads(line)
    assert doc["body"] == "payload" and doc["body_type"] == "value"
    assert doc["application_properties"] == {"colour": "red", "size": 42, "ok": True, "eq": "a=b"}
    assert doc["properties"]["subject"] == "greeting"
    assert doc["properties"]["content_type"] == "text/plain"
    assert doc["header"]["durable"] is True


def test_binary_bodies_as_base64_and_raw(broker: RunningBroker) -> None:
    r = amqp10("send", broker.url, "cli-bin", "bytes!", "--data", "--count", "2")
    assert summary(r) == (2, 2, 0, 0, 0)
    r = amqp10("receive", broker.url, "cli-bin", "--count", "1", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["body_type"] == "data" and doc["binary"] is True
    assert base64.b64decode(doc["body"]) == b"bytes!"
    r = amqp10("receive", broker.url, "cli-bin", "--count", "1", "--format", "raw", stdin=b"")
    assert r.returncode == 0 and r.stdout == b"bytes!"


def test_at_most_once_and_rate(broker: RunningBroker) -> None:
    started = time.monotonic()
    r = amqp10(
        "send",
        broker.url,
        "cli-rate",
        "m",
        "--count",
        "6",
        "--rate",
        "20",
        "--settle",
        "at-most-once",
    )
    assert r.returncode == 0, r.stderr
    assert re.match(r"^sent 6 \(pre-settled\) in [\d.]+s", r.stdout)
    assert time.monotonic() - started >= 0.25  # 6 messages at 20/s: 5 gaps of 50 ms
    assert receive_text(broker.url, "cli-rate", 6) == ["m"] * 6


def test_progress_bar_on_request(broker: RunningBroker) -> None:
    r = amqp10("send", broker.url, "cli-progress", "p", "--count", "50", "--progress")
    assert summary(r) == (50, 50, 0, 0, 0)
    assert "50/50 msgs" in r.stderr and "100.0%" in r.stderr
    r = amqp10("receive", broker.url, "cli-progress", "--count", "50", "--progress")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 50
    assert "50/50 msgs" in r.stderr


def test_browse_leaves_the_messages(broker: RunningBroker) -> None:
    amqp10("send", broker.url, "cli-browse", "b1", "b2")
    assert receive_text(broker.url, "cli-browse", 2, "--browse") == ["b1", "b2"]
    assert receive_text(broker.url, "cli-browse", 2) == ["b1", "b2"]


def test_many_messages_pipelined(broker: RunningBroker) -> None:
    r = amqp10("send", broker.url, "cli-many", "-", stdin="".join(f"{i}\n" for i in range(3000)))
    assert summary(r) == (3000, 3000, 0, 0, 0)
    got = receive_text(broker.url, "cli-many", 3000, "--credit", "500")
    assert got == [str(i) for i in range(3000)]  # in order


# -- receive ------------------------------------------------------------------------------------


def test_receive_timeout(broker: RunningBroker) -> None:
    started = time.monotonic()
    r = amqp10("receive", broker.url, "cli-empty", "--timeout", "0.5")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""  # drained: nothing there
    assert time.monotonic() - started < 30
    amqp10("send", broker.url, "cli-empty", "only")
    r = amqp10("receive", broker.url, "cli-empty", "--timeout", "0.5", "--count", "3")
    assert r.stdout.splitlines() == ["only"]
    err = one_line_error(r, "receive")
    assert err == "amqp10 receive: timed out after 0.5s without a message (1 of 3 received)"
    assert r.returncode == 1


# -- errors ----------------------------------------------------------------------------------------


def _free_port() -> int:
    async def free() -> int:
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port: int = listener.extra(anyio.abc.SocketAttribute.local_port)
        return port

    return anyio.run(free)


def test_refused_connection_is_one_line() -> None:
    port = _free_port()
    r = amqp10("send", f"127.0.0.1:{port}", "q", "x", "--timeout", "5")
    assert (
        one_line_error(r, "send")
        == f"amqp10 send: could not connect to 127.0.0.1:{port}: connection refused"
    )
    assert r.returncode == 1
    r = amqp10("receive", f"amqp://127.0.0.1:{port}", "q", "--timeout", "5")
    assert (
        one_line_error(r, "receive")
        == f"amqp10 receive: could not connect to 127.0.0.1:{port}: connection refused"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1", "unsupported URL scheme 'http' (use amqp://, amqps://, ws:// or wss://)"),
        ("amqp://127.0.0.1:notaport", "bad port in URL"),
        ("amqp://", "no host in URL"),
    ],
)
def test_bad_url_is_one_line(url: str, expected: str) -> None:
    for command in ("send", "receive"):
        args = ["x"] if command == "send" else []
        r = amqp10(command, url, "q", *args)
        assert expected in one_line_error(r, command)
        assert r.returncode == 2


def test_usage_errors_are_one_line(broker: RunningBroker, tmp_path: Path) -> None:
    r = amqp10("send", broker.url, "q", "x", "--property", "novalue")
    assert "expected KEY=VALUE or KEY:=JSON" in one_line_error(r, "send")
    r = amqp10("send", broker.url, "q", "x", "--property", "n:=not json")
    assert "is not JSON" in one_line_error(r, "send")
    r = amqp10("send", broker.url, "q", "--file", str(tmp_path / "missing.txt"))
    assert "cannot read" in one_line_error(r, "send")
    assert "no such file or directory" in r.stderr
    r = amqp10("send", broker.url, "q", "x", "--file", "-")
    assert "not both" in one_line_error(r, "send")
    r = amqp10("send", broker.url, "q", "-", stdin="")
    assert one_line_error(r, "send") == "amqp10 send: nothing to send: the input has no lines"


def test_rejected_messages_fail_the_run() -> None:
    svc = Service()
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(running(svc)) as server,
    ):
        r = amqp10("send", server.url, "q", "a", "b", "--subject", "reject")
        r_ok = amqp10("send", server.url, "q", "fine")
    assert summary(r) == (2, 0, 2, 0, 0)
    assert one_line_error(r, "send") == (
        "amqp10 send: 2 of 2 not accepted (first: rejected (amqp:not-allowed: no thanks))"
    )
    assert summary(r_ok) == (1, 1, 0, 0, 0) and r_ok.returncode == 0


def test_a_refused_link_is_one_line() -> None:
    from amqp10.types import Error, ErrorCondition

    def refuse(kind: str, address: str | None) -> Error | None:
        return Error(condition=ErrorCondition.NOT_FOUND, description=f"no node {address}")

    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(running(Service(), link_filter=refuse)) as server,
    ):
        r = amqp10("receive", server.url, "nowhere", "--timeout", "5")
    err = one_line_error(r, "receive")
    assert (
        err
        == "amqp10 receive: the peer refused the receiver from 'nowhere': amqp:not-found: no node nowhere"
    )


def test_help_lists_the_commands() -> None:
    r = amqp10("--help")
    assert r.returncode == 0 and "send" in r.stdout and "receive" in r.stdout
    r = amqp10("send", "--help")
    assert r.returncode == 0 and "--rate" in r.stdout and "--property" in r.stdout


# -- the pieces, in process -----------------------------------------------------------------------


def test_parse_property() -> None:
    assert parse_property("a=1") == ("a", "1")
    assert parse_property("a:=1") == ("a", 1)
    assert parse_property("a:=null") == ("a", None)
    assert parse_property("url=http://x?y=1") == ("url", "http://x?y=1")
    with pytest.raises(CliError):
        parse_property("=v")
    with pytest.raises(CliError):
        parse_property("a:=[1]")


def test_message_to_json_covers_amqp_types() -> None:
    import uuid

    m = Message(
        {"k": b"\x00\x01", "n": [1, 2.5, None]},
        message_annotations={symbol("x-opt"): symbol("s")},
        application_properties={"u": "v"},
    )
    m.id = uuid.UUID(int=1)
    doc = message_to_json(Message.decode(m.encode()))
    assert doc["body"] == {"k": "AAE=", "n": [1, 2.5, None]}
    assert doc["message_annotations"] == {"x-opt": "s"}
    assert doc["properties"]["message_id"] == str(uuid.UUID(int=1))
    json.dumps(doc)  # serialisable


def test_progress_without_a_total() -> None:
    out = io.StringIO()
    bar = Progress(None, out)
    bar.update(1234, force=True)
    assert "1,234 msgs" in out.getvalue() and "%" not in out.getvalue()
    Progress(10, out, enabled=False).update(5, force=True)
    assert out.getvalue().count("\n") == 1
