"""Permissions enforced on a real broker over AMQP 1.0: RabbitMQ's configure/write/read
patterns per user and virtual host, from the users file, refused with
``amqp:unauthorized-access`` (our client and python-qpid-proton)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import amqp10.sync
from amqp10 import errors
from amqp10.broker.permissions import VhostPermissions
from amqp10.broker.users import add_user
from amqp10.message import Message
from amqp10.types import Accepted, Released

from .conftest import RunningBroker, broker_with

T = 10.0
UNAUTHORIZED = "amqp:unauthorized-access"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    add_user(users, "admin", "admin-pw", iterations=1000)  # full access on '/'
    # bob: publish to bob.* (queues) and the exchange 'events', read only bob.in; nothing in 'shop'
    bob = VhostPermissions(configure="^bob\\.", write="^(bob\\..*|events)$", read="^bob\\.in$")
    add_user(users, "bob", "bob-pw", iterations=1000, permissions={"/": bob})
    # carol: only the virtual host 'shop'
    carol = VhostPermissions(configure=".*", write=".*", read=".*")
    add_user(users, "carol", "carol-pw", iterations=1000, permissions={"shop": carol})
    sasl = {"users_file": users, "allow_anonymous": False}
    events = {
        "name": "/",
        "exchanges": [{"name": "events", "type": "fanout"}],
        "queues": ["events.log"],
        "bindings": [{"source": "events", "destination": "events.log"}],
    }
    vhosts = [{"name": "shop"}, events]
    with broker_with(tmp_path, sasl=sasl, vhosts=vhosts) as b:
        yield b


def url(b: RunningBroker, user: str) -> str:
    return f"amqp://{user}:{user}-pw@{b.url}"


def connect(b: RunningBroker, user: str, hostname: str | None = None) -> amqp10.sync.Connection:
    kw = {} if hostname is None else {"hostname": hostname}
    return amqp10.sync.connect(url(b, user), sasl_mechanisms=["PLAIN"], timeout=T, **kw)


def test_write_permission_decides_which_targets_a_user_may_publish_to(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with connect(broker, "bob") as conn, caplog.at_level(logging.WARNING, "amqp10.broker"):
        assert isinstance(conn.open_sender("bob.out").send(Message("ok")), Accepted)
        assert isinstance(conn.open_sender("/exchanges/events/any").send(Message("ok")), Accepted)
        with pytest.raises(errors.LinkError) as refused:
            conn.open_sender("orders")
        assert refused.value.condition == UNAUTHORIZED
        assert "bob" in str(refused.value) and "orders" in str(refused.value)
        with pytest.raises(errors.LinkError) as refused:
            conn.open_sender("/exchanges/amq.fanout/k")
        assert refused.value.condition == UNAUTHORIZED
        # attaching to an unknown address would declare it: that needs configure
        with pytest.raises(errors.LinkError) as refused:
            conn.open_sender("new-queue")
        assert refused.value.condition == UNAUTHORIZED
        assert "configure" in str(refused.value)
        assert "new-queue" not in broker.broker.nodes
        # the connection survives a refused link
        assert isinstance(conn.open_sender("bob.out").send(Message("again")), Accepted)
    assert "permission denied" in caplog.text and "'orders'" in caplog.text


def test_read_permission_decides_which_sources_a_user_may_consume(broker: RunningBroker) -> None:
    with connect(broker, "admin") as admin:
        admin.open_sender("bob.in").send(Message("for bob"))
        admin.open_sender("bob.out").send(Message("not for bob"))
    with connect(broker, "bob") as conn:
        receiver = conn.open_receiver("bob.in", credit=10)
        delivery = receiver.receive(timeout=T)
        assert delivery.message.body == "for bob"
        delivery.accept()
        with pytest.raises(errors.LinkError) as refused:
            conn.open_receiver("bob.out")
        assert refused.value.condition == UNAUTHORIZED


def test_a_user_without_permissions_on_a_vhost_cannot_open_it(broker: RunningBroker) -> None:
    with pytest.raises(errors.ConnectionError) as refused:
        connect(broker, "bob", hostname="vhost:shop")
    assert refused.value.condition == UNAUTHORIZED
    with pytest.raises(errors.ConnectionError) as refused:
        connect(broker, "carol")  # carol has no entry for '/'
    assert refused.value.condition == UNAUTHORIZED
    with connect(broker, "carol", hostname="vhost:shop") as conn:
        assert isinstance(conn.open_sender("anything").send(Message("x")), Accepted)


def test_an_admin_with_full_access_may_do_everything(broker: RunningBroker) -> None:
    with connect(broker, "admin") as conn:
        for address in ("orders", "bob.in", "/exchanges/events/x"):
            assert isinstance(conn.open_sender(address).send(Message(address)), Accepted)
        # attached, and routed to no queue: released (not refused)
        assert isinstance(conn.open_sender("/exchanges/amq.fanout/k").send(Message("x")), Released)
        conn.open_receiver("orders").close()


@pytest.mark.proton
def test_proton_client_is_refused_with_unauthorized_access(broker: RunningBroker) -> None:
    from proton import Message as PMessage
    from proton.utils import BlockingConnection, LinkDetached

    conn = BlockingConnection(
        f"amqp://{broker.url}", user="bob", password="bob-pw", allowed_mechs="PLAIN", timeout=T
    )
    try:
        conn.create_sender("bob.proton").send(PMessage(body="ok"))
        with pytest.raises(LinkDetached) as refused:
            conn.create_sender("orders")
        assert UNAUTHORIZED in str(refused.value)
    finally:
        conn.close()
