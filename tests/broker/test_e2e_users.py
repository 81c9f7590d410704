"""Users imported from a RabbitMQ definitions file log in to a real broker with PLAIN,
from our client and from python-qpid-proton."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import amqp10.sync
from amqp10 import errors
from amqp10.broker.definitions import InMemoryTopology, import_definitions, load_definitions
from amqp10.broker.users import UsersFile, write_users_file
from amqp10.message import Message
from amqp10.types import Accepted

from .conftest import RunningBroker, broker_with

T = 10.0
EXPORT = Path(__file__).parent / "fixtures" / "rabbitmq_definitions.json"


def imported_users(tmp_path: Path) -> Path:
    """A users file holding the users of the RabbitMQ export (their RabbitMQ hashes)."""
    defs, _ = load_definitions(EXPORT)
    users = UsersFile()
    import_definitions(defs, users, InMemoryTopology())
    f = tmp_path / "users.toml"
    write_users_file(f, users)
    return f


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    sasl = {"users_file": imported_users(tmp_path), "allow_anonymous": False}
    with broker_with(tmp_path, sasl=sasl, vhosts=[{"name": "orders"}]) as b:
        yield b


def test_plain_login_with_a_rabbitmq_password_hash(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "amqp10.broker"):
        url = f"amqp://guest:guest@{broker.url}"  # a SHA-256 hash
        with amqp10.sync.connect(url, sasl_mechanisms=["PLAIN"], timeout=T) as conn:
            assert isinstance(conn.open_sender("imported").send(Message(body="guest")), Accepted)
        url = f"amqp://monitor:monitor-pw@{broker.url}"  # a SHA-512 hash; may read, not write
        with amqp10.sync.connect(url, sasl_mechanisms=["PLAIN"], timeout=T) as conn:
            delivery = conn.open_receiver("imported").receive(timeout=T)
            assert delivery.message.body == "guest"
            delivery.accept()
            with pytest.raises(errors.LinkError, match="amqp:unauthorized-access"):
                conn.open_sender("imported")
        with pytest.raises(errors.AuthenticationError):
            amqp10.sync.connect(
                f"amqp://guest:wrong@{broker.url}", sasl_mechanisms=["PLAIN"], timeout=T
            )
        with pytest.raises(errors.AuthenticationError):
            amqp10.sync.connect(
                f"amqp://guest:guest@{broker.url}", sasl_mechanisms=["SCRAM-SHA-256"], timeout=T
            )
    assert "authenticated as guest with PLAIN" in caplog.text
    assert "authenticated as monitor with PLAIN" in caplog.text
    assert "the user has only a RabbitMQ password hash, usable with PLAIN only" in caplog.text


@pytest.mark.proton
def test_proton_plain_login_with_a_rabbitmq_password_hash(broker: RunningBroker) -> None:
    from proton import ConnectionException
    from proton import Message as ProtonMessage
    from proton.utils import BlockingConnection

    conn = BlockingConnection(
        broker.url,
        timeout=T,
        user="orders-app",
        password="orders-secret",
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
        virtual_host="vhost:orders",  # the only virtual host this user may use
    )
    try:
        assert conn.conn.transport.authenticated
        conn.create_sender("orders.from-proton").send(ProtonMessage(body="hi"))
    finally:
        conn.close()
    with pytest.raises(ConnectionException, match="amqp:unauthorized-access"):
        BlockingConnection(
            broker.url,
            timeout=T,
            user="orders-app",
            password="wrong",
            allowed_mechs="PLAIN",
            allow_insecure_mechs=True,
        )
