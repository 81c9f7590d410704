"""The broker core driven over in-memory engines (no sockets)."""

from __future__ import annotations

from amqp10.broker.config import AddressRule, BrokerConfig, QueuePolicy
from amqp10.message import Message
from amqp10.transport import DeliveryUpdated
from amqp10.types import Accepted, Rejected, Released, SenderSettleMode, Source
from tests.broker.harness import Net


def body(d) -> object:
    return Message.decode(d.payload).body


def test_send_then_receive_in_order() -> None:
    net = Net()
    c = net.client()
    s = c.sender("q1")
    sent = [c.send(s, Message(body=i)) for i in range(5)]
    assert all(isinstance(d.remote_state, Accepted) for d in sent)
    r = c.receiver("q1", credit=10)
    got = c.received(r)
    assert [body(d) for d in got] == [0, 1, 2, 3, 4]
    for d in got:
        d.accept()
    net.pump()
    assert net.broker.nodes["q1"].count == 0
    assert net.broker.nodes["q1"].stats.acked == 5


def test_competing_consumers_round_robin() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("work", credit=10)
    rb = b.receiver("work", credit=10)
    s = p.sender("work")
    for i in range(6):
        p.send(s, Message(body=i))
    ga, gb = [body(d) for d in a.received(ra)], [body(d) for d in b.received(rb)]
    assert sorted(ga + gb) == list(range(6))
    assert len(ga) == 3 and len(gb) == 3


def test_priority_and_release_to_head() -> None:
    net = Net()
    c = net.client()
    s = c.sender("pq")
    for i, prio in enumerate([1, 9, 4]):
        c.send(s, Message(body=i, priority=prio))
    r = c.receiver("pq", credit=1)
    (d,) = c.received(r)
    assert body(d) == 1  # priority 9 first
    d.release()
    net.pump()
    r.add_credit(1)
    net.pump()
    (d2,) = c.received(r)
    assert body(d2) == 1  # released: back at the head


def test_modified_delivery_failed_counts_and_dead_letters() -> None:
    cfg = BrokerConfig(
        addresses=[AddressRule(pattern="poison", policy=QueuePolicy(delivery_limit=2, dead_letter_address="dlq"))]
    )
    net = Net(cfg)
    c = net.client()
    s = c.sender("poison")
    c.send(s, Message(body="bad"))
    r = c.receiver("poison", credit=1)
    (d,) = c.received(r)
    d.modify(delivery_failed=True)
    net.pump()
    r.add_credit(1)
    net.pump()
    (d2,) = c.received(r)
    assert Message.decode(d2.payload).delivery_count == 1
    d2.modify(delivery_failed=True)
    net.pump()
    assert net.broker.nodes["poison"].count == 0
    assert net.broker.nodes["dlq"].count == 1


def test_reject_goes_to_dead_letter_address_or_is_counted() -> None:
    cfg = BrokerConfig(addresses=[AddressRule(pattern="withdlq", policy=QueuePolicy(dead_letter_address="dead"))])
    net = Net(cfg)
    c = net.client()
    for addr in ("withdlq", "nodlq"):
        s = c.sender(addr)
        c.send(s, Message(body=addr))
        r = c.receiver(addr, credit=1)
        (d,) = c.received(r)
        d.reject()
        net.pump()
    assert net.broker.nodes["dead"].count == 1
    assert net.broker.nodes["nodlq"].stats.dropped == 1


def test_ttl_expired_never_delivered() -> None:
    clock = [1000.0]
    net = Net(BrokerConfig(default_policy=QueuePolicy(dead_letter_address="expired")), now=lambda: clock[0])
    c = net.client()
    s = c.sender("ttlq")
    c.send(s, Message(body="old", ttl=1.0))
    c.send(s, Message(body="fresh"))
    clock[0] += 5
    r = c.receiver("ttlq", credit=5)
    assert [body(d) for d in c.received(r)] == ["fresh"]
    assert net.broker.nodes["expired"].count == 1


def test_browse_does_not_consume() -> None:
    net = Net()
    c = net.client()
    s = c.sender("bq")
    for i in range(3):
        c.send(s, Message(body=i))
    r = c.receiver("bq", credit=10, source=Source(address="bq", distribution_mode="copy"))
    assert [body(d) for d in c.received(r)] == [0, 1, 2]
    assert net.broker.nodes["bq"].count == 3


