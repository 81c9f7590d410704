"""Topics as 1.0 clients name them, and attach answers that describe both termini,
engine against broker in memory: node kinds from prefixes and capabilities,
wildcard subscriptions, JMS-style durable and shared subscriptions (with a restart)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amqp10.broker.amqp1.frontend import Amqp1FrontEnd
from amqp10.broker.config import AddressRule, BrokerConfig
from amqp10.broker.core import Broker, Queue, Topic
from amqp10.broker.core import store as st
from amqp10.message import Message
from amqp10.transport import LinkDetached, LinkState, Receiver
from amqp10.types import ErrorCondition, Released, Source, Target, symbol
from tests.broker.harness import Client, Net, SyncJournal

NEVER = symbol("never")


def body(d: Any) -> Any:
    return Message.decode(d.payload).body


def bodies(c: Client, r: Receiver) -> list[Any]:
    return [body(d) for d in c.received(r)]


def publish(c: Client, address: str, *values: Any) -> None:
    s = c.sender(address)
    for v in values:
        c.send(s, Message(body=v))


def subscriber(c: Client, address: str, name: str, *, caps: list[str] | None = None, durable: bool = False, credit: int = 20) -> Receiver:
    source = Source(
        address=address,
        capabilities=[symbol(x) for x in caps or []] or None,
        durable=2 if durable else 0,
        expiry_policy=NEVER if durable else None,
    )
    return c.receiver(None, name=name, source=source, credit=credit)


def unsubscribe(net: Net, c: Client, name: str) -> Any:
    """JMS's unsubscribe: attach by the subscription's link name with a null source, then
    close; the address of the subscription's source the broker answered with."""
    look = c.session.receiver(name, source=None, target=Target())
    look.attach()
    net.pump()
    assert isinstance(look.remote_source, Source)
    look.detach(closed=True)
    net.pump()
    return look.remote_source.address


# -- attach answers ---------------------------------------------------------------------------
def test_consumer_attach_answer_describes_both_termini() -> None:
    net = Net()
    c = net.client()
    target = Target(address="my-reply", capabilities=[symbol("x-mine")])
    r = c.session.receiver("r1", source=Source(address="q-answer"), target=target)
    r.attach()
    net.pump()
    src = r.remote_source
    assert isinstance(src, Source)
    assert src.address == "q-answer" and src.durable == 0 and src.expiry_policy == "session-end"
    assert src.distribution_mode == "move" and isinstance(src.default_outcome, Released)
    assert set(src.outcomes) == {"amqp:accepted:list", "amqp:rejected:list", "amqp:released:list", "amqp:modified:list"}
    assert list(src.capabilities) == ["queue"]
    assert src.filter is None  # nothing asked, nothing applied
    assert r.remote_target == target  # the client's terminus, as sent


def test_unsupported_filters_are_left_out_of_the_answer() -> None:
    net = Net()
    c = net.client()
    r = c.receiver(None, source=Source(address="q-f", filter={symbol("x-unknown"): "a = 1"}))
    assert r.state is LinkState.ATTACHED
    assert r.remote_source.filter is None


def test_publisher_attach_answer_describes_both_termini() -> None:
    net = Net()
    c = net.client()
    s = c.session.sender("s1", source=Source(address="me"), target=Target(address="topic://t-answer"))
    s.attach()
    net.pump()
    assert s.remote_source == Source(address="me")
    t = s.remote_target
    assert isinstance(t, Target) and t.address == "topic://t-answer" and list(t.capabilities) == ["topic"]
    assert t.expiry_policy == "session-end" and t.durable == 0
    assert isinstance(net.broker.default.nodes["t-answer"], Topic)


# -- node kinds --------------------------------------------------------------------------------
def test_prefixes_and_capabilities_choose_the_kind_on_auto_create() -> None:
    net = Net()
    c = net.client()
    c.sender("topic://k1")
    c.sender("queue://k2")
    c.sender(None, target=Target(address="k3", capabilities=[symbol("topic")]))
    c.receiver(None, source=Source(address="k4", capabilities=[symbol("queue")]))
    c.receiver(None, source=Source(address="k5", capabilities=symbol("topic")))  # one symbol, not an array
    nodes = net.broker.default.nodes
    assert isinstance(nodes["k1"], Topic) and isinstance(nodes["k3"], Topic) and isinstance(nodes["k5"], Topic)
    assert type(nodes["k2"]) is Queue and type(nodes["k4"]) is Queue


