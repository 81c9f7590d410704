"""A management answer goes out only once the change it reports is committed to the store.

A reply that says "created", "bound", "rule added" is a promise that the change survives a
crash; the store's group committer makes the change durable a little later. These tests
hold the commit (:class:`HeldJournal` in memory; a gate on the store of a running broker
for pika) and check that no answer is sent while it is held, and that it arrives once the
commit is done: for ``$management`` CREATE of a durable queue, Service Bus's
``com.microsoft:add-rule`` and ``remove-rule``, and 0-9-1's durable ``queue.declare`` (pika;
and in memory, what waits behind such an answer).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pika

from amqp10.amqp091 import MethodReceived
from amqp10.amqp091 import methods as m091
from amqp10.broker.amqp1.servicebus.entities import declare_entities
from amqp10.broker.amqp1.servicebus.tokens import Grant
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.core import store as st
from amqp10.message import Message
from amqp10.types import Accepted, Source
from tests.broker.amqp091.test_amqp091_fuzz import InMemory
from tests.broker.conftest import broker_with, held_commits
from tests.broker.harness import Client, HeldJournal, Net

T = 10.0


def _answers(c: Client, link: Any) -> list[Message]:
    return [Message.decode(d.payload) for d in c.received(link)]


def _stored_nodes(store: st.Store) -> set[str]:
    return {n.name for n in store.load(messages=False).nodes}


# -- $management (the OASIS draft) ---------------------------------------------------------------
def _create_request(tmp_path: Path, name: str) -> tuple[st.Store, HeldJournal, Net, Client, Any, Any]:
    """A broker on a held store, and a client that asked ``$management`` to CREATE the
    durable queue ``name``: (store, journal, net, client, reply link, the request's delivery)."""
    store = st.Store(tmp_path / "db.sqlite3")
    j = HeldJournal(store)
    net = Net(journal=j)
    c = net.client()
    replies = c.receiver(None, credit=5, source=Source(dynamic=True))
    request = Message(body={"durable": True}, reply_to=replies.remote_source.address, id=f"create-{name}")
    request.application_properties = {"operation": "CREATE", "type": "queue", "name": name}
    return store, j, net, c, replies, c.send(c.sender("$management"), request)


def test_a_durable_queue_create_is_answered_once_its_record_is_committed(tmp_path: Path) -> None:
    store, j, net, c, replies, d = _create_request(tmp_path, "orders")
    assert isinstance(d.remote_state, Accepted)  # the request is taken ...
    assert "orders" in net.broker.default.nodes
    assert _answers(c, replies) == []  # ... but not answered while its record is not committed
    assert "orders" not in _stored_nodes(store)
    j.commit()
    net.pump()
    (answer,) = _answers(c, replies)
    assert answer.correlation_id == "create-orders"
    assert answer.application_properties["statusCode"] == 201
    assert "orders" in _stored_nodes(store)


def test_a_crash_before_the_commit_loses_only_an_unanswered_create(tmp_path: Path) -> None:
    store, j, net, c, replies, _ = _create_request(tmp_path, "lost")
    j.crash()  # the broker dies with the record not committed
    net.pump()
    assert _answers(c, replies) == []  # nobody was told it was created
    again = Broker(BrokerConfig(), journal=HeldJournal(store))
    again.recover(store)
    assert "lost" not in again.default.nodes


# -- Service Bus rules -----------------------------------------------------------------------------
TOPIC, SUB = "t", "s"


def _servicebus(tmp_path: Path) -> tuple[st.Store, HeldJournal, Net, Client, Any]:
    config = BrokerConfig.model_validate(
        {"servicebus": {"enabled": True, "topics": [{"name": TOPIC, "subscriptions": [{"name": SUB}]}]}}
    )
    store = st.Store(tmp_path / "db.sqlite3")
    j = HeldJournal(store)
    net = Net(config, journal=j)
    declare_entities(net.broker.default, config.servicebus)
    j.commit()
    c = net.client()
    c.handler.use_claims(config.servicebus)
    assert c.handler.gate is not None
    c.handler.gate.grants[TOPIC] = Grant(f"sb://host/{TOPIC}", frozenset({"Listen", "Send", "Manage"}), net.broker.now() + 600)
    node = f"{TOPIC}/Subscriptions/{SUB}/$management"
    replies = c.receiver(node, credit=10)
    return store, j, net, c, (c.sender(node), replies)


def _rule_request(c: Client, links: Any, operation: str, body: dict[str, Any]) -> None:
    request = Message(body=body, id=f"{operation}-1")
    request.application_properties = {"operation": f"com.microsoft:{operation}"}
    c.send(links[0], request)


def _stored_rules(store: st.Store) -> list[str]:
    (record,) = [n for n in store.load(messages=False).nodes if n.kind == "subscription"]
    kept = json.loads(record.properties).get("settings", {}).get("servicebus-rules", [])
    return [r["rule"]["name"] for r in kept]


def test_add_rule_and_remove_rule_are_answered_once_the_rules_are_committed(tmp_path: Path) -> None:
    store, j, net, c, links = _servicebus(tmp_path)
    rule = {"sql-filter": {"expression": "color = 'red'"}, "sql-rule-action": None, "rule-name": "red"}
    _rule_request(c, links, "add-rule", {"rule-name": "red", "rule-description": rule})
    assert _answers(c, links[1]) == []  # the rule applies, but the answer waits for its record
    assert "red" not in _stored_rules(store)
    j.commit()
    net.pump()
    (added,) = _answers(c, links[1])
    assert added.application_properties["statusCode"] == 200 and added.correlation_id == "add-rule-1"
    assert "red" in _stored_rules(store)

    _rule_request(c, links, "remove-rule", {"rule-name": "red"})
    assert _answers(c, links[1]) == []
    assert "red" in _stored_rules(store)
    j.commit()
    net.pump()
    (removed,) = _answers(c, links[1])
    assert removed.application_properties["statusCode"] == 200
    assert "red" not in _stored_rules(store)


def test_answers_keep_the_order_of_their_requests(tmp_path: Path) -> None:
    """A read after a held change is answered after it: every answer waits in one queue."""
    store, j, net, c, links = _servicebus(tmp_path)
    rule = {"sql-filter": {"expression": "1=1"}, "sql-rule-action": None, "rule-name": "all"}
    _rule_request(c, links, "add-rule", {"rule-name": "all", "rule-description": rule})
    request = Message(body={"skip": 0, "top": 10}, id="enumerate-1")
    request.application_properties = {"operation": "com.microsoft:enumerate-rules"}
    c.send(links[0], request)
    assert _answers(c, links[1]) == []
    j.commit()
    net.pump()
    assert [a.correlation_id for a in _answers(c, links[1])] == ["add-rule-1", "enumerate-1"]


# -- 0-9-1 (pika, a running broker) -------------------------------------------------------------------
def test_pika_durable_queue_declare_ok_waits_for_the_commit(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, blocked_connection_timeout=T))
        try:
            ch = conn.channel()
            done: list[Any] = []

            def declare() -> None:
                done.append(ch.queue_declare("kept", durable=True))

            with held_commits(b) as reached:
                worker = threading.Thread(target=declare)
                worker.start()
                reached(lambda ops: any(op[0] == st.NODE and op[2] == "kept" for op in ops))
                # the record is being written and not committed: no declare-ok yet
                worker.join(0.5)
                assert worker.is_alive() and done == []
            worker.join(T)
            assert not worker.is_alive()
            (ok,) = done
            assert ok.method.queue == "kept"
            with sqlite3.connect(tmp_path / "store.sqlite3") as db:  # (a reader of its own: the broker writes on)
                assert db.execute("SELECT name FROM nodes WHERE name = 'kept'").fetchall() == [("kept",)]
            ch.queue_declare("kept", passive=True)  # the connection goes on after the wait
            ch.basic_publish("", "kept", b"after")
            method, _, body = next(ch.consume("kept", inactivity_timeout=T))
            assert body == b"after"
            ch.basic_ack(method.delivery_tag)
            ch.cancel()
        finally:
            conn.close()