def test_dynamic_reply_queue_deleted_on_close() -> None:
    net = Net()
    c = net.client()
    r = c.receiver(None, credit=5, source=Source(dynamic=True))
    address = r.remote_source.address
    assert address and address in net.broker.nodes
    s = c.sender(address)
    c.send(s, Message(body="reply"))
    assert [body(d) for d in c.received(r)] == ["reply"]
    r.close()
    net.pump()
    assert address not in net.broker.nodes


def test_topic_copies_and_durable_subscription() -> None:
    net = Net(BrokerConfig(topics=["news"]))
    sub1, sub2, pub = net.client("s1"), net.client("s2"), net.client("p")
    r1 = sub1.receiver("news", name="sub", credit=10, source=Source(address="news", durable=2, expiry_policy="never"))
    r2 = sub2.receiver("news", credit=10)
    s = pub.sender("news")
    pub.send(s, Message(body="a"))
    got1 = sub1.received(r1)
    assert [body(d) for d in got1] == ["a"]
    assert [body(d) for d in sub2.received(r2)] == ["a"]
    for d in got1:
        d.accept()
    r1.detach()  # durable subscription survives a detach
    net.pump()
    pub.send(s, Message(body="b"))
    r1b = sub1.receiver("news", name="sub", credit=10, source=Source(address="news", durable=2, expiry_policy="never"))
    assert [body(d) for d in sub1.received(r1b)] == ["b"]


def test_presettled_send_and_settled_consumer() -> None:
    net = Net()
    c = net.client()
    s = c.sender("ps", snd_settle_mode=SenderSettleMode.SETTLED)
    c.send(s, Message(body=1))
    r = c.receiver("ps", credit=1, snd_settle_mode=SenderSettleMode.SETTLED)
    (d,) = c.received(r)
    assert d.remote_settled
    assert net.broker.nodes["ps"].stats.acked == 1


def test_max_length_blocks_publisher_credit() -> None:
    net = Net(BrokerConfig(addresses=[AddressRule(pattern="small", policy=QueuePolicy(max_length=3))]))
    c = net.client()
    s = c.sender("small")
    assert s.credit == 3  # credit never exceeds the room left in the queue
    for i in range(5):
        s.send(Message(body=i).encode())
    net.pump()
    assert net.broker.nodes["small"].count == 3
    assert s.credit == 0 and s.queued == 2  # the rest waits at the sender
    r = c.receiver("small", credit=10)
    # taking messages out frees room, credit comes back and the rest flows through
    got = c.received(r)
    assert [body(d) for d in got] == [0, 1, 2, 3, 4]
    assert s.queued == 0


def test_rejected_when_no_auto_create() -> None:
    net = Net(BrokerConfig(auto_create=False))
    c = net.client()
    s = c.sender("nowhere")
    assert s.remote_target is None or s.state.name != "ATTACHED"
    assert any(type(e).__name__ == "LinkDetached" for e in c.events)


def test_outcome_events_reach_sender() -> None:
    net = Net()
    c = net.client()
    s = c.sender("o")
    d = c.send(s, Message(body=1))
    assert isinstance(d.remote_state, Accepted) and d.remote_settled
    assert any(isinstance(e, DeliveryUpdated) for e in c.events)
    assert not isinstance(d.remote_state, (Rejected, Released))


def stream_net(**policy: object) -> Net:
    return Net(BrokerConfig(addresses=[AddressRule(pattern="events*", kind="stream", policy=QueuePolicy(**policy))]))


def offsets(deliveries: list) -> list[int]:
    return [Message.decode(d.payload).message_annotations["x-opt-offset"] for d in deliveries]