def test_configured_nodes_keep_their_kind() -> None:
    net = Net(BrokerConfig(addresses=[AddressRule(pattern="news", kind="topic")]))
    net.broker.default.create_node("news")
    c = net.client()
    r = c.receiver(None, source=Source(address="queue://news"))
    assert isinstance(net.broker.default.nodes["news"], Topic)
    assert list(r.remote_source.capabilities) == ["topic"]


# -- wildcards -----------------------------------------------------------------------------------
def test_wildcard_subscriptions_get_every_matching_topic() -> None:
    net = Net()
    c = net.client()
    publish(c, "topic://orders.new")  # exists before the subscription
    star = subscriber(c, "topic://orders.*", "star")
    hash_ = subscriber(c, "orders.#", "hash", caps=["topic"])
    assert star.state is LinkState.ATTACHED and list(star.remote_source.capabilities) == ["topic"]
    publish(c, "topic://orders.new", "new-1")
    publish(c, "topic://orders.eu.paid", "eu-paid")  # created after: bound as it appears
    publish(c, "topic://orders", "bare")
    publish(c, "topic://invoices.new", "other")
    assert bodies(c, star) == ["new-1"]
    assert bodies(c, hash_) == ["new-1", "eu-paid", "bare"]
    star.detach(closed=True)
    net.pump()
    publish(c, "topic://orders.new", "new-2")
    assert bodies(c, hash_) == ["new-2"]
    topic = net.broker.default.nodes["orders.new"]
    assert isinstance(topic, Topic) and len(topic.subscriptions) == 1  # the star one is gone


def test_durable_wildcard_subscriptions_are_kept_until_closed() -> None:
    """Kept as Artemis keeps them (rhea's durable subscriber on topic://PRICE.STOCK.NYSE.*):
    what matches arrives while the link is detached, and is there at the next attach."""
    net = Net()
    c = net.client()
    r = subscriber(c, "topic://a.*", "dur", durable=True, credit=0)
    assert not [e for e in c.events if isinstance(e, LinkDetached)]
    r.detach()
    net.pump()
    publish(c, "topic://a.x", 1, 2)
    r = subscriber(c, "topic://a.*", "dur", durable=True)
    assert bodies(c, r) == [1, 2]
    r.detach(closed=True)
    net.pump()
    publish(c, "topic://a.y", 3)
    r = subscriber(c, "topic://a.*", "dur", durable=True)
    assert bodies(c, r) == []


def test_durable_wildcard_subscription_survives_a_restart_and_is_removed_by_close(tmp_path: Path) -> None:
    """Stored as a topic's durable subscription is: after a restart on the same store it
    has what matched while detached, from every matching topic, and collects again; a
    detach that closes it (here JMS's unsubscribe, a look-up by link name) removes it,
    from the store too."""
    store = st.Store(tmp_path / "db.sqlite3")
    net = Net(journal=SyncJournal(store))
    c = net.client("rhea")
    r = subscriber(c, "topic://PRICE.STOCK.NYSE.*", "dur", durable=True, credit=0)
    r.detach()
    net.pump()
    pub = net.client("publisher")
    for address, value in (("topic://PRICE.STOCK.NYSE.IBM", 1), ("topic://PRICE.STOCK.NYSE.HPQ", 2)):
        pub.send(pub.sender(address), Message(body=value, durable=True))
    pub.send(pub.sender("topic://PRICE.STOCK.NASDAQ.AAPL"), Message(body=0, durable=True))  # no match

    net2 = Net(journal=SyncJournal(store))
    assert net2.broker.recover(store) == 2
    Amqp1FrontEnd().prepare(net2.broker, BrokerConfig())  # as the service does: bound at start
    pub2 = net2.client("publisher")
    pub2.send(pub2.sender("topic://PRICE.STOCK.NYSE.IBM"), Message(body=3, durable=True))
    c2 = net2.client("rhea")
    r2 = subscriber(c2, "topic://PRICE.STOCK.NYSE.*", "dur", durable=True)
    assert sorted(bodies(c2, r2)) == [1, 2, 3]
    assert [q.name for q in net2.broker.default.queues()] == ["PRICE.STOCK.NYSE.*::rhea#dur"]  # once, not per topic
    r2.detach()
    net2.pump()
    assert unsubscribe(net2, c2, "dur") == "PRICE.STOCK.NYSE.*"
    assert not net2.broker.default.pattern_subscriptions
    topic = net2.broker.default.nodes["PRICE.STOCK.NYSE.IBM"]
    assert isinstance(topic, Topic) and not topic.subscriptions

    net3 = Net()
    net3.broker.recover(store)
    assert not net3.broker.default.pattern_subscriptions
    c3 = net3.client("rhea")
    r3 = subscriber(c3, "topic://PRICE.STOCK.NYSE.*", "dur", durable=True)
    assert bodies(c3, r3) == []  # a new subscription, empty
    store.close()


