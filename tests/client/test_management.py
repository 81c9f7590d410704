"""Management from the client, ``conn.management()``, against our broker over real sockets.

Both protocols — RabbitMQ 4's HTTP over AMQP on ``/management`` and the OASIS draft's
``$management`` — through the async API and the blocking one, every operation, and the
server's refusals as :class:`~amqp10.errors.ManagementError` (400, 403, 404, 409); and
the shared messages (:mod:`amqp10.management`) as both ends read them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import amqp10.client
import amqp10.sync
from amqp10 import errors
from amqp10.client import Connection, SettleMode
from amqp10.client.management import OASIS, RABBITMQ, protocol_of
from amqp10.management import QueueInfo, http, oasis
from amqp10.message import Message
from amqp10.types import Accepted, Released, SenderSettleMode
from tests.broker.amqp1.e2e import bodies, client
from tests.broker.conftest import RunningBroker, broker_with

T = 10.0  # seconds any single wait may take
PROTOCOLS = [RABBITMQ, OASIS]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_with(tmp_path_factory.mktemp("mgmt")) as b:
        yield b


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def send(conn: Connection, address: str, n: int) -> list[Any]:
    s = await conn.open_sender(address)
    outcomes = [await s.send(Message(body=i)) for i in range(n)]
    await s.close()
    return outcomes


# -- choosing the protocol -------------------------------------------------------------------
@pytest.mark.anyio
async def test_the_protocol_is_picked_from_the_peers_open(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        assert conn.management().protocol == RABBITMQ  # our broker says RabbitMQ 4.2.0
        assert conn.management(protocol=OASIS).protocol == OASIS
        with pytest.raises(ValueError, match="protocol must be one of"):
            conn.management(protocol="smtp")
    assert protocol_of({"product": "RabbitMQ", "version": "4.0.5"}) == RABBITMQ
    assert protocol_of({"product": "RabbitMQ", "version": "3.13.7"}) == OASIS
    assert protocol_of({"product": "apache-activemq-artemis"}) == OASIS
    assert protocol_of(None) == OASIS


# -- queues ----------------------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_queues_declared_read_purged_deleted(broker: RunningBroker, protocol: str) -> None:
    name = unique("orders/q")  # a slash: percent-encoded in RabbitMQ's paths
    async with client(broker) as conn, conn.management(protocol=protocol) as m:
        args = {"x-max-length": 10}
        q = await m.declare_queue(name, type="quorum", arguments=args)
        assert isinstance(q, QueueInfo)
        assert (q.name, q.type, q.durable, q.message_count) == (name, "quorum", True, 0)
        assert q.arguments == {**args, "x-queue-type": "quorum"}
        again = await m.declare_queue(name, type="quorum", arguments=args)  # the same: fine
        assert again.name == name and again.type == "quorum"

        address = http.queue_path(name)
        assert all(isinstance(o, Accepted) for o in await send(conn, address, 3))
        info = await m.queue_info(name)
        assert (info.message_count, info.consumer_count, info.type) == (3, 0, "quorum")
        assert await m.purge_queue(name) == 3
        assert (await m.queue_info(name)).message_count == 0

        await send(conn, address, 2)
        with pytest.raises(errors.ConflictError, match="has 2 messages") as refused:
            await m.delete_queue(name, if_empty=True)
        assert refused.value.status == 409
        r = await conn.open_receiver(address, credit=0)
        with pytest.raises(errors.ConflictError, match="has 1 consumers"):
            await m.delete_queue(name, if_unused=True)
        await r.close()
        assert await m.delete_queue(name) == 2
        with pytest.raises(errors.NotFoundError) as missing:
            await m.queue_info(name)
        assert missing.value.status == 404 and name in str(missing.value)


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_queue_types_and_flags(broker: RunningBroker, protocol: str) -> None:
    log, plain = unique("log"), unique("plain")
    async with client(broker) as conn, conn.management(protocol=protocol) as m:
        st = await m.declare_queue(log, type="stream", arguments={"x-max-age": "1D"})
        assert st.type == "stream" and (await m.queue_info(log)).type == "stream"
        cq = await m.declare_queue(plain, durable=False)
        assert (cq.type, cq.durable, cq.auto_delete) == ("classic", False, False)
        assert await m.delete_queue(log) == 0
        assert await m.delete_queue(plain) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_lists_where_the_protocol_has_them(broker: RunningBroker, protocol: str) -> None:
    q, x = unique("listed"), unique("listed-x")
    async with client(broker) as conn, conn.management(protocol=protocol) as m:
        await m.declare_queue(q)
        await m.declare_exchange(x, "fanout")
        if protocol == RABBITMQ:
            for listing in (m.list_queues, m.list_exchanges):
                with pytest.raises(errors.ManagementError, match="no listing") as refused:
                    await listing()
                assert refused.value.status == 501
        else:
            queues = {each.name: each for each in await m.list_queues()}
            assert queues[q].type == "classic" and queues[q].message_count == 0
            exchanges = {each.name: each for each in await m.list_exchanges()}
            assert exchanges[x].type == "fanout" and exchanges[x].durable is True
        await m.delete_queue(q)
        await m.delete_exchange(x)


# -- exchanges and bindings ------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_exchanges_and_bindings(broker: RunningBroker, protocol: str) -> None:
    prices, every = unique("prices"), unique("all")
    nyse, everything = unique("nyse"), unique("every")
    async with client(broker) as conn, conn.management(protocol=protocol) as m:
        await m.declare_exchange(prices, "topic")
        await m.declare_exchange(prices, "topic")  # the same: fine
        with pytest.raises(errors.ConflictError) as refused:
            await m.declare_exchange(prices, "fanout")
        assert refused.value.status == 409
        await m.declare_exchange(every, "fanout")
        await m.declare_queue(nyse)
        await m.declare_queue(everything)

        await m.bind(prices, destination_queue=nyse, binding_key="stock.nyse.*")
        await m.bind(prices, destination_exchange=every, binding_key="#")
        await m.bind(every, destination_queue=everything, arguments={"x-note": "with arguments"})
        assert await send(conn, f"{http.exchange_path(prices)}/stock.nyse.ibm", 1) == [Accepted()]
        assert await bodies(conn, http.queue_path(nyse), 1) == [0]
        assert await bodies(conn, http.queue_path(everything), 1) == [0]

        await m.unbind(prices, destination_queue=nyse, binding_key="stock.nyse.*")
        await m.unbind(every, destination_queue=everything, arguments={"x-note": "with arguments"})
        assert await send(conn, f"{http.exchange_path(prices)}/stock.nyse.ibm", 1) == [Released()]  # routed nowhere
        await m.unbind(prices, destination_exchange=every, binding_key="#")
        with pytest.raises(ValueError, match="one destination"):
            await m.bind(prices, destination_queue=nyse, destination_exchange=every)

        await m.delete_exchange(prices)
        await m.delete_exchange(every)
        with pytest.raises(errors.NotFoundError):
            await m.queue_info(unique("never-declared"))
        await m.delete_queue(nyse)
        await m.delete_queue(everything)


# -- what the server refuses -----------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_refusals_are_management_errors(broker: RunningBroker, protocol: str) -> None:
    name = unique("refusals")
    async with client(broker) as conn, conn.management(protocol=protocol) as m:
        await m.declare_queue(name, arguments={"x-max-length": 5})
        with pytest.raises(errors.ConflictError) as conflict:  # 409: exists with other arguments
            await m.declare_queue(name, arguments={"x-max-length": 6})
        assert conflict.value.status == 409 and f"declaring queue {name!r}: 409" in str(conflict.value)
        assert isinstance(conflict.value, errors.ManagementError) and isinstance(conflict.value, errors.AMQPError)

        with pytest.raises(errors.BadRequestError) as bad:  # 400: a queue needs a name
            await m.declare_queue("")
        assert bad.value.status == 400 and bad.value.description

        with pytest.raises(errors.BadRequestError) as bad_body:  # 400: a body the server cannot take
            await bad_request_body(conn, protocol, unique("bad"))
        assert bad_body.value.status == 400

        if protocol == RABBITMQ:
            with pytest.raises(errors.ForbiddenError) as forbidden:  # 403: RabbitMQ's reserved prefix
                await m.declare_queue("amq.mine")
            assert forbidden.value.status == 403 and "reserved prefix" in str(forbidden.value)
            assert await m.delete_queue(unique("gone")) == 0  # RabbitMQ deletes what is not there
        else:
            with pytest.raises(errors.NotFoundError) as missing:  # 404
                await m.delete_queue(unique("gone"))
            assert missing.value.status == 404
            with pytest.raises(errors.NotFoundError):
                await m.delete_exchange(unique("gone"))
        await m.delete_queue(name)


async def bad_request_body(conn: Connection, protocol: str, name: str) -> None:
    """A declaration whose body is not what the protocol takes, sent with the shared messages."""
    if protocol == RABBITMQ:
        links = await conn.request_links(
            http.ADDRESS, reply_address=http.ADDRESS, reply_to=http.REPLY_TO, name=unique("management-link-pair"),
            properties=dict(http.LINK_PROPERTIES), settle_mode=SettleMode.AT_MOST_ONCE,
        )  # fmt: skip
        reply = await links.request(http.request("PUT", http.queue_path(name), {"colour": "red"}))
        await links.close()
        status, body = http.parse_reply(reply)
        http.check(status, body, (200, 201), f"declaring queue {name!r}")
    else:
        links = await conn.request_links(oasis.ADDRESS)
        reply = await links.request(oasis.request(oasis.Request(operation="CREATE", type="queue", name=name, body=["red"])))
        await links.close()
        response = oasis.parse_response(reply)
        raise errors.ManagementError.for_status(response.status, response.description, f"declaring queue {name!r}")


# -- blocking --------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_blocking_management(broker: RunningBroker, protocol: str) -> None:
    name, x = unique("sync"), unique("sync-x")
    with amqp10.sync.connect(broker.url, timeout=T) as conn, conn.management(protocol=protocol) as m:
        assert m.protocol == protocol
        q = m.declare_queue(name, type="classic", arguments={"x-max-length": 100})
        assert q.type == "classic" and q.arguments["x-max-length"] == 100
        m.declare_exchange(x, "direct")
        m.bind(x, destination_queue=name, binding_key="k")
        sender = conn.open_sender(f"{http.exchange_path(x)}/k")
        for i in range(4):
            assert isinstance(sender.send(Message(body=i)), Accepted)
        sender.close()
        assert m.queue_info(name).message_count == 4
        assert m.purge_queue(name) == 4
        m.unbind(x, destination_queue=name, binding_key="k")
        with pytest.raises(errors.ConflictError):
            m.declare_exchange(x, "topic")
        m.delete_exchange(x)
        assert m.delete_queue(name) == 0
        with pytest.raises(errors.NotFoundError):
            m.queue_info(name)


@pytest.mark.anyio
async def test_the_rabbitmq_links_are_a_pair_and_come_back_after_close(broker: RunningBroker) -> None:
    name = unique("pair")
    async with client(broker) as conn:
        m = conn.management()
        await m.declare_queue(name)
        await m.close()
        assert (await m.queue_info(name)).name == name  # a later call attaches the pair again
        await m.delete_queue(name)
        await m.close()


# -- the shared messages ---------------------------------------------------------------------
def test_rabbitmq_paths_percent_encode_every_reserved_byte() -> None:
    assert http.queue_path("a/b c?é") == "/queues/a%2Fb%20c%3F%C3%A9"
    assert http.purge_path("q.1_~-") == "/queues/q.1_~-/messages"
    assert http.exchange_path("x;y") == "/exchanges/x%3By"
    path = http.binding_path("src x", "exchange", "dst/y", "a.*", http.args_hash({"k": 1}))
    assert path.startswith("/bindings/src=src%20x;dste=dst%2Fy;key=a.%2A;args=")
    segments, query = http.parse_path(path)
    assert segments[0] == "bindings"
    assert http.parse_binding_path(path.rsplit("/", 1)[1]) == ("src x", "exchange", "dst/y", "a.*", http.args_hash({"k": 1}))
    assert http.parse_binding_path("src=a;key=b") is None
    assert http.parse_path(http.bindings_query("s", "queue", "q 1", "k*")) == (["bindings"], {"src": "s", "dstq": "q 1", "key": "k*"})


def test_rabbitmq_requests_and_replies() -> None:
    req = Message.decode(http.request("PUT", "/queues/q", {"durable": True}).encode())
    assert (req.subject, req.to, req.reply_to, req.body) == ("PUT", "/queues/q", "$me", {"durable": True})
    props, subject = http.reply(409)
    assert http.parse_reply(Message(body="differs", subject=subject, application_properties=props)) == (409, "differs")
    assert http.parse_reply(Message(body=None, subject="nope"))[0] == 500
    with pytest.raises(errors.NotFoundError, match="reading: 404 queue 'q' not found"):
        http.check(404, "queue 'q' not found", (200,), "reading")
    info = QueueInfo(name="q", type="quorum", arguments={"x-queue-type": "quorum"}, message_count=2, leader="n", replicas=["n"])
    assert http.parse_queue_map(http.queue_map(info)) == info


def test_oasis_requests_and_replies() -> None:
    req = oasis.Request(operation="QUERY", properties={"entityType": "queue", "offset": 3}, body={"attributeNames": ["name"]})
    msg = Message.decode(oasis.request(req).encode())
    assert oasis.parse_request(msg.application_properties, msg.body) == req
    response = oasis.Response(status=404, description="no queue 'q'", properties={"count": 0})
    parsed = oasis.parse_response(Message(application_properties=oasis.reply_properties(response)))
    assert (parsed.status, parsed.description, parsed.properties) == (404, "no queue 'q'", {"count": 0})
    dashed = oasis.parse_response(Message(application_properties={"status-code": 202, "status-description": "ok"}))
    assert (dashed.status, dashed.description) == (202, "ok")
    assert oasis.parse_response(Message(application_properties={})).status == 500
    assert oasis.binding_name("x", "queue", "q", "k", {}) == '["x","queue","q","k",{}]'
    q = oasis.parse_queue({"name": "s", "type": "stream", "depth": 7, "consumers": 1, "arguments": {}})
    assert (q.type, q.message_count, q.consumer_count) == ("stream", 7, 1)


def test_management_errors_by_status() -> None:
    for status, kind in [(400, errors.BadRequestError), (403, errors.ForbiddenError), (404, errors.NotFoundError),
                         (409, errors.ConflictError), (501, errors.ManagementError)]:  # fmt: skip
        err = errors.ManagementError.for_status(status, "why", "doing it")
        assert type(err) is kind and err.status == status and err.description == "why"
        assert str(err) == f"doing it: {status} why"


# -- on the wire, as RabbitMQ 4 wants it -------------------------------------------------------
@pytest.mark.anyio
async def test_the_link_pair_and_requests_are_what_rabbitmq_4_checks() -> None:
    """A stand-in peer that says it is RabbitMQ 4.1 sees a link pair named alike, both
    with ``paired: true``, requests pre-settled to ``$me``; its reply is read."""
    seen: dict[str, Any] = {}

    async def rabbit(conn: Connection) -> None:
        links = [await conn.next_link(timeout=T), await conn.next_link(timeout=T)]
        requests = next(link for link in links if isinstance(link, amqp10.client.Receiver))
        replies = next(link for link in links if isinstance(link, amqp10.client.Sender))
        seen["names"] = {link.name for link in links}
        attaches = [link._link.remote_attach for link in links]  # (the attaches themselves)
        seen["properties"] = [a.properties if a is not None else None for a in attaches]
        seen["addresses"] = (requests.address, replies.address)
        d = await requests.receive(timeout=T)
        attach = requests._link.remote_attach
        seen["settled"] = (d.remote_settled, attach.snd_settle_mode if attach is not None else None)
        req = d.message
        seen["request"] = (req.subject, req.to, req.reply_to, req.body)
        reply = Message(body=http.queue_map(QueueInfo(name="q/1", message_count=5)), correlation_id=req.id)
        reply.application_properties, reply.subject = http.reply(200)
        await replies.send(reply)
        await conn.wait_closed()

    rabbit_4 = {"product": "RabbitMQ", "version": "4.1.0"}
    async with amqp10.client.serve("127.0.0.1", 0, rabbit, properties=rabbit_4) as peer:
        conn = await amqp10.client.connect(f"amqp://127.0.0.1:{peer.port}", timeout=T)
        async with conn:
            m = conn.management()
            assert m.protocol == RABBITMQ
            info = await m.queue_info("q/1")
    assert (info.name, info.message_count) == ("q/1", 5)
    assert len(seen["names"]) == 1 and seen["properties"] == [{"paired": True}, {"paired": True}]
    assert seen["addresses"] == ("/management", "/management")
    assert seen["settled"] == (True, SenderSettleMode.SETTLED)
    assert seen["request"] == ("GET", "/queues/q%2F1", "$me", None)
