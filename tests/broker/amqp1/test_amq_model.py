"""The AMQ model over 1.0: virtual hosts, exchanges, bindings, RabbitMQ 4's addresses.

In memory (``harness.Net``: our engine on both sides); the store tests use a
real SQLite file; ``store-v0.sqlite3`` was written by the broker before
virtual hosts (see ``fixtures/make_store_v0.py``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BindingConfig, BrokerConfig, ExchangeConfig, VhostConfig
from amqp10.broker.core import (
    AccessRefused,
    Broker,
    NotFound,
    PreconditionFailed,
    Queue,
    Stream,
    Topic,
    TopicTrie,
    VirtualHost,
)
from amqp10.broker.core import store as store_
from amqp10.message import Message
from amqp10.transport import LinkDetached
from amqp10.types import Accepted, ErrorCondition, Rejected, Released
from tests.broker.harness import Client, Net, SyncJournal

DATA = Path(__file__).parents[1] / "fixtures"


def body(d: Any) -> Any:
    return Message.decode(d.payload).body


def bodies(c: Client, r: Any) -> list[Any]:
    return [body(d) for d in c.received(r)]


def refusal(c: Client) -> Any:
    errors = [e.error for e in c.events if isinstance(e, LinkDetached)]
    assert errors, "the link was not refused"
    return errors[-1].condition


def setup(net: Net, vhost: str = "/") -> VirtualHost:
    return net.broker.vhosts[vhost]


# -- topic matching: the trie against a plain reference matcher ---------------------------------
def reference_match(pattern: str, key: str) -> bool:
    """RabbitMQ's topic rule, written the obvious (exponential) way."""

    def go(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(go(p[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (p[0] == "*" or p[0] == k[0]) and go(p[1:], k[1:])

    return go(pattern.split(".") if pattern else [], key.split(".") if key else [])


words = st.sampled_from(["a", "b", "c", ""])
pattern_words = st.sampled_from(["a", "b", "c", "", "*", "#"])
keys = st.lists(words, max_size=5).map(".".join)
patterns = st.lists(pattern_words, max_size=5).map(".".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=8, unique=True), keys)
def test_topic_trie_matches_like_the_reference(bound: list[str], key: str) -> None:
    trie = TopicTrie()
    for i, p in enumerate(bound):
        trie.add(p, i, p)
    assert sorted(trie.match(key).values()) == sorted(p for p in bound if reference_match(p, key))


@settings(max_examples=100, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=8, unique=True), st.data())
def test_topic_trie_removal_prunes_and_keeps_the_rest(bound: list[str], data: st.DataObject) -> None:
    trie = TopicTrie()
    for i, p in enumerate(bound):
        trie.add(p, i, p)
    gone = data.draw(st.sets(st.sampled_from(bound)))
    for p in gone:
        trie.remove(p, bound.index(p))
    key = data.draw(keys)
    left = [p for p in bound if p not in gone]
    assert sorted(trie.match(key).values()) == sorted(p for p in left if reference_match(p, key))
    if not left:
        assert trie.root.empty()


@pytest.mark.parametrize(
    ("pattern", "key", "match"),
    [
        ("#", "", True),
        ("#", "a.b.c", True),
        ("#.c", "c", True),  # '#' at the start takes zero words
        ("#.c", "a.b.c", True),
        ("a.#.c", "a.c", True),  # in the middle
        ("a.#.c", "a.x.y.c", True),
        ("a.#", "a", True),  # at the end
        ("a.#", "b", False),
        ("*", "", False),  # '*' is exactly one word
        ("*", "a", True),
        ("*.*", "a", False),
        ("a.*.c", "a..c", True),  # an empty word is a word
        ("a..c", "a..c", True),
        ("a.*", "a.", True),
        ("", "", True),
        ("", "a", False),
        ("#.#", "a", True),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
    ],
)
def test_topic_edge_cases(pattern: str, key: str, match: bool) -> None:
    trie = TopicTrie()
    trie.add(pattern, 1, "q")
    assert bool(trie.match(key)) is match
    assert reference_match(pattern, key) is match


# -- exchange types over 1.0 --------------------------------------------------------------------
def test_direct_exchange_by_address_key_and_subject() -> None:
    net = Net()
    v = setup(net)
    for q in ("red", "green"):
        v.declare_queue(q)
    v.declare_exchange("colours", "direct")
    v.bind("colours", "red", "r")
    v.bind("colours", "green", "g")
    v.bind("colours", "green", "r")  # two keys to one queue
    c = net.client()
    by_key = c.sender("/exchanges/colours/r")
    by_subject = c.sender("/exchanges/colours")
    c.send(by_key, Message(body=1))
    c.send(by_subject, Message(body=2, subject="g"))
    d = c.send(by_subject, Message(body=3, subject="blue"))
    assert isinstance(d.remote_state, Released)  # routed nowhere: released, as RabbitMQ 4 does
    red = c.receiver("/queues/red", credit=10)
    green = c.receiver("/queues/green", credit=10)
    assert bodies(c, red) == [1]
    assert bodies(c, green) == [1, 2]


def test_fanout_exchange_copies_to_every_queue() -> None:
    net = Net()
    v = setup(net)
    for q in ("f1", "f2", "f3"):
        v.declare_queue(q)
        v.bind("amq.fanout", q, "ignored")
    c = net.client()
    s = c.sender("/exchanges/amq.fanout/whatever")
    d = c.send(s, Message(body="all"))
    assert isinstance(d.remote_state, Accepted)
    for q in ("f1", "f2", "f3"):
        assert bodies(c, c.receiver(f"/queues/{q}", credit=5)) == ["all"]


def test_topic_exchange_wildcards() -> None:
    net = Net()
    v = setup(net)
    binds = {"all": "#", "eu": "eu.#", "any-sport": "*.sport", "fr-any": "eu.fr.*", "exact": "eu.fr.sport"}
    for q, key in binds.items():
        v.declare_queue(q)
        v.bind("amq.topic", q, key)
    c = net.client()
    s = c.sender("/exchanges/amq.topic")
    for key in ("eu.fr.sport", "us.sport", "eu", "", "eu.fr"):
        c.send(s, Message(body=key, subject=key))
    got = {q: bodies(c, c.receiver(f"/queues/{q}", credit=10)) for q in binds}
    assert got == {
        "all": ["eu.fr.sport", "us.sport", "eu", "", "eu.fr"],
        "eu": ["eu.fr.sport", "eu", "eu.fr"],
        "any-sport": ["us.sport"],
        "fr-any": ["eu.fr.sport"],
        "exact": ["eu.fr.sport"],
    }


@pytest.mark.parametrize(
    ("x_match", "headers", "routed"),
    [
        ("all", {"format": "pdf", "type": "report"}, True),
        ("all", {"format": "pdf"}, False),
        ("any", {"format": "pdf"}, True),
        ("any", {"format": "zip"}, False),
        ("all", {"format": "pdf", "type": "report", "x-tag": "no"}, True),  # x- ignored
        ("all-with-x", {"format": "pdf", "type": "report", "x-tag": "no"}, False),
        ("all-with-x", {"format": "pdf", "type": "report", "x-tag": "yes"}, True),
        ("any-with-x", {"x-tag": "yes"}, True),
        ("any", {"x-tag": "yes"}, False),
    ],
)
def test_headers_exchange_x_match(x_match: str, headers: dict[str, Any], routed: bool) -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("docs")
    v.bind("amq.headers", "docs", "", {"x-match": x_match, "format": "pdf", "type": "report", "x-tag": "yes"})
    c = net.client()
    s = c.sender("/exchanges/amq.headers")
    d = c.send(s, Message(body=1, application_properties=headers))
    assert isinstance(d.remote_state, Accepted if routed else Released)
    assert v.nodes["docs"].count == (1 if routed else 0)  # type: ignore[attr-defined]


def test_headers_binding_with_a_bad_x_match_is_refused() -> None:
    v = setup(Net())
    v.declare_queue("q")
    with pytest.raises(PreconditionFailed):
        v.bind("amq.match", "q", "", {"x-match": "most"})


def test_default_exchange_routes_by_queue_name() -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("inbox")
    c = net.client()
    c.send(c.sender("/exchanges/amq.default/inbox"), Message(body=1))
    c.send(c.sender("/exchanges/amq.default"), Message(body=2, subject="inbox"))
    d = c.send(c.sender("/exchanges/amq.default/nobody"), Message(body=3))
    assert isinstance(d.remote_state, Released)
    assert bodies(c, c.receiver("inbox", credit=5)) == [1, 2]
    with pytest.raises(AccessRefused):
        v.bind("", "inbox", "x")


def test_alternate_exchange_takes_what_matches_nothing() -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("known")
    v.declare_queue("unrouted")
    v.declare_exchange("ae", "fanout")
    v.bind("ae", "unrouted")
    v.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    v.bind("main", "known", "k")
    c = net.client()
    s = c.sender("/exchanges/main")
    c.send(s, Message(body="hit", subject="k"))
    c.send(s, Message(body="miss", subject="other"))
    assert bodies(c, c.receiver("/queues/known", credit=5)) == ["hit"]
    assert bodies(c, c.receiver("/queues/unrouted", credit=5)) == ["miss"]


def test_exchange_to_exchange_bindings_and_no_duplicates() -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("logs")
    v.declare_exchange("front", "topic")
    v.declare_exchange("back", "fanout", internal=True)
    v.bind("front", "back", "app.*", destination_kind="exchange")
    v.bind("front", "back", "#", destination_kind="exchange")  # two routes to the same exchange
    v.bind("back", "logs")
    v.bind("back", "front", destination_kind="exchange")  # a cycle: followed once
    c = net.client()
    s = c.sender("/exchanges/front/app.web")
    c.send(s, Message(body="once"))
    assert bodies(c, c.receiver("/queues/logs", credit=5)) == ["once"]


def test_internal_exchange_refuses_publishers() -> None:
    net = Net()
    v = setup(net)
    v.declare_exchange("hidden", "fanout", internal=True)
    c = net.client()
    c.sender("/exchanges/hidden")
    assert refusal(c) == ErrorCondition.UNAUTHORIZED_ACCESS


def test_unknown_addresses_are_not_found() -> None:
    net = Net(BrokerConfig(auto_create=False))
    c = net.client()
    c.sender("/exchanges/nope/k")
    assert refusal(c) == ErrorCondition.NOT_FOUND
    c.receiver("/queues/nope")
    assert refusal(c) == ErrorCondition.NOT_FOUND
    c.receiver("/exchanges/amq.topic/k")  # a source must be a queue
    assert refusal(c) == ErrorCondition.INVALID_FIELD


def test_percent_encoded_queue_names() -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("a/b c")
    c = net.client()
    c.send(c.sender("/queues/a%2Fb%20c"), Message(body=1))
    assert bodies(c, c.receiver("/queues/a%2Fb%20c", credit=5)) == [1]


def test_null_target_routes_each_message_by_its_to() -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("q1")
    v.declare_queue("q2")
    v.bind("amq.direct", "q2", "two")
    c = net.client()
    s = c.sender(None, name="anon")
    c.send(s, Message(body=1, to="/queues/q1"))
    c.send(s, Message(body=2, to="/exchanges/amq.direct/two"))
    c.send(s, Message(body=3, to="q1"))  # a plain name works too
    d = c.send(s, Message(body=4))  # no 'to': nowhere to go
    assert isinstance(d.remote_state, Rejected) and d.remote_state.error.condition == ErrorCondition.NOT_FOUND
    assert bodies(c, c.receiver("q1", credit=5)) == [1, 3]
    assert bodies(c, c.receiver("q2", credit=5)) == [2]


def test_auto_delete_exchange_goes_with_its_last_binding() -> None:
    v = setup(Net())
    v.declare_queue("q")
    v.declare_exchange("temp", "direct", auto_delete=True)
    v.bind("temp", "q", "a")
    v.bind("temp", "q", "b")
    v.unbind("temp", "q", "a")
    assert "temp" in v.exchanges
    v.unbind("temp", "q", "b")
    assert "temp" not in v.exchanges


def test_deleting_a_queue_removes_its_bindings() -> None:
    v = setup(Net())
    v.declare_queue("q")
    v.bind("amq.direct", "q", "k")
    v.delete_node("q")
    assert v.exchanges["amq.direct"].bindings == {}


def test_declarations_check_their_arguments() -> None:
    v = setup(Net())
    v.declare_exchange("x", "topic")
    assert v.declare_exchange("x", "topic") is v.exchanges["x"]
    with pytest.raises(PreconditionFailed):
        v.declare_exchange("x", "direct")
    with pytest.raises(AccessRefused):
        v.declare_exchange("amq.mine", "direct")
    with pytest.raises(NotFound):
        v.declare_exchange("absent", "direct", passive=True)
    with pytest.raises(NotFound):
        v.declare_queue("absent", passive=True)
    with pytest.raises(AccessRefused):
        v.delete_exchange("amq.topic")
    with pytest.raises(NotFound):
        v.bind("x", "no-such-queue", "k")


def test_plain_topics_are_fanout_exchanges_underneath() -> None:
    net = Net(BrokerConfig(topics=["news"]))
    v = setup(net)
    topic = v.nodes["news"]
    assert isinstance(topic, Topic) and v.exchanges["news"] is topic
    c = net.client()
    r1 = c.receiver("news", credit=5)
    r2 = c.receiver("news", credit=5)
    assert len(topic.bindings) == 2
    c.send(c.sender("news"), Message(body="hi"))
    assert bodies(c, r1) == ["hi"] and bodies(c, r2) == ["hi"]
    # and an exchange address reaches the same subscribers
    c.send(c.sender("/exchanges/news"), Message(body="again"))
    assert bodies(c, r1) == ["again"] and bodies(c, r2) == ["again"]


# -- virtual hosts --------------------------------------------------------------------------------
def test_virtual_hosts_are_separate_name_spaces() -> None:
    cfg = BrokerConfig(
        vhosts=[
            VhostConfig(
                name="shop",
                hostnames=["shop.example"],
                exchanges=[ExchangeConfig(name="orders", type="topic")],
                queues=["eu-orders"],
                bindings=[BindingConfig(source="orders", destination="eu-orders", routing_key="eu.#")],
            )
        ]
    )
    net = Net(cfg)
    shop = net.client("a", hostname="vhost:shop")
    by_name = net.client("b", hostname="shop.example")
    default = net.client("c")
    shop.send(shop.sender("/exchanges/orders/eu.fr"), Message(body="order"))
    assert bodies(by_name, by_name.receiver("/queues/eu-orders", credit=5)) == ["order"]
    default.sender("/exchanges/orders")
    assert refusal(default) == ErrorCondition.NOT_FOUND  # not in '/'
    default.send(default.sender("eu-orders"), Message(body="elsewhere"))  # a different queue
    assert net.broker.vhosts["shop"].nodes["eu-orders"].count == 0  # type: ignore[attr-defined]
    assert net.broker.vhosts["/"].nodes["eu-orders"].count == 1  # type: ignore[attr-defined]


def test_unknown_virtual_host_closes_the_connection() -> None:
    net = Net()
    # an open, then a close naming the host (what spec clients report; RabbitMQ 4 drops
    # the socket without a word, the only answer its Python client's recovery gives up
    # on: interop/rabbitmq_amqp_client.py, CAUSES["vhost_not_exists"])
    c = net.client(hostname="vhost:nowhere")
    assert c.conn.remote_open is not None and c.conn.remote_close is not None
    assert c.conn.remote_close.error is not None
    assert c.conn.remote_close.error.condition == ErrorCondition.NOT_FOUND
    assert "nowhere" in str(c.conn.remote_close.error.description)


# -- management over 1.0 ------------------------------------------------------------------------------
def manage(c: Client, operation: str, **args: Any) -> tuple[int, Any]:
    r = c.receiver("mgmt-replies", credit=1)
    s = c.sender("$management")
    req = Message(body=args, reply_to="mgmt-replies", id=f"req-{operation}")
    req.application_properties = {"operation": operation}
    c.send(s, req)
    (d,) = c.received(r)
    d.settle(Accepted())
    c.net.pump()
    m = Message.decode(d.payload)
    return m.application_properties["status-code"], m.body


def test_management_declares_exchanges_queues_and_bindings() -> None:
    net = Net()
    c = net.client()
    assert manage(c, "declare-exchange", name="events", type="topic")[0] == 201
    assert manage(c, "declare-queue", name="audit")[0] == 201
    assert manage(c, "bind", source="events", destination="audit", routing_key="user.*")[0] == 201
    assert manage(c, "declare-exchange", name="events", type="fanout")[0] == 409
    assert manage(c, "bind", source="events", destination="missing")[0] == 404
    assert manage(c, "delete-exchange", name="amq.direct")[0] == 403
    c.send(c.sender("/exchanges/events/user.login"), Message(body="in"))
    assert bodies(c, c.receiver("/queues/audit", credit=5)) == ["in"]
    assert manage(c, "unbind", source="events", destination="audit", routing_key="user.*")[0] == 200
    d = c.send(c.sender("/exchanges/events/user.login"), Message(body="lost"))
    assert isinstance(d.remote_state, Released)


# -- durability -----------------------------------------------------------------------------------------
def test_durable_exchanges_and_bindings_survive_restart(open_store: Callable[[], store_.SqlStore]) -> None:
    s = open_store()  # on each backend
    b = Broker(BrokerConfig(), journal=SyncJournal(s))
    b.add_vhost("other")
    for vname in ("/", "other"):
        v = b.vhosts[vname]
        v.declare_queue("kept")
        v.declare_queue("scratch", durable=False)
        v.declare_exchange("x", "topic", alternate="ae", internal=False)
        v.declare_exchange("ae", "fanout")
        v.declare_exchange("gone", "direct", durable=False)
        v.declare_exchange("hx", "headers", auto_delete=True)
        v.bind("x", "kept", "a.#")
        v.bind("x", "scratch", "b.#")  # to a transient queue: not kept
        v.bind("x", "ae", "e.*", destination_kind="exchange")
        v.bind("hx", "kept", "", {"x-match": "any", "k": 1})
    s.close()

    s2 = open_store()
    fresh = Broker(BrokerConfig())
    fresh.recover(s2)
    for vname in ("/", "other"):
        v = fresh.vhosts[vname]
        assert isinstance(v.nodes["kept"], Queue) and "scratch" not in v.nodes
        assert "gone" not in v.exchanges
        x = v.exchanges["x"]
        assert (x.type, x.alternate) == ("topic", "ae")
        assert sorted((b.destination.name, b.key) for b in x.bindings.values()) == [("ae", "e.*"), ("kept", "a.#")]
        hx = v.exchanges["hx"]
        assert hx.auto_delete and [b.arguments for b in hx.bindings.values()] == [{"x-match": "any", "k": 1}]


def test_a_store_written_before_virtual_hosts_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    shutil.copy(DATA / "store-v0.sqlite3", path)
    s = store_.Store(path)
    assert s.migrated_from == 0
    b = Broker(BrokerConfig(), journal=SyncJournal(s))
    assert b.recover(s) == 6  # every message the old broker stored
    v = b.vhosts["/"]
    orders = v.nodes["orders"]
    assert isinstance(orders, Queue)
    msgs = list(orders)
    assert [Message.decode(m.data).body for m in msgs] == ["order-0", "order-1", "order-2"]
    assert [m.delivery_count for m in msgs] == [1, 0, 0]  # order-0 was in flight
    assert all(isinstance(m, Amqp1Message) for m in msgs)
    news = v.nodes["news"]
    assert isinstance(news, Topic)
    (sub,) = news.subscriptions.values()
    assert [Message.decode(m.data).body for m in sub] == ["headline"]
    assert [bd.destination for bd in news.bindings.values()] == [sub]
    log = v.nodes["log"]
    assert isinstance(log, Stream) and log.info()["next"] == 2
    # the migrated store keeps working: a new message, a restart, everything still there
    net = Net()
    net.broker = b
    c = net.client()
    c.send(c.sender("orders"), Message(body="order-3", durable=True))
    s.close()
    s2 = store_.Store(path)
    assert s2.migrated_from is None
    again = Broker(BrokerConfig())
    assert again.recover(s2) == 7


def test_a_store_from_a_newer_broker_is_refused(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "new.sqlite3"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(ValueError, match="newer"):
        store_.Store(path)


def test_routing_fields_are_read_once_and_only_when_asked() -> None:
    raw = Message(body=b"x" * 50, body_type="data", subject="k", to="/queues/q", application_properties={"h": 1}).encode()
    m = Amqp1Message(raw)
    with pytest.raises(AttributeError):
        m._routing  # noqa: B018 - nothing read yet
    r = m.routing
    assert (r.subject, r.to) == ("k", "/queues/q")
    with pytest.raises(AttributeError):
        m._headers  # noqa: B018 - the headers are read apart, when a headers exchange asks
    assert dict(m.headers) == {"h": 1} and m.headers is m.headers
    assert m.routing is r and m.copy().routing is r
    assert m.form("amqp1") is raw
    with pytest.raises(LookupError):
        m.form("stomp")  # no front end registered a conversion to it


def test_messages_of_same_named_queues_in_two_vhosts_recover_apart(tmp_path: Path) -> None:
    s = store_.Store(tmp_path / "db.sqlite3")
    net = Net(BrokerConfig(vhosts=[VhostConfig(name="other")]))
    net.broker = Broker(BrokerConfig(vhosts=[VhostConfig(name="other")]), journal=SyncJournal(s))
    for host, text in (("vhost:other", "in other"), (None, "in /")):
        c = net.client(hostname=host)
        c.send(c.sender("orders"), Message(body=text, durable=True))
    s.close()
    fresh = Broker(BrokerConfig())
    assert fresh.recover(store_.Store(tmp_path / "db.sqlite3")) == 2
    for vname, text in (("other", "in other"), ("/", "in /")):
        q = fresh.vhosts[vname].nodes["orders"]
        assert isinstance(q, Queue)
        assert [Message.decode(m.data).body for m in q] == [text]
    assert store_.split_message_key(store_.message_key("other", "orders")) == ("other", "orders")
    assert store_.message_key("/", "orders") == "orders"


@pytest.mark.parametrize("address", ["/queues/gone", "gone", "/exchanges/x-gone/k"])
def test_publishers_to_a_deleted_node_are_detached(address: str) -> None:
    net = Net()
    v = setup(net)
    v.declare_queue("gone")
    v.declare_exchange("x-gone", "direct")
    v.bind("x-gone", "gone", "k")
    c = net.client()
    s = c.sender(address)
    c.send(s, Message(body=1))
    if address.startswith("/exchanges/"):
        v.delete_exchange("x-gone")
    else:
        v.delete_node("gone")
    c.send(s, Message(body=2))
    assert refusal(c) == ErrorCondition.RESOURCE_DELETED
