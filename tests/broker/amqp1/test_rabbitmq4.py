"""RabbitMQ 4's AMQP 1.0 conventions, end to end with our client against our broker:
the management node (HTTP over AMQP on ``/management``), v2 addresses, ``x-cc``,
direct reply-to, stream offsets and filters as RabbitMQ's clients send them, the
routing annotations its clients read, ``$cbs`` refused without ``[servicebus]``, and a
durable subscription on a wildcard topic."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from amqp10.broker.amqp1.message import Amqp1Message
from amqp10.broker.amqp1.rabbitmq_management import RabbitManagementNode
from amqp10.client import Connection, Receiver, Sender, Session
from amqp10.errors import LinkError
from amqp10.management import http
from amqp10.message import Message
from amqp10.types import Accepted, Described, Released, Source, Target, symbol
from tests.broker.amqp1.e2e import T, bodies, client
from tests.broker.conftest import RunningBroker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Management:
    """RabbitMQ's management link pair, as its clients attach it."""

    def __init__(self, sender: Sender, receiver: Receiver) -> None:
        self.sender = sender
        self.receiver = receiver

    @classmethod
    async def open(cls, conn: Connection, *, session: Session | None = None) -> Management:
        name = f"management-link-pair-{uuid.uuid4().hex[:6]}"
        paired = dict(http.LINK_PROPERTIES)
        s = await conn.open_sender("/management", name=name, source=Source(address="/management"), properties=paired, session=session)
        r = await conn.open_receiver(
            "/management", name=name, target=Target(address="/management"), credit=10, properties=paired, session=session
        )
        return cls(s, r)

    async def send(self, method: str, path: str, body: Any = None) -> str:
        """Send one request; its message-id."""
        mid = str(uuid.uuid4())
        outcome = await self.sender.send(Message(body=body, id=mid, to=path, subject=method, reply_to="$me"))
        assert isinstance(outcome, Accepted)
        return mid

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        mid = await self.send(method, path, body)
        d = await self.receiver.receive(timeout=T)
        await d.accept()
        reply = d.message
        assert reply.correlation_id == mid
        assert (reply.application_properties or {}).get("http:response") == "1.1"
        return int(str(reply.subject)), reply.body


