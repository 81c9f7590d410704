"""The broker's 0-10 front end with a bare 0-10 peer (tests/amqp010/peer.py): the TLS listener
with PLAIN and EXTERNAL, virtual hosts, heartbeats, Qpid's queue limits and priorities, and
message groups (``JMSXGroupID``, 1.0's ``group-id``)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

import amqp10.sync
from amqp10.broker.config import Listener
from amqp10.message import Message
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.conftest import RunningBroker, broker_with, with_certificate_user
from tests.client.helpers import Certs, have_openssl, make_certs

T = 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, vhosts=[{"name": "orders"}]) as b:
        yield b


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


def publish(p: SocketPeer, key: str, body: bytes, *, priority: int | None = None, **props: object) -> None:
    dp = struct("delivery-properties", routing_key=key)
    if priority is not None:
        dp.values["priority"] = priority
    p.call(
        "message.transfer",
        destination="",
        accept_mode=1,
        acquire_mode=0,
        headers=[dp, struct("message-properties", **props)],
        body=body,
    )


def subscribe(p: SocketPeer, queue: str, destination: str, credit: int = 100) -> None:
    p.call("message.subscribe", queue=queue, destination=destination, accept_mode=0, acquire_mode=0)
    p.call("message.set-flow-mode", destination=destination, flow_mode=0)
    p.call("message.flow", destination=destination, unit=0, value=credit)
    p.call("message.flow", destination=destination, unit=1, value=0xFFFFFFFF)


def count(p: SocketPeer, queue: str) -> int:
    result = p.call("queue.query", queue=queue)
    assert result is not None
    return int(result["message_count"])


# -- the TLS listener ---------------------------------------------------------------------------
def test_tls_listener_serves_0_10_with_plain_and_external(tmp_path: Path, certs: Certs, users_file: Path) -> None:
    listener = Listener(
        host="127.0.0.1", port=0, tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca
    )
    users = with_certificate_user(users_file, tmp_path)
    sasl = {"users_file": users, "allow_anonymous": False, "mechanisms": ["EXTERNAL", "PLAIN"]}
    with broker_with(tmp_path, listeners=[listener], sasl=sasl) as b:
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        p = SocketPeer(b.port, tls=ctx, mechanism="PLAIN", response=b"\x00alice\x00secret")
        p.attach()
        p.call("queue.declare", queue="over-tls")
        assert [cl.handler.user for cl in b.service.clients] == ["alice"]
        p.close()
        # no client certificate: EXTERNAL is not offered, so asking for it is refused
        with pytest.raises(AssertionError, match=r"connection closed|connection ended"):
            SocketPeer(b.port, tls=ctx, mechanism="EXTERNAL")
        ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        p = SocketPeer(b.port, tls=ctx, mechanism="EXTERNAL")
        p.attach()
        assert count(p, "over-tls") == 0
        assert [cl.handler.user for cl in b.service.clients] == ["CN=amqp10-test-client"]
        p.close()


def test_external_is_refused_without_tls(tmp_path: Path, users_file: Path) -> None:
    users = with_certificate_user(users_file, tmp_path)
    sasl = {"users_file": users, "allow_anonymous": False, "mechanisms": ["EXTERNAL", "PLAIN"]}
    with broker_with(tmp_path, sasl=sasl) as b:
        with pytest.raises(AssertionError, match=r"connection closed|connection ended"):
            SocketPeer(b.port, mechanism="EXTERNAL")
        SocketPeer(b.port, mechanism="PLAIN", response=b"\x00bob\x00hunter2").close()


# -- virtual hosts --------------------------------------------------------------------------
def test_virtual_hosts_are_separate_and_an_unknown_one_is_refused(broker: RunningBroker, peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="in-default")
    other = SocketPeer(broker.port, virtual_host="orders")
    try:
        other.attach()
        other.call("queue.declare", queue="in-orders")
        publish(other, "in-orders", b"o")
        assert count(other, "in-orders") == 1
        missing = other.call("queue.query", queue="in-default")  # (the default host's)
        assert missing is not None and missing.get("queue") is None
    finally:
        other.close()
    assert broker.broker.vhost("orders").queue("in-orders") is not None
    assert broker.broker.default.queue("in-orders") is None
    with pytest.raises(AssertionError, match="no virtual host 'nowhere'"):
        SocketPeer(broker.port, virtual_host="nowhere")


# -- heartbeats -----------------------------------------------------------------------------
def test_a_silent_peer_is_dropped_after_two_heartbeat_intervals(broker: RunningBroker) -> None:
    p = SocketPeer(broker.port, heartbeat=1)
    try:
        p.sock.settimeout(T)
        got = b""
        while True:  # the broker's heartbeats come, then (we never answer) the end
            data = p.sock.recv(65536)
            if not data:
                break
            got += data
            assert len(got) < 1 << 20
        p.feed(got)
        assert "connection.heartbeat" in p.names()
    finally:
        p.sock.close()


# -- Qpid's queue arguments -----------------------------------------------------------------
def test_qpid_max_count_with_reject_refuses_a_transfer_with_resource_limit_exceeded(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="capped", arguments={"qpid.max_count": 2, "qpid.policy_type": "reject"})
    publish(peer, "capped", b"1")
    publish(peer, "capped", b"2")
    assert count(peer, "capped") == 2
    cid = peer.command(
        "message.transfer",
        destination="",
        accept_mode=1,
        acquire_mode=0,
        headers=[struct("delivery-properties", routing_key="capped")],
        body=b"3",
    )
    peer.flush()
    (exc,) = peer.wait("execution.exception")
    assert exc["error_code"] == 506 and exc["command_id"] == cid and "full" in exc["description"]


def test_qpid_max_count_with_ring_drops_the_oldest(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="ring", arguments={"qpid.max_count": "2", "qpid.policy_type": "ring"})
    for body in (b"1", b"2", b"3"):
        publish(peer, "ring", body)
    assert count(peer, "ring") == 2
    subscribe(peer, "ring", "d")
    assert [t.body for t in peer.wait("message.transfer", 2)] == [b"2", b"3"]


def test_qpid_max_size_limits_the_bytes_queued(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="sized", arguments={"qpid.max_size": 1500, "qpid.policy_type": "ring"})
    for body in (b"a" * 1000, b"b" * 1000):  # room for one (with its header structs)
        publish(peer, "sized", body)
    assert count(peer, "sized") == 1
    subscribe(peer, "sized", "d")
    assert [t.body for t in peer.wait("message.transfer")] == [b"b" * 1000]


def test_a_limit_that_is_not_a_number_is_an_invalid_argument(peer: SocketPeer) -> None:
    cid = peer.command("queue.declare", queue="bad", arguments={"qpid.max_count": "many"})
    peer.flush()
    (exc,) = peer.wait("execution.exception")
    assert exc["error_code"] == 542 and exc["command_id"] == cid and "qpid.max_count" in exc["description"]


def test_x_qpid_priorities_delivers_the_highest_priority_first(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="prio", arguments={"x-qpid-priorities": 10})
    for body, priority in ((b"low", 1), (b"high", 9), (b"mid", 5), (b"plain", None)):
        publish(peer, "prio", body, priority=priority)
    subscribe(peer, "prio", "d")
    got = peer.wait("message.transfer", 4)
    assert [t.body for t in got] == [b"high", b"mid", b"plain", b"low"]  # no priority: 4
    dp = got[0].header("delivery-properties")
    assert dp is not None and dp["priority"] == 9


# -- message groups -------------------------------------------------------------------------
def test_a_group_goes_to_one_subscriber_at_a_time(broker: RunningBroker, peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="grouped")
    for i, group in enumerate("AABBAB"):
        publish(peer, "grouped", str(i).encode(), application_headers={"JMSXGroupID": group})
    subscribe(peer, "grouped", "one", credit=1)
    (first,) = peer.wait("message.transfer")  # group A is this subscriber's now
    assert first.body == b"0"
    other = SocketPeer(broker.port)
    try:
        other.attach(name=b"s2")
        subscribe(other, "grouped", "two", credit=10)
        got = other.wait("message.transfer", 3)
        assert [t.body for t in got] == [b"2", b"3", b"5"]  # group B only: A is held
        other.call("message.accept", transfers=((got[0].id, got[-1].id),))
    finally:
        other.close()
    peer.call("message.flow", destination="one", unit=0, value=10)
    assert [t.body for t in peer.wait("message.transfer", 2)] == [b"1", b"4"]


def test_the_group_is_1_0_group_id_both_ways(broker: RunningBroker, peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="g10")
    publish(peer, "g10", b"x", application_headers={"JMSXGroupID": "G", "n": 1})
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        d = c1.open_receiver("g10", credit=1).receive(timeout=T)
        d.accept()
        assert d.message.group_id == "G" and d.message.application_properties == {"n": 1}
        c1.open_sender("g10").send(Message(body=b"y", group_id="H"))
    subscribe(peer, "g10", "d")
    (t,) = peer.wait("message.transfer")
    mp = t.header("message-properties")
    assert t.body == b"y" and mp is not None and mp["application_headers"]["JMSXGroupID"] == "H"