def test_stream_offsets_and_independent_consumers() -> None:
    from amqp10.types import symbol, timestamp

    net = stream_net()
    c = net.client()
    s = c.sender("events")
    for i in range(5):
        c.send(s, Message(body=i))
    f = symbol("amqp10:stream-offset")
    first = c.receiver("events", credit=10, source=Source(address="events", filter={f: "first"}))
    got = c.received(first)
    assert offsets(got) == [0, 1, 2, 3, 4]
    assert [body(d) for d in got] == [0, 1, 2, 3, 4]
    for d in got:
        d.accept()  # consumption does not remove anything from a stream
    net.pump()
    at3 = c.receiver("events", credit=10, source=Source(address="events", filter={f: 3}))
    assert offsets(c.received(at3)) == [3, 4]
    nxt = c.receiver("events", credit=10, source=Source(address="events", filter={f: "next"}))
    assert c.received(nxt) == []
    c.send(s, Message(body=5))
    assert offsets(c.received(nxt)) == [5]
    assert offsets(c.received(first)) == [5]
    assert offsets(c.received(at3)) == [5]
    assert nxt.remote_source.filter == {f: "next"}
    ts = c.receiver("events", credit=10, source=Source(address="events", filter={f: timestamp(0)}))
    assert offsets(c.received(ts)) == [0, 1, 2, 3, 4, 5]
    node = net.broker.nodes["events"]
    assert node.info() == {"first": 0, "next": 6, "count": 6, "bytes": node.bytes}


def test_stream_retention_by_bytes() -> None:
    from amqp10.types import symbol

    net = stream_net(retention_bytes=400)
    c = net.client()
    s = c.sender("events-r")
    for _ in range(20):
        c.send(s, Message(body=b"x" * 50))
    node = net.broker.nodes["events-r"]
    assert node.bytes <= 400 and node.first > 0 and node.next == 20
    r = c.receiver("events-r", credit=50, source=Source(address="events-r", filter={symbol("amqp10:stream-offset"): "first"}))
    assert offsets(c.received(r))[0] == node.first


def test_stream_auto_created_by_capability_and_info_over_management() -> None:
    from amqp10.types import symbol

    net = Net()
    c = net.client()
    s = c.sender("logs", target=__import__("amqp10.types", fromlist=["Target"]).Target(address="logs", capabilities=[symbol("stream")]))
    for i in range(3):
        c.send(s, Message(body=i))
    assert net.broker.nodes["logs"].kind == "stream"
    reply = c.receiver(None, credit=5, source=Source(dynamic=True))
    m = c.sender("$management")
    req = Message(body=None, reply_to=reply.remote_source.address, id="q1")
    req.application_properties = {"operation": "stream-info", "address": "logs"}
    c.send(m, req)
    (d,) = c.received(reply)
    answer = Message.decode(d.payload)
    assert answer.body == {"first": 0, "next": 3, "count": 3, "bytes": net.broker.nodes["logs"].bytes}
    assert answer.correlation_id == "q1"


def test_duplicate_message_ids_stored_once() -> None:
    net = Net(BrokerConfig(default_policy=QueuePolicy(duplicate_window=100)))
    c = net.client()
    s = c.sender("dedup")
    d1 = c.send(s, Message(body="a", id="m-1"))
    d2 = c.send(s, Message(body="a again", id="m-1"))
    c.send(s, Message(body="b", id="m-2"))
    assert isinstance(d1.remote_state, Accepted) and isinstance(d2.remote_state, Accepted)
    assert net.broker.nodes["dedup"].count == 2


def test_released_messages_return_in_arrival_order() -> None:
    net = Net()
    c = net.client()
    s = c.sender("order-q")
    for i in range(6):
        c.send(s, Message(body=i))
    r = c.receiver("order-q", credit=4)
    got = c.received(r)
    assert [body(d) for d in got] == [0, 1, 2, 3]
    for d in got:
        d.release()
    net.pump()
    r.add_credit(6)
    net.pump()
    assert [body(d) for d in c.received(r)] == [0, 1, 2, 3, 4, 5]


def test_a_message_over_a_receivers_max_message_size_stays_for_others() -> None:
    """A receiver attached with a max-message-size is not given a message over it (the
    engine would refuse to send it): the message stays in the queue for other receivers,
    and the receiver gets the rest; the connection carries on."""
    net = Net()
    c = net.client()
    snd = c.sender("sized")
    big = Message(body=b"x" * 5000, body_type="data")
    c.send(snd, big)
    c.send(snd, Message(body="small"))
    small = c.receiver("sized", credit=5, max_message_size=1000)
    got = c.received(small)
    assert [body(d) for d in got] == ["small"]
    got[0].settle(Accepted())
    net.pump()
    q = net.broker.nodes["sized"]
    assert q.count == 1  # the big one, not lost
    small.flow(5)
    net.pump()
    assert c.received(small) == []  # and not offered to that receiver again
    other = c.receiver("sized", credit=1)
    assert [len(d.payload) > 5000 for d in c.received(other)] == [True]