@pytest.mark.anyio
async def test_open_says_rabbitmq_4(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        props = conn.remote_properties or {}
        assert props.get("product") == "RabbitMQ"
        assert str(props.get("version", "")).startswith("4.")


@pytest.mark.anyio
async def test_queues_of_every_type_declared_read_purged_deleted(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        args = {"x-queue-type": "quorum", "x-max-length": 10, "x-quorum-initial-group-size": 3}
        status, q = await m.request("PUT", "/queues/orders%2Fq", {"durable": True, "arguments": args})
        assert status == 201
        assert q["name"] == "orders/q" and q["type"] == "quorum" and q["durable"] is True
        assert q["arguments"] == args and q["leader"] and q["replicas"] == [q["leader"]]
        assert (await m.request("PUT", "/queues/orders%2Fq", {"durable": True, "arguments": args}))[0] == 200
        status, why = await m.request("PUT", "/queues/orders%2Fq", {"arguments": {"x-queue-type": "quorum"}})
        assert (status, why) == (409, "inequivalent arg 'x-max-length' for queue 'orders/q' in vhost '/': "
                                      "received none but current is the value '10' of type 'long'")  # fmt: skip

        s = await conn.open_sender("/queues/orders%2Fq")
        for i in range(3):
            assert isinstance(await s.send(Message(body=i)), Accepted)
        status, q = await m.request("GET", "/queues/orders%2Fq")
        assert status == 200 and q["message_count"] == 3 and q["consumer_count"] == 0
        assert await m.request("DELETE", "/queues/orders%2Fq/messages") == (200, {"message_count": 3})
        await s.close()
        assert await m.request("DELETE", "/queues/orders%2Fq") == (200, {"message_count": 0})
        assert await m.request("GET", "/queues/orders%2Fq") == (404, "queue 'orders/q' in vhost '/' not found")
        assert await m.request("DELETE", "/queues/orders%2Fq") == (200, {"message_count": 0})  # idempotent

        status, st = await m.request("PUT", "/queues/log", {"arguments": {"x-queue-type": "stream", "x-max-age": "1D"}})
        assert status == 201 and st["type"] == "stream"
        status, cq = await m.request("PUT", "/queues/plain", {"durable": False, "auto_delete": False, "exclusive": False})
        assert status == 201 and cq["type"] == "classic" and cq["durable"] is False

        status, why = await m.request("PUT", "/queues/amq.mine", {})
        assert status == 403 and "reserved prefix 'amq.'" in why
        status, why = await m.request("PUT", "/queues/bad", {"colour": "red"})
        assert status == 400 and "bad queue property" in why
        status, why = await m.request("PATCH", "/queues/bad")
        assert status == 400


@pytest.mark.anyio
async def test_exchanges_and_bindings(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        assert await m.request("PUT", "/exchanges/prices", {"type": "topic", "durable": True}) == (204, None)
        assert await m.request("PUT", "/exchanges/prices", {"type": "topic"}) == (204, None)
        status, why = await m.request("PUT", "/exchanges/prices", {"type": "fanout"})
        assert status == 409 and "inequivalent arg 'type'" in why
        assert (await m.request("PUT", "/exchanges/amq.default", {}))[0] == 403
        assert await m.request("PUT", "/exchanges/all", {"type": "fanout"}) == (204, None)
        assert (await m.request("PUT", "/queues/nyse", {}))[0] == 201
        assert (await m.request("PUT", "/queues/every", {}))[0] == 201

        bind = {"source": "prices", "destination_queue": "nyse", "binding_key": "stock.nyse.*", "arguments": {}}
        assert await m.request("POST", "/bindings", bind) == (204, None)
        e2e = {"source": "prices", "destination_exchange": "all", "binding_key": "#", "arguments": {}}
        assert await m.request("POST", "/bindings", e2e) == (204, None)
        to_q = {"source": "all", "destination_queue": "every", "binding_key": "", "arguments": {}}
        assert await m.request("POST", "/bindings", to_q) == (204, None)
        status, found = await m.request("GET", "/bindings?src=prices&dstq=nyse&key=stock.nyse.%2A")
        assert status == 200 and len(found) == 1
        assert found[0]["destination_queue"] == "nyse"
        location = found[0]["location"]
        assert location == "/bindings/src=prices;dstq=nyse;key=stock.nyse.%2A;args="

        s = await conn.open_sender("/exchanges/prices/stock.nyse.ibm")
        assert isinstance(await s.send(Message(body="ibm")), Accepted)
        assert await bodies(conn, "/queues/nyse", 1) == ["ibm"]
        assert await bodies(conn, "/queues/every", 1) == ["ibm"]

        assert await m.request("DELETE", location) == (204, None)
        assert await m.request("DELETE", location) == (204, None)  # gone already: done
        assert await m.request("DELETE", "/bindings/src=prices;dste=all;key=%23;args=") == (204, None)
        assert isinstance(await s.send(Message(body="lost")), Released)  # routed nowhere
        assert await m.request("DELETE", "/exchanges/prices") == (204, None)
        assert await m.request("DELETE", "/exchanges/prices") == (204, None)
        assert (await m.request("POST", "/bindings", {"source": "nowhere", "destination_queue": "nyse"}))[0] == 400


@pytest.mark.anyio
async def test_each_reply_comes_on_the_receiver_paired_with_the_requests_sender(broker: RunningBroker) -> None:
    """RabbitMQ pairs the halves by link name within a session: two pairs on one connection,
    both attached from and to ``/management``, each get the replies to their own requests."""
    async with client(broker) as conn:
        first, second = await Management.open(conn), await Management.open(conn)
        third = await Management.open(conn, session=await conn.session())  # another session
        pairs = [first, second, third]
        sent: list[list[str]] = [[], [], []]
        for i in (0, 0, 1, 0, 2, 1, 1, 2, 0):  # interleaved
            sent[i].append(await pairs[i].send("PUT", f"/queues/q{len(sent[i])}-of-{i}", {"durable": False}))
        for m, ids in zip(pairs, sent, strict=True):
            got = []
            for _ in ids:
                d = await m.receiver.receive(timeout=T)
                await d.accept()
                got.append(d.message.correlation_id)
            assert got == ids
        for m in pairs:  # and the next request on each pair is answered on it
            status, q = await m.request("GET", "/queues/q0-of-1")
            assert status == 200 and q["name"] == "q0-of-1"


@pytest.mark.anyio
async def test_an_unpaired_attach_to_management_is_refused(broker: RunningBroker) -> None:
    """RabbitMQ refuses either half of a management link pair without the link property
    ``paired: true`` (`invalid-field`, with its description)."""
    async with client(broker) as conn:
        for props in (None, {symbol("paired"): False}, {symbol("paired"): "true"}):
            attaches = (
                conn.open_sender("/management", name="unpaired", source=Source(address="/management"), properties=props),
                conn.open_receiver("/management", name="unpaired", target=Target(address="/management"), properties=props),
            )
            for attach in attaches:
                with pytest.raises(LinkError) as err:
                    await attach
                assert err.value.condition == "amqp:invalid-field"
                assert err.value.description == "Link property 'paired' is not set to boolean value 'true'"
        m = await Management.open(conn)  # the connection is still fine
        assert (await m.request("GET", "/queues/none"))[0] == 404
    assert "/management" not in broker.broker.default.nodes


def test_request_sections_in_any_order() -> None:
    """The Python client's proton writes a null body before the properties; RabbitMQ reads it."""
    props = Message(id="req-1", to="/queues/q1", subject="GET", reply_to="$me").encode()
    raw = b"\x00\x53\x77\x40" + props  # amqp-value null, then the properties
    request = RabbitManagementNode.decode_request(Amqp1Message(raw, arrival=0.0))
    assert isinstance(request, Message)
    assert (request.id, request.to, request.subject, request.reply_to, request.body) == ("req-1", "/queues/q1", "GET", "$me", None)


@pytest.mark.anyio
async def test_x_cc_routes_by_extra_keys(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        await m.request("PUT", "/exchanges/d", {"type": "direct"})
        for q, key in (("qa", "a"), ("qb", "b"), ("qc", "c")):
            await m.request("PUT", f"/queues/{q}", {})
            await m.request("POST", "/bindings", {"source": "d", "destination_queue": q, "binding_key": key})
        s = await conn.open_sender("/exchanges/d/a")
        msg = Message(body="cc", message_annotations={symbol("x-cc"): ["b", "a"]})
        assert isinstance(await s.send(msg), Accepted)
        assert await bodies(conn, "/queues/qa", 1) == ["cc"]  # once, though named twice
        assert await bodies(conn, "/queues/qb", 1) == ["cc"]
        status, q = await m.request("GET", "/queues/qc")
        assert q["message_count"] == 0 and (await m.request("GET", "/queues/qa"))[1]["message_count"] == 0


@pytest.mark.anyio
async def test_consumers_of_v2_addresses_get_routing_annotations(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        await m.request("PUT", "/queues/annotated", {})
        s = await conn.open_sender("/queues/annotated")
        await s.send(Message(body=1, subject="k"))
        r = await conn.open_receiver("/queues/annotated", credit=1)
        d = await r.receive(timeout=T)
        ann = d.message.message_annotations or {}
        assert ann.get("x-exchange") == "" and ann.get("x-routing-key") == "k"
        await d.accept()


@pytest.mark.anyio
async def test_direct_reply_to_with_a_volatile_dynamic_source(broker: RunningBroker) -> None:
    async with client(broker) as requester, client(broker) as responder:
        source = Source(dynamic=True, capabilities=[symbol("rabbitmq:volatile-queue")], expiry_policy=symbol("link-detach"))
        r = await requester.open_receiver(None, source=source, credit=10)
        address = r.remote_source.address if r.remote_source is not None else None
        assert address is not None and address.startswith("/queues/amq.rabbitmq.reply-to.")
        s = await responder.open_sender(address)
        assert isinstance(await s.send(Message(body="answer")), Accepted)
        relay = await responder.open_sender(None)
        assert isinstance(await relay.send(Message(body="via to", to=address)), Accepted)
        got = [(await r.receive(timeout=T)).message.body for _ in range(2)]
        assert got == ["answer", "via to"]
        name = address[len("/queues/") :]
        assert broker.broker.replies.consumer(broker.broker.default, name) is not None
        await r.close()
        assert broker.broker.replies.consumer(broker.broker.default, name) is None


@pytest.mark.anyio
async def test_stream_offset_and_filter_as_rabbitmq_clients_send_them(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        await m.request("PUT", "/queues/ticks", {"arguments": {"x-queue-type": "stream"}})
        s = await conn.open_sender("/queues/ticks")
        for i, colour in enumerate(["red", "blue", None, "red"]):
            ann = {symbol("x-stream-filter-value"): colour} if colour else None
            assert isinstance(await s.send(Message(body=i, message_annotations=ann)), Accepted)
        offset = {symbol("rabbitmq:stream-offset-spec"): Described(symbol("rabbitmq:stream-offset-spec"), "first")}
        assert await bodies(conn, "/queues/ticks", 4, source=Source(address="/queues/ticks", filter=offset)) == [0, 1, 2, 3]
        red = {
            **offset,
            symbol("rabbitmq:stream-filter"): Described(symbol("rabbitmq:stream-filter"), ["red"]),
        }
        assert await bodies(conn, "/queues/ticks", 2, source=Source(address="/queues/ticks", filter=red)) == [0, 3]
        unfiltered = {
            **red,
            symbol("rabbitmq:stream-match-unfiltered"): Described(symbol("rabbitmq:stream-match-unfiltered"), True),
        }
        got = await bodies(conn, "/queues/ticks", 3, source=Source(address="/queues/ticks", filter=unfiltered))
        assert got == [0, 2, 3]


@pytest.mark.anyio
async def test_cbs_is_refused_without_servicebus(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        for attach in (conn.open_receiver("$cbs"), conn.open_sender("$cbs")):
            with pytest.raises(LinkError) as err:
                await attach
            assert err.value.condition == "amqp:not-found"
            assert err.value.description == "claims-based security ($cbs) is not enabled on this broker ([servicebus])"
        assert "$cbs" not in broker.broker.default.nodes


@pytest.mark.anyio
async def test_durable_subscription_on_a_wildcard_topic_is_kept(broker: RunningBroker) -> None:
    """rhea's durable subscriber example: topic://PRICE.STOCK.NYSE.*, kept across a detach."""
    async with client(broker) as conn:
        source = Source(address="topic://PRICE.STOCK.NYSE.*", durable=2, expiry_policy=symbol("never"))
        r = await conn.open_receiver(None, name="sub1", source=source, credit=10)
        s = await conn.open_sender("topic://PRICE.STOCK.NYSE.IBM")
        await s.send(Message(body=1))
        d = await r.receive(timeout=T)
        assert d.message.body == 1
        await d.accept()
        await r.detach()
        await s.send(Message(body=2))  # while detached: kept for the subscription
        r = await conn.open_receiver(None, name="sub1", source=source, credit=10)
        d = await r.receive(timeout=T)
        assert d.message.body == 2
        await d.accept()
        await r.close()  # closing ends it
        await s.send(Message(body=3))
        r = await conn.open_receiver(None, name="sub1", source=source, credit=10)
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.5):
                await r.receive()


@pytest.mark.anyio
async def test_modified_outcome_annotations_stay_with_the_message(broker: RunningBroker) -> None:
    """RabbitMQ 4 merges a modified outcome's annotations into the message it requeues
    or dead-letters."""
    async with client(broker) as conn:
        m = await Management.open(conn)
        await m.request("PUT", "/exchanges/dlx", {"type": "fanout"})
        await m.request("PUT", "/queues/dead", {})
        await m.request("POST", "/bindings", {"source": "dlx", "destination_queue": "dead", "binding_key": ""})
        # one return allowed (RabbitMQ counts returns): the second failed delivery dead-letters
        args = {"x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"}
        await m.request("PUT", "/queues/work", {"arguments": args})
        s = await conn.open_sender("/queues/work")
        await s.send(Message(body="job"))
        r = await conn.open_receiver("/queues/work", credit=1)
        d = await r.receive(timeout=T)
        await d.modify(delivery_failed=False, message_annotations={symbol("x-opt-tries"): 1})
        d = await r.receive(timeout=T)
        assert (d.message.message_annotations or {}).get("x-opt-tries") == 1
        await d.modify(delivery_failed=True, message_annotations={symbol("x-opt-tries"): 2})
        d = await r.receive(timeout=T)
        await d.modify(delivery_failed=True, message_annotations={symbol("x-opt-last"): "gave up"})
        await r.close()
        r = await conn.open_receiver("/queues/dead", credit=1)
        d = await r.receive(timeout=T)
        ann = d.message.message_annotations or {}
        assert ann.get("x-opt-tries") == 2 and ann.get("x-opt-last") == "gave up" and "x-opt-deaths" in ann


@pytest.mark.anyio
async def test_stream_deliveries_say_their_offset(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        await m.request("PUT", "/queues/log2", {"arguments": {"x-queue-type": "stream"}})
        s = await conn.open_sender("/queues/log2")
        for i in range(2):
            await s.send(Message(body=i))
        offset = {symbol("rabbitmq:stream-offset-spec"): Described(symbol("rabbitmq:stream-offset-spec"), 1)}
        r = await conn.open_receiver("/queues/log2", source=Source(address="/queues/log2", filter=offset), credit=1)
        d = await r.receive(timeout=T)
        assert d.message.body == 1 and (d.message.message_annotations or {}).get("x-stream-offset") == 1


@pytest.mark.anyio
async def test_an_exclusive_queue_goes_with_its_connection(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        status, q = await m.request("PUT", "/queues/mine", {"exclusive": True, "durable": False})
        assert status == 201 and q["exclusive"] is True
        assert "mine" in broker.broker.default.nodes
        assert (await m.request("PUT", "/queues/mine", {"exclusive": True, "durable": False}))[0] == 200
        status, why = await m.request("PUT", "/queues/mine", {"exclusive": True, "arguments": {"x-max-length": 1}})
        assert (status, why) == (409, "inequivalent arg 'x-max-length' for queue 'mine' in vhost '/': "
                                      "received the value '1' of type 'long' but current is none")  # fmt: skip
        assert (await m.request("PUT", "/queues/shared", {}))[0] == 201  # (not exclusive: locked to an exclusive PUT)
        status, why = await m.request("PUT", "/queues/shared", {"exclusive": True})
        assert status == 409 and why.startswith("cannot obtain exclusive access to locked queue 'shared' in vhost '/'.")
        await m.request("DELETE", "/queues/shared")
    with anyio.fail_after(T):
        while "mine" in broker.broker.default.nodes:
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_modified_undeliverable_here_dead_letters_for_rabbitmq_clients(broker: RunningBroker) -> None:
    """RabbitMQ 4 takes modified with undeliverable-here from a /queues/ consumer as a
    discard: the message is dead-lettered with the outcome's annotations."""
    async with client(broker) as conn:
        m = await Management.open(conn)
        await m.request("PUT", "/exchanges/dlx2", {"type": "fanout"})
        await m.request("PUT", "/queues/dead2", {})
        await m.request("POST", "/bindings", {"source": "dlx2", "destination_queue": "dead2", "binding_key": ""})
        await m.request("PUT", "/queues/work2", {"arguments": {"x-dead-letter-exchange": "dlx2"}})
        s = await conn.open_sender("/queues/work2")
        await s.send(Message(body="job"))
        r = await conn.open_receiver("/queues/work2", credit=1)
        d = await r.receive(timeout=T)
        await d.modify(delivery_failed=True, undeliverable_here=True, message_annotations={symbol("x-opt-why"): "bad"})
        r2 = await conn.open_receiver("/queues/dead2", credit=1)
        d = await r2.receive(timeout=T)
        assert (d.message.message_annotations or {}).get("x-opt-why") == "bad"
        assert (await m.request("GET", "/queues/work2"))[1]["message_count"] == 0


@pytest.mark.anyio
async def test_local_random_exchange_routes_each_message_to_one_queue(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        assert await m.request("PUT", "/exchanges/lr", {"type": "x-local-random"}) == (204, None)
        for q in ("lr1", "lr2"):
            await m.request("PUT", f"/queues/{q}", {})
            await m.request("POST", "/bindings", {"source": "lr", "destination_queue": q, "binding_key": ""})
        s = await conn.open_sender("/exchanges/lr")
        for i in range(20):
            assert isinstance(await s.send(Message(body=i)), Accepted)
        counts = [(await m.request("GET", f"/queues/{q}"))[1]["message_count"] for q in ("lr1", "lr2")]
        assert sum(counts) == 20


class _PairHalf:
    """A proton link option: a half of a management link pair, as RabbitMQ's Python
    client attaches it (its client terminus addressed ``/management``, ``paired: true``)."""

    def __init__(self, sending: bool) -> None:
        self.sending = sending

    def apply(self, link: Any) -> None:
        from proton import PropertyDict

        terminus = link.source if self.sending else link.target
        terminus.address = http.ADDRESS
        link.properties = PropertyDict({symbol("paired"): True})

    def test(self, link: Any) -> bool:
        return True


@pytest.mark.proton
def test_a_second_pair_of_the_same_link_name_is_refused(broker: RunningBroker) -> None:
    """RabbitMQ's Python client names both halves of its management pair after the
    container and ``/management``, so a second management object on one connection
    attaches the same names: RabbitMQ refuses that attach (`precondition-failed`), which
    its async suite's token-refresh tests rely on. The connection goes on: a pair of
    another name is answered."""
    from proton import Message as ProtonMessage
    from proton.utils import BlockingConnection, LinkDetached

    conn = BlockingConnection(f"amqp://{broker.url}", timeout=T)
    try:
        name = "client-/management"
        conn.create_sender(http.ADDRESS, name=name, options=_PairHalf(True))
        conn.create_receiver(http.ADDRESS, name=name, credit=5, options=_PairHalf(False))
        with pytest.raises(LinkDetached) as refused:
            conn.create_sender(http.ADDRESS, name=name, options=_PairHalf(True))
        assert refused.value.condition == "amqp:precondition-failed"
        assert "management link pair 'client-/management'" in str(refused.value)
        sender = conn.create_sender(http.ADDRESS, name="another", options=_PairHalf(True))
        receiver = conn.create_receiver(http.ADDRESS, name="another", credit=5, options=_PairHalf(False))
        sender.send(ProtonMessage(id="q", address="/queues/none", subject="GET", reply_to="$me"))
        reply = receiver.receive(timeout=T)
        assert (reply.correlation_id, reply.subject) == ("q", "404")
    finally:
        conn.close()


@pytest.mark.parametrize("address", ["/queues/q-first", "/queues/s-first"])
def test_a_consumer_gets_its_first_deliveries_after_its_attach_is_written(address: str) -> None:
    """The attach answer goes out in a write of its own, the link's first transfers in a
    later one (RabbitMQ's Python client, which sends its credit with its attach, runs its
    message handler before ``consumer()`` returns if it reads both at once)."""
    from tests.broker.harness import Net

    net = Net()
    c = net.client()
    name = address.removeprefix("/queues/")
    c.handler.ctx.vhost.declare_queue(name, kind="stream" if name.startswith("s-") else "queue")
    s = c.sender(address)
    for i in range(3):
        c.send(s, Message(body=i), settled=True)
    written: list[Any] = []  # what the driver would call once the queued output is written
    c.handler.ctx.after_write = written.append
    spec = symbol("rabbitmq:stream-offset-spec")
    r = c.session.receiver("rcv", source=Source(address=address, filter={spec: Described(spec, "first")}), target=Target())
    r.attach()
    r.flow(10)  # with the attach, as that client sends it
    net.pump()
    assert r.remote_attach is not None and not c.received(r)  # the attach answer alone
    assert len(written) == 1
    written.pop()()  # written: the consumer starts
    net.pump()
    assert len(c.received(r)) == 3