def test_a_durable_wildcard_subscription_outlives_a_matching_topic_deleted() -> None:
    net = Net()
    c = net.client()
    publish(c, "topic://a.x", 0)
    publish(c, "topic://a.y", 0)
    r = subscriber(c, "topic://a.*", "dur", durable=True, credit=0)
    net.broker.default.delete_node("a.x")
    publish(c, "topic://a.y", 1)
    publish(c, "topic://a.x", 2)  # made again: bound again
    r.flow(10)
    net.pump()
    assert bodies(c, r) == [1, 2]


def test_deleting_a_vhost_deletes_its_durable_wildcard_subscriptions(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    net = Net(journal=SyncJournal(store))
    net.broker.add_vhost("v")
    c = net.client("rhea", hostname="vhost:v")
    subscriber(c, "topic://a.*", "dur", durable=True, credit=0).detach()
    net.pump()
    publish(c, "topic://a.x", 1)
    net.broker.delete_vhost("v")
    net2 = Net()
    assert net2.broker.recover(store) == 0
    assert "v" not in net2.broker.vhosts
    store.close()


# -- JMS durable and shared subscriptions --------------------------------------------------------
def test_shared_subscription_load_balances_and_ends_with_its_last_consumer() -> None:
    net = Net()
    c1 = net.client("app-1")
    c2 = net.client("app-2")
    a = subscriber(c1, "topic://prices", "sub", caps=["topic", "shared", "global"], credit=0)
    b = subscriber(c2, "topic://prices", "sub|2", caps=["topic", "shared", "global"], credit=0)
    assert set(a.remote_source.capabilities) == {"topic", "shared", "global"}
    topic = net.broker.default.nodes["prices"]
    assert isinstance(topic, Topic) and len(topic.subscriptions) == 1  # one subscription, two consumers
    publish(c1, "topic://prices", *range(6))
    a.flow(3)
    b.flow(3)
    net.pump()
    got_a, got_b = bodies(c1, a), bodies(c2, b)
    assert len(got_a) == 3 and len(got_b) == 3 and sorted(got_a + got_b) == list(range(6))
    a.detach()
    net.pump()
    assert len(topic.subscriptions) == 1  # b still consumes
    b.detach()
    net.pump()
    assert not topic.subscriptions  # a volatile shared subscription ends with its last consumer


def test_durable_subscription_survives_detach_restart_and_is_removed_by_close(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    net = Net()
    net.broker = Broker(BrokerConfig(), journal=SyncJournal(store))
    c = net.client("jms-client")
    r = subscriber(c, "topic://events", "my-sub", caps=["topic"], durable=True, credit=0)
    r.detach()  # closed=false: the subscription stays and collects
    net.pump()
    pub = net.client("publisher")
    for i in range(3):
        pub.send(pub.sender("topic://events"), Message(body=i, durable=True))

    # restart: a fresh broker recovers from the store
    net2 = Net()
    net2.broker = Broker(BrokerConfig(), journal=SyncJournal(store))
    assert net2.broker.recover(store) == 3
    c2 = net2.client("jms-client")
    r2 = subscriber(c2, "topic://events", "my-sub", caps=["topic"], durable=True, credit=10)
    assert bodies(c2, r2) == [0, 1, 2]
    r2.detach()
    net2.pump()
    assert unsubscribe(net2, c2, "my-sub") == "events"
    topic = net2.broker.default.nodes["events"]
    assert isinstance(topic, Topic) and not topic.subscriptions
    net3 = Net()
    net3.broker = Broker(BrokerConfig())
    net3.broker.recover(store)
    assert not net3.broker.default.nodes["events"].subscriptions  # type: ignore[attr-defined]
    store.close()


def test_unsubscribe_of_an_unknown_subscription_is_refused() -> None:
    net = Net()
    c = net.client()
    look = c.session.receiver("nobody", source=None, target=Target())
    look.attach()
    net.pump()
    assert look.remote_source is None
    errors = [e.error for e in c.events if isinstance(e, LinkDetached)]
    assert errors and errors[-1].condition == ErrorCondition.NOT_FOUND
