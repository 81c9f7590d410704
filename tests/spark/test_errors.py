"""What a user sees when something is wrong: one line that says what, and which option to fix.

Spark wraps a Python data source's exception in its own, with the Python
traceback inside; the line a person reads is the exception's own, and each
check below finds it whole on one line of what Spark raises.
"""

from __future__ import annotations

import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp10 import errors
from amqp10.broker.config import AddressRule, BrokerConfig, Listener, SaslConfig, StoreConfig
from amqp10.broker.users import add_user
from amqp10.message import Message
from amqp10.spark._client import CHUNK, BrokerClient, read_range
from amqp10.spark.options import SourceOptions
from tests.broker.conftest import RunningBroker, start_broker
from tests.broker.test_crash import start

from .conftest import load


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """A broker that creates no node on first use and wants a password."""
    home = tmp_path_factory.mktemp("strict")
    users = home / "users.toml"
    add_user(users, "spark", "s3cret")
    config = BrokerConfig(
        listeners=[Listener(host="127.0.0.1", port=0)],
        store=StoreConfig(path=home / "store.sqlite3", commit_interval_ms=1),
        sasl=SaslConfig(users_file=users, allow_anonymous=False),
        auto_create=False,
        addresses=[AddressRule(pattern="events*", kind="stream")],
    )
    yield from start_broker(config)


def one_line(exc: BaseException, pattern: str) -> None:
    """Some line of ``exc``'s text matches ``pattern`` from its start to its end."""
    lines = str(exc).splitlines()
    assert any(re.fullmatch(pattern, line.strip()) for line in lines), "\n".join(lines[-15:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_fails(spark: Any, url: str, address: str, line: str, **options: str) -> None:
    """A batch read fails, and ``line`` (a regex) is one whole line of what Spark raises."""
    with pytest.raises(Exception) as info:
        load(spark.read, url, address, **options).collect()
    one_line(info.value, line)


def test_broker_down(spark: Any) -> None:
    port = free_port()  # nothing listens there once the socket is closed
    url = f"amqp://127.0.0.1:{port}"
    line = (
        rf".*ConnectError: cannot reach the broker at amqp://127\.0\.0\.1:{port} \(could not "
        rf"connect to 127\.0\.0\.1:{port}: connection refused\): is it running there\? check "
        "option 'url'"
    )
    read_fails(spark, url, "events-down", line)
    query = load(spark.readStream, url, "events-down").writeStream.format("noop").start()
    try:
        with pytest.raises(Exception) as streaming:
            query.awaitTermination(120)
        one_line(streaming.value, line)
    finally:
        query.stop()


def test_wrong_credentials(spark: Any, strict: RunningBroker) -> None:
    line = (
        rf".*AuthenticationError: the broker at amqp://spark@{strict.url} refused the login "
        r"\(wrong user name or password, or a SASL mechanism it does not offer\): check options "
        r"'user' and 'password' \(or the credentials in 'url'\)"
    )
    read_fails(spark, f"amqp://{strict.url}", "events-x", line, user="spark", password="wrong")


def test_unknown_node(spark: Any, strict: RunningBroker) -> None:
    line = (
        rf".*LinkError: there is no node 'no-such-node' on the broker at amqp://spark@{strict.url}:"
        r" check option 'address' \(or create the node first\)"
    )
    read_fails(spark, f"amqp://{strict.url}", "no-such-node", line, user="spark", password="s3cret")


def test_bad_option(spark: Any, url: str) -> None:
    line = r".*OptionError: option 'maxOffsetsPerTrigger' must be a whole number, not 'many'"
    read_fails(spark, url, "events-opt", line, maxOffsetsPerTrigger="many")


def test_broker_gone_mid_read_fails_the_read_at_once(tmp_path: Path) -> None:
    """SIGKILL of the broker while a range is half read: the read raises, it does not wait."""
    config = tmp_path / "broker.toml"
    config.write_text('[[addresses]]\npattern = "ev*"\nkind = "stream"\n')
    proc, port = start(tmp_path, extra=["--config", str(config)])
    try:
        options = SourceOptions.parse({"url": f"amqp://127.0.0.1:{port}", "address": "ev"})
        total = 3 * CHUNK  # the first chunk, one prefetched, and one the broker must still send
        with BrokerClient(options) as client:
            client.publish("ev", [Message(body=f"m{i}").encode() for i in range(total)])
        with BrokerClient(options) as client:
            chunks = read_range(client, "ev", 0, total)
            offsets, _ = next(chunks)
            assert offsets == list(range(CHUNK))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            with pytest.raises(errors.ConnectionError) as info:  # not a TimeoutError: no waiting
                for _ in chunks:
                    pass
    finally:
        proc.kill()
        proc.wait(10)
    one_line(
        info.value,
        rf"lost the broker at amqp://127\.0\.0\.1:{port} while reading stream 'ev' at offset "
        rf"\d+ of \[0, {total}\) \(.*\): this batch fails, and reads the same offsets when Spark "
        "runs it again",
    )
