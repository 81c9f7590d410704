"""Subscription rules over AMQP (``com.microsoft:add-rule``, ``remove-rule``, ``enumerate-rules``
on ``TOPIC/Subscriptions/SUB/$management``): with our own client, with python-qpid-proton,
end to end with the ``azure-servicebus`` SDK, and across a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection, SyncRequestResponse

import amqp10.sync
from amqp10.broker.amqp1.servicebus.rules import DESCRIPTORS
from amqp10.message import Message
from amqp10.types import Described
from tests.broker.conftest import RunningBroker, make_config, start_broker

from .test_servicebus_sdk import JWT_SECRET, KEY, KEY_NAME, _jwt, _put, conn_str

TOPIC = "rt"
SUBS = ["ops", "proton", "e2e", "kept", "act"]


def _config(tmp: Path, subs: list[dict[str, Any]] | None = None) -> Any:
    return make_config(
        tmp,
        servicebus={
            "enabled": True,
            "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
            "jwt_secret": JWT_SECRET,
            "queues": [{"name": "rq"}],
            "topics": [{"name": TOPIC, "subscriptions": subs if subs is not None else [{"name": s} for s in SUBS]}],
        },
    )


@pytest.fixture(scope="module")
def rules_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from start_broker(_config(tmp_path_factory.mktemp("sbrules")))


def _connect(b: RunningBroker) -> Any:
    conn = amqp10.sync.connect(f"amqp://127.0.0.1:{b.port}", sasl_mechanisms=["ANONYMOUS"], timeout=10)
    for scope in (TOPIC, "rq"):
        assert _put(conn, _jwt({"exp": time.time() + 600, "rights": ["Listen", "Send", "Manage"]}), f"sb://127.0.0.1/{scope}")["status-code"] == 202
    return conn


def _op(conn: Any, sub: str, operation: str, body: Any) -> tuple[dict[str, Any], Any]:
    reply = conn.request(
        f"{TOPIC}/Subscriptions/{sub}/$management",
        Message(body=body, application_properties={"operation": f"com.microsoft:{operation}"}),
        timeout=10,
    )
    return dict(reply.application_properties), reply.body


def _sql(name: str, expression: str, action: str | None = None) -> dict[str, Any]:
    return {
        "rule-name": name,
        "rule-description": {
            "sql-filter": {"expression": expression},
            "sql-rule-action": None if action is None else {"expression": action},
            "rule-name": name,
        },
    }


def _correlation(name: str, **fields: Any) -> dict[str, Any]:
    wire = {k.replace("_", "-"): fields.get(k) for k in ("correlation_id", "message_id", "to", "reply_to", "label", "session_id", "reply_to_session_id", "content_type")}
    wire["properties"] = fields.get("properties", {})
    return {"rule-name": name, "rule-description": {"correlation-filter": wire, "sql-rule-action": None, "rule-name": name}}


def _names(body: Any) -> list[str]:
    return [entry["rule-description"].value[2] for entry in body["rules"]]


def test_add_enumerate_remove_with_our_client(rules_broker: RunningBroker) -> None:
    with _connect(rules_broker) as conn:
        props, _ = _op(conn, "ops", "add-rule", _sql("red", "color = 'red' AND sys.Label = 'x'", "SET seen = TRUE; REMOVE color"))
        assert props["statusCode"] == 200
        props, _ = _op(conn, "ops", "add-rule", _correlation("corr", correlation_id="c-1", label="hot", properties={"n": 2}))
        assert props["statusCode"] == 200
        props, _ = _op(conn, "ops", "add-rule", _sql("never", "1=0"))
        assert props["statusCode"] == 200
        # a taken name (names ignore case)
        props, _ = _op(conn, "ops", "add-rule", _sql("RED", "1=1"))
        assert (props["statusCode"], props["errorCondition"]) == (409, "com.microsoft:entity-already-exists")
        assert "RED" in props["statusDescription"]
        # paging: $Default first, then the rules in the order they were added
        props, body = _op(conn, "ops", "enumerate-rules", {"skip": 0, "top": 2})
        assert props["statusCode"] == 200 and _names(body) == ["$Default", "red"]
        props, body = _op(conn, "ops", "enumerate-rules", {"skip": 2, "top": 2})
        assert _names(body) == ["corr", "never"]
        props, body = _op(conn, "ops", "enumerate-rules", {"skip": 4, "top": 2})
        assert props["statusCode"] == 204 and body is None
        # the described types, as the SDKs decode them
        _, body = _op(conn, "ops", "enumerate-rules", {"skip": 0, "top": 10})
        rules = {e["rule-description"].value[2]: e["rule-description"] for e in body["rules"]}
        assert all(isinstance(d, Described) and d.descriptor == DESCRIPTORS["rule-description"] for d in rules.values())
        default_filter, default_action, _, created = rules["$Default"].value
        assert default_filter.descriptor == 0x000001370000007 and default_action.descriptor == 0x0000013700000005
        assert isinstance(created, int) and abs(created / 1000 - time.time()) < 600
        sql_filter, sql_action = rules["red"].value[:2]
        assert sql_filter.descriptor == 0x000001370000006 and sql_filter.value[0] == "color = 'red' AND sys.Label = 'x'"
        assert sql_action.descriptor == 0x0000013700000006 and sql_action.value[0] == "SET seen = TRUE; REMOVE color"
        corr = rules["corr"].value[0]
        assert corr.descriptor == 0x000001370000009
        assert corr.value[0] == "c-1" and corr.value[4] == "hot" and corr.value[8] == {"n": 2}
        assert rules["never"].value[0].descriptor == 0x000001370000008
        # remove: unknown is a 404, known is gone
        props, _ = _op(conn, "ops", "remove-rule", {"rule-name": "nope"})
        assert (props["statusCode"], props["errorCondition"]) == (404, "amqp:not-found")
        props, _ = _op(conn, "ops", "remove-rule", {"rule-name": "never"})
        assert props["statusCode"] == 200
        _, body = _op(conn, "ops", "enumerate-rules", {"skip": 0, "top": 10})
        assert _names(body) == ["$Default", "red", "corr"]


@pytest.mark.parametrize(
    ("operation", "body", "reason"),
    [
        ("add-rule", {"rule-description": {"sql-filter": {"expression": "1=1"}}}, "rule-name"),
        ("add-rule", _sql("bad", "color ==== 'red'"), "selector error"),
        ("add-rule", _sql("bad", "1=1", "DROP TABLE x"), "SET or REMOVE"),
        ("add-rule", {"rule-name": "bad", "rule-description": {}}, "one of sql-filter and correlation-filter"),
        ("add-rule", {"rule-name": "bad", "rule-description": {"correlation-filter": {"label": None}}}, "at least one"),
        ("add-rule", {"rule-name": "bad", "rule-description": {"correlation-filter": {"colour": "x"}}}, "colour"),
        ("add-rule", {"rule-name": "bad", "rule-description": "not a map"}, "is a map"),
        ("remove-rule", {}, "rule-name"),
        ("enumerate-rules", {"skip": -1, "top": 5}, "skip"),
        ("enumerate-rules", {"skip": 0, "top": "all"}, "top"),
        ("add-rule", ["not", "a", "map"], "body is a map"),
    ],
)
def test_malformed_requests_are_400s(rules_broker: RunningBroker, operation: str, body: Any, reason: str) -> None:
    with _connect(rules_broker) as conn:
        props, _ = _op(conn, "ops", operation, body)
        assert props["statusCode"] == 400 and reason in props["statusDescription"]
        assert props["errorCondition"] == "com.microsoft:argument-error"
        props, _ = _op(conn, "ops", "enumerate-rules", {"skip": 0, "top": 1})
        assert props["statusCode"] == 200  # still answering


def test_rules_belong_to_subscriptions(rules_broker: RunningBroker) -> None:
    with _connect(rules_broker) as conn:
        reply = conn.request(
            "rq/$management", Message(body={"skip": 0, "top": 1}, application_properties={"operation": "com.microsoft:enumerate-rules"}), timeout=10
        )
        assert reply.application_properties["statusCode"] == 400
        assert "not a subscription" in reply.application_properties["statusDescription"]


def _proton_op(client: SyncRequestResponse, operation: str, body: Any) -> ProtonMessage:
    return client.call(ProtonMessage(body=body, properties={"operation": f"com.microsoft:{operation}"}))


def test_rule_operations_with_proton(rules_broker: RunningBroker) -> None:
    conn = BlockingConnection(f"amqp://127.0.0.1:{rules_broker.port}", timeout=10, sasl_enabled=True, allowed_mechs="ANONYMOUS")
    try:
        cbs = SyncRequestResponse(conn, "$cbs")
        token = _jwt({"exp": time.time() + 600, "rights": ["Manage"]})
        put = cbs.call(ProtonMessage(body=token, properties={"operation": "put-token", "type": "jwt", "name": f"sb://127.0.0.1/{TOPIC}"}))
        assert put.properties["status-code"] == 202
        client = SyncRequestResponse(conn, f"{TOPIC}/Subscriptions/proton/$management")
        added = _proton_op(client, "add-rule", _correlation("by-subject", label="hot", content_type="text/plain"))
        assert added.properties["statusCode"] == 200
        again = _proton_op(client, "add-rule", _correlation("by-subject", label="cold"))
        assert again.properties["statusCode"] == 409
        bad = _proton_op(client, "add-rule", _sql("bad", "a >"))
        assert bad.properties["statusCode"] == 400
        listed = _proton_op(client, "enumerate-rules", {"skip": 1, "top": 5})
        assert listed.properties["statusCode"] == 200
        (entry,) = listed.body["rules"]
        description = entry["rule-description"]
        assert description.descriptor == DESCRIPTORS["rule-description"]
        corr, action, name, _ = description.value
        assert name == "by-subject" and corr.descriptor == DESCRIPTORS["correlation-filter"]
        assert corr.value[4] == "hot" and corr.value[7] == "text/plain"
        assert action.descriptor == DESCRIPTORS["empty-rule-action"]
        gone = _proton_op(client, "remove-rule", {"rule-name": "by-subject"})
        assert gone.properties["statusCode"] == 200
        missing = _proton_op(client, "remove-rule", {"rule-name": "by-subject"})
        assert missing.properties["statusCode"] == 404
    finally:
        conn.close()


def _receive_all(c: ServiceBusClient, sub: str, want: int) -> list[str]:
    got: list[Any] = []
    with c.get_subscription_receiver(TOPIC, sub) as r:
        for _ in range(5):
            got += r.receive_messages(max_message_count=10, max_wait_time=1)
            if len(got) >= want:
                break
        got += r.receive_messages(max_message_count=10, max_wait_time=1)  # and nothing more
        for m in got:
            r.complete_message(m)
    return [str(m) for m in got]


def test_rules_added_over_amqp_filter_what_the_sdk_receives(rules_broker: RunningBroker) -> None:
    with _connect(rules_broker) as conn:
        assert _op(conn, "e2e", "add-rule", _sql("big-red", "color = 'red' AND n > 5"))[0]["statusCode"] == 200
        assert _op(conn, "e2e", "add-rule", _correlation("vip", correlation_id="vip", properties={"tier": "gold"}))[0]["statusCode"] == 200
        assert _op(conn, "e2e", "remove-rule", {"rule-name": "$Default"})[0]["statusCode"] == 200
        _, body = _op(conn, "e2e", "enumerate-rules", {"skip": 0, "top": 10})
        assert _names(body) == ["big-red", "vip"]
    with ServiceBusClient.from_connection_string(conn_str(rules_broker), retry_total=0) as c:
        with c.get_topic_sender(TOPIC) as s:
            s.send_messages(
                [
                    ServiceBusMessage("big red", application_properties={"color": "red", "n": 9}),
                    ServiceBusMessage("small red", application_properties={"color": "red", "n": 1}),
                    ServiceBusMessage("gold vip", correlation_id="vip", application_properties={"tier": "gold"}),
                    ServiceBusMessage("silver vip", correlation_id="vip", application_properties={"tier": "silver"}),
                    ServiceBusMessage("nobody"),
                ]
            )
        assert _receive_all(c, "e2e", 2) == ["big red", "gold vip"]
        assert len(_receive_all(c, "kept", 5)) == 5  # $Default: everything


def test_a_rule_action_rewrites_the_subscriptions_copy(rules_broker: RunningBroker) -> None:
    subs = rules_broker.broker.default.nodes[TOPIC].subscriptions
    for sub in ("act", "kept"):  # what the other tests sent
        rules_broker.portal.call(subs[sub].purge)
    with _connect(rules_broker) as conn:
        action = "SET sys.Label = 'tagged'; SET doubled = n * 2; SET user.origin = sys.To; REMOVE secret"
        assert _op(conn, "act", "add-rule", _sql("act", "n > 0", action))[0]["statusCode"] == 200
        assert _op(conn, "act", "remove-rule", {"rule-name": "$Default"})[0]["statusCode"] == 200
    with ServiceBusClient.from_connection_string(conn_str(rules_broker), retry_total=0) as c:
        with c.get_topic_sender(TOPIC) as s:
            s.send_messages(ServiceBusMessage("m", to="dest", application_properties={"n": 21, "secret": "x"}))
        got: list[Any] = []
        for sub in ("act", "kept"):
            with c.get_subscription_receiver(TOPIC, sub) as r:
                msgs = r.receive_messages(max_message_count=1, max_wait_time=3)
                got += msgs
                for m in msgs:
                    r.complete_message(m)
        acted, kept = got
        assert acted.subject == "tagged" and acted.application_properties == {b"n": 21, b"doubled": 42, b"origin": b"dest"}
        assert kept.subject is None and kept.application_properties == {b"n": 21, b"secret": b"x"}  # its own copy


def test_rules_survive_a_restart_and_config_changes_win(tmp_path: Path) -> None:
    cfg = _config(tmp_path, [{"name": "s"}, {"name": "c", "rules": [{"name": "conf", "sql": "n = 1"}]}])
    for b in start_broker(cfg):
        with _connect(b) as conn:
            assert _op(conn, "s", "add-rule", _sql("only-two", "n = 2"))[0]["statusCode"] == 200
            assert _op(conn, "s", "remove-rule", {"rule-name": "$Default"})[0]["statusCode"] == 200
            assert _op(conn, "c", "add-rule", _sql("extra", "n = 3"))[0]["statusCode"] == 200
    for b in start_broker(cfg):  # the same store, the same config: the rules added over AMQP stay
        with _connect(b) as conn:
            _, body = _op(conn, "s", "enumerate-rules", {"skip": 0, "top": 10})
            assert _names(body) == ["only-two"]
            _, body = _op(conn, "c", "enumerate-rules", {"skip": 0, "top": 10})
            assert _names(body) == ["conf", "extra"]
            sender = conn.open_sender(TOPIC)
            for n in (1, 2, 3):
                sender.send(Message(body=f"n{n}", application_properties={"n": n}), timeout=10)
        subs = b.broker.default.nodes[TOPIC].subscriptions
        assert (subs["s"].count, subs["c"].count) == (1, 2)
    changed = _config(tmp_path, [{"name": "s"}, {"name": "c", "rules": [{"name": "conf2", "sql": "n = 4"}]}])
    for b in start_broker(changed):  # the configured rules changed: they replace the subscription's
        with _connect(b) as conn:
            _, body = _op(conn, "c", "enumerate-rules", {"skip": 0, "top": 10})
            assert _names(body) == ["conf2"]
            _, body = _op(conn, "s", "enumerate-rules", {"skip": 0, "top": 10})
            assert _names(body) == ["only-two"]