# -- 0-9-1 in memory: what waits behind an answer ---------------------------------------------------
def _pair(tmp_path: Path) -> tuple[HeldJournal, InMemory]:
    j = HeldJournal(st.Store(tmp_path / "db.sqlite3"))
    pair = InMemory(Broker(BrokerConfig(), journal=j))
    assert pair.channel(1) and pair.channel(2)
    pair.client_events.clear()
    return j, pair


def _replies(pair: InMemory) -> list[str]:
    return [e.method.NAME for e in pair.client_events if isinstance(e, MethodReceived)]


def test_0_9_1_methods_behind_a_waiting_answer_wait_in_order(tmp_path: Path) -> None:
    j, pair = _pair(tmp_path)
    pair.client.send_method(1, m091.QueueDeclare(queue="d", durable=True))
    pair.client.send_method(1, m091.QueueBind(queue="d", exchange="amq.direct", routing_key="k"))
    pair.client.send_method(2, m091.BasicQos(prefetch_count=5))
    pair.pump()
    assert _replies(pair) == []  # not even the other channel's qos-ok overtakes the declare-ok
    j.commit()
    pair.pump()
    assert _replies(pair) == ["queue.declare-ok"]  # the binding now waits for its own commit
    j.commit()
    pair.pump()
    assert _replies(pair) == ["queue.declare-ok", "queue.bind-ok", "basic.qos-ok"]
    pair.client.send_method(1, m091.QueueDeclare(queue="d", passive=True))
    pair.pump()
    assert _replies(pair)[-1] == "queue.declare-ok"  # a passive declaration changes nothing: at once


def test_0_9_1_connection_that_ends_while_an_answer_waits(tmp_path: Path) -> None:
    j, pair = _pair(tmp_path)
    pair.client.send_method(1, m091.QueueDeclare(queue="x", durable=True))
    pair.client.send_method(2, m091.QueueDeclare(queue="mine", exclusive=True))
    pair.pump()
    assert "mine" not in pair.broker.default.nodes  # behind the waiting answer
    pair.client.close()
    pair.pump()
    assert pair.handler.closed  # the end is handled at once; what waited is dropped, never answered
    j.commit()
    pair.pump()
    assert _replies(pair) == [] and "mine" not in pair.broker.default.nodes


def test_with_nothing_to_commit_the_answer_goes_at_once(tmp_path: Path) -> None:
    """A read (or a change of nothing durable) with no write outstanding has nothing to wait for."""
    store, j, net, c, replies, _ = _create_request(tmp_path, "orders")
    j.commit()
    net.pump()
    assert len(_answers(c, replies)) == 1
    request = Message(body={}, reply_to=replies.remote_source.address, id="read-1")
    request.application_properties = {"operation": "READ", "type": "queue", "name": "orders"}
    c.send(c.sender("$management"), request)
    (answer,) = _answers(c, replies)  # no commit needed
    assert answer.correlation_id == "read-1" and answer.application_properties["statusCode"] == 200
    assert j.ops == []  # and nothing was written for it
