"""Definitions on a running broker: a RabbitMQ export imported through ``$management``
(and the CLI, and ``definitions_file`` at start), routed through, exported back,
surviving a restart; runtime policies applied to new and existing queues."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import amqp10.sync
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, PreconditionFailed, Queue, RuntimePolicy
from amqp10.broker.core import store as st
from amqp10.broker.definitions import DefinitionsError
from amqp10.broker.service import BrokerService
from amqp10.broker.topology import LiveDefinitions
from amqp10.broker.users import add_user, read_users_file, update_users_file
from amqp10.cli import main as cli_main
from amqp10.field_types import Timestamp
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import RunningBroker, broker_with
from tests.broker.harness import SyncJournal

T = 10.0
FIXTURE = Path(__file__).parents[1] / "fixtures" / "rabbitmq_definitions.json"


def _users_file(tmp_path: Path) -> Path:
    users = tmp_path / "users.toml"
    add_user(users, "admin", "admin-pw", tags=["administrator"])
    add_user(users, "bob", "bob-pw")  # full access to '/', no tags
    return users


@contextmanager
def _start(tmp_path: Path, **kw: Any) -> Iterator[RunningBroker]:
    sasl = {"users_file": tmp_path / "users.toml", "allow_anonymous": False}
    with broker_with(tmp_path, sasl=sasl, **kw) as b:
        yield b


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    _users_file(tmp_path)
    with _start(tmp_path) as b:
        yield b


def connect(b: RunningBroker, user: str, password: str, vhost: str | None = None) -> amqp10.sync.Connection:
    kw = {} if vhost is None else {"hostname": f"vhost:{vhost}"}
    return amqp10.sync.connect(f"amqp://{user}:{password}@{b.url}", sasl_mechanisms=["PLAIN"], timeout=T, **kw)


def management(conn: amqp10.sync.Connection, operation: str, body: Any = None) -> tuple[int, Any]:
    reply = conn.request("$management", Message(body=body, application_properties={"operation": operation}), timeout=T)
    return (reply.application_properties or {})["status-code"], reply.body


def import_fixture(b: RunningBroker) -> dict[str, Any]:
    with connect(b, "admin", "admin-pw") as conn:
        status, outcome = management(conn, "import-definitions", FIXTURE.read_text())
    assert status == 200, outcome
    return dict(outcome)


def export(b: RunningBroker, user: str = "admin", password: str = "admin-pw") -> dict[str, Any]:
    with connect(b, user, password) as conn:
        status, text = management(conn, "export-definitions")
    assert status == 200, text
    return dict(json.loads(text))


def by_key(items: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(i[k] for k in keys): i for i in items}


def test_a_rabbitmq_export_imports_routes_exports_back_and_survives_a_restart(tmp_path: Path) -> None:
    _users_file(tmp_path)
    source = json.loads(FIXTURE.read_text())
    with _start(tmp_path) as b:
        outcome = import_fixture(b)
        assert outcome["imported"] == {
            "user": 3, "vhost": 2, "permission": 4, "exchange": 4, "policy": 1, "queue": 4, "binding": 6,
        }
        assert outcome["skipped"] == []
        assert outcome["warnings"] == ["$.global_parameters: 1 entry read; global parameters are not applied"]

        orders = b.broker.vhosts["orders"]
        assert {"orders.events", "orders.unrouted", "orders.dlx", "orders.by-region"} <= set(orders.exchanges)
        assert orders.exchanges["orders.events"].alternate == "orders.unrouted"
        created = orders.nodes["orders.created"]
        assert isinstance(created, Queue)
        # the policy applies, under the queue's own arguments
        assert created.policy.max_length == 100_000 and created.policy.overflow == "reject-publish"
        assert created.policy.max_priority == 10 and created.policy.dead_letter_exchange == "orders.dlx"
        assert orders.nodes["orders.audit"].kind == "stream"

        # the imported users log in at once; routing follows the imported bindings:
        # topic to a queue, topic to a headers exchange to a queue, '#' to a stream
        with connect(b, "guest", "guest", vhost="orders") as conn:
            sender = conn.open_sender("/exchanges/orders.events")
            for subject, region in (("order.eu.created", "us"), ("order.x.paid", "eu"), ("order.y.paid", "us")):
                message = Message(body=f"{subject} {region}", subject=subject, application_properties={"region": region})
                assert isinstance(sender.send(message), Accepted)
            r = conn.open_receiver("orders.created", credit=10)
            assert {r.receive(timeout=T).message.body for _ in range(2)} == {"order.eu.created us", "order.x.paid eu"}
        assert orders.nodes["orders.audit"].count == 3

        exported = export(b, "guest", "guest")
        assert exported["rabbit_version"] and exported["global_parameters"] == []
        for section, keys in {
            "exchanges": ("vhost", "name"),
            "queues": ("vhost", "name"),
            "policies": ("vhost", "name"),
            "bindings": ("vhost", "source", "destination", "routing_key"),
            "permissions": ("user", "vhost"),
        }.items():
            mine = [i for i in exported[section] if i.get("user") not in ("admin", "bob")]
            assert by_key(mine, *keys) == {
                k: {**v, **({"internal": False} if section == "exchanges" else {})}
                for k, v in by_key(source[section], *keys).items()
            }, section
        users = by_key(exported["users"], "name")
        for u in source["users"]:
            assert users[(u["name"],)]["password_hash"] == u["password_hash"]
            assert users[(u["name"],)]["tags"] == u["tags"]
        vhosts = by_key(exported["vhosts"], "name")
        assert vhosts[("orders",)]["metadata"] == source["vhosts"][1]["metadata"]

    # a restart: the store and the users file give back the same definitions
    with _start(tmp_path) as b:
        assert export(b, "guest", "guest") == exported
        orders = b.broker.vhosts["orders"]
        assert orders.nodes["orders.created"].policy.max_length == 100_000


def test_a_runtime_policy_applies_to_existing_queues_and_outranks_by_priority(broker: RunningBroker) -> None:
    import_fixture(broker)
    tasks = broker.broker.vhosts["/"].nodes["tasks"]
    assert isinstance(tasks, Queue) and tasks.policy.max_length == 5000
    small = {
        "policies": [
            {"vhost": "/", "name": "small", "pattern": "^tas", "apply-to": "queues",
             "definition": {"max-length": 2, "queue-mode": "lazy"}, "priority": 5},
            {"vhost": "/", "name": "big", "pattern": ".*", "definition": {"max-length": 3}, "priority": 1},
        ]
    }
    with connect(broker, "admin", "admin-pw") as conn:
        status, outcome = management(conn, "import-definitions", small)  # a map body works too
        assert status == 200 and outcome["imported"] == {"policy": 2}
        assert outcome["warnings"] == ["$.policies[0].definition.queue-mode: policy key not applied (kept for export)"]
        # the lower of the queue's x-max-length (5000) and the policy's wins; drop-head stays
        assert tasks.policy.max_length == 2 and tasks.policy.overflow == "drop-head"
        sender = conn.open_sender("tasks")
        for i in range(5):
            assert isinstance(sender.send(Message(body=i)), Accepted)
        assert tasks.count == 2
        r = conn.open_receiver("tasks", credit=10)
        assert [r.receive(timeout=T).message.body for _ in range(2)] == [3, 4]
        # a queue declared later gets the matching policy with the highest priority
        conn.open_sender("other").send(Message(body="x"))
        assert broker.broker.vhosts["/"].nodes["other"].policy.max_length == 3


def test_only_administrators_may_export_or_import(broker: RunningBroker) -> None:
    import_fixture(broker)
    before = export(broker)
    with connect(broker, "bob", "bob-pw") as conn:
        for operation, body in (("export-definitions", None), ("import-definitions", '{"vhosts": [{"name": "x"}]}')):
            status, reply = management(conn, operation, body)
            assert status == 403 and "administrator" in reply["error"]
    assert "x" not in broker.broker.vhosts
    assert export(broker) == before


def test_a_bad_document_is_a_bad_request(broker: RunningBroker) -> None:
    with connect(broker, "admin", "admin-pw") as conn:
        status, reply = management(conn, "import-definitions", "{not json")
        assert status == 400 and "not valid JSON" in reply["error"]
        status, reply = management(conn, "import-definitions", '{"queues": [{"name": "q"}]}')
        assert status == 400 and "vhost" in reply["error"]


def test_the_cli_imports_into_and_exports_from_a_running_broker(
    broker: RunningBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"amqp://admin:admin-pw@{broker.url}"
    assert cli_main(["definitions", "import", str(FIXTURE), "--url", url]) == 0
    out = capsys.readouterr().out
    assert "warning: $.global_parameters" in out and "imported into" in out and "4 queue(s)" in out
    assert "orders.events" in broker.broker.vhosts["orders"].exchanges
    target = tmp_path / "out.json"
    assert cli_main(["definitions", "export", str(target), "--url", url]) == 0
    assert {q["name"] for q in json.loads(target.read_text())["queues"]} == {
        "tasks", "orders.created", "orders.dead", "orders.audit",
    }
    # a user without the administrator tag: refused, exit code 2, one line
    bob = f"amqp://bob:bob-pw@{broker.url}"
    assert cli_main(["definitions", "export", str(target), "--url", bob]) == 2
    assert "export-definitions refused (403)" in capsys.readouterr().err


def test_definitions_file_is_imported_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    users = _users_file(tmp_path)
    caplog.set_level(logging.INFO, "amqp10.broker")
    with _start(tmp_path, definitions_file=FIXTURE) as b:
        assert "orders.created" in b.broker.vhosts["orders"].nodes
        assert "orders-limits" in b.broker.vhosts["orders"].policies
        assert export(b, "guest", "guest")["users"]
    assert "monitor" in read_users_file(users).users
    lines = [r.getMessage() for r in caplog.records if "definitions" in r.getMessage()]
    assert any("global parameters are not applied" in line for line in lines)
    assert any("imported" in line and "4 queues" in line for line in lines)


def test_a_bad_definitions_file_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "defs.json"
    bad.write_text('{"queues": [}')
    config = tmp_path / "broker.toml"
    config.write_text(
        f'definitions_file = "{bad}"\n'
        f'[store]\npath = "{tmp_path / "store.sqlite3"}"\n'
        '[[listeners]]\nhost = "127.0.0.1"\nport = 0\n[http]\nenabled = false\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "amqp10.cli", "broker", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert str(bad) in last and "not valid JSON" in last
    assert "listening" not in done.stderr


@pytest.mark.anyio
async def test_the_service_refuses_to_start_on_a_missing_definitions_file(tmp_path: Path) -> None:
    from tests.broker.conftest import make_config

    service = BrokerService(make_config(tmp_path, definitions_file=tmp_path / "nope.json"))
    with pytest.raises(DefinitionsError, match=r"definitions file not found: .*nope\.json"):
        await service.run()


# -- the core's policies, without a network ---------------------------------------------------


def test_policies_combine_with_arguments_as_in_rabbitmq() -> None:
    broker = Broker(BrokerConfig())
    v = broker.default
    q = v.declare_queue("jobs", arguments={"x-max-length": 10, "x-dead-letter-exchange": "mine"})
    v.declare_policy(RuntimePolicy("p", "^jobs$", "queues", {"max-length": 50, "dead-letter-exchange": "theirs", "message-ttl": 1000}))
    assert isinstance(q, Queue)
    assert q.policy.max_length == 10  # the lower wins
    assert q.policy.dead_letter_exchange == "mine"  # the queue's argument wins
    assert q.policy.message_ttl == 1.0  # what the queue does not say, the policy does
    v.declare_policy(RuntimePolicy("exchanges-only", ".*", "exchanges", {"max-length": 1}, priority=9))
    assert q.policy.max_length == 10
    v.delete_policy("p")
    assert q.policy.message_ttl is None and q.policy == v.queue_policy("jobs", "queue", q.arguments)
    with pytest.raises(PreconditionFailed, match="max-length"):
        v.declare_policy(RuntimePolicy("bad", ".*", "queues", {"max-length": "lots"}))
    with pytest.raises(PreconditionFailed, match="apply-to"):
        v.declare_policy(RuntimePolicy("bad", ".*", "queue", {}))
    with pytest.raises(PreconditionFailed, match="regular expression"):
        v.declare_policy(RuntimePolicy("bad", "(", "all", {}))
    assert set(v.policies) == {"exchanges-only"}


def test_policies_and_vhosts_are_kept_in_the_store(open_store: Callable[[], st.SqlStore]) -> None:
    store = open_store()  # on each backend
    journal = SyncJournal(store)
    broker = Broker(BrokerConfig(), journal=journal)
    v = broker.add_vhost("shop")
    v.set_metadata({"description": "the shop"})
    v.declare_policy(RuntimePolicy("p", "^q", "queues", {"max-length": 4}, priority=2))
    v.declare_queue("q1")
    broker.default.declare_policy(RuntimePolicy("gone", ".*", "all", {}))
    broker.default.delete_policy("gone")
    again = Broker(BrokerConfig())
    again.recover(store)
    shop = again.vhosts["shop"]
    assert shop.metadata == {"description": "the shop"}
    assert shop.policies["p"] == RuntimePolicy("p", "^q", "queues", {"max-length": 4}, priority=2)
    assert shop.nodes["q1"].policy.max_length == 4
    assert again.default.policies == {}


def test_a_version_2_store_gains_the_policy_and_vhost_tables(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = st.Store(path)
    store.apply([(st.NODE, "/", "kept", "queue", "{}")])
    store._db.executescript("DROP TABLE policies; DROP TABLE vhosts; PRAGMA user_version = 2;")
    store.close()
    migrated = st.Store(path)
    assert migrated.migrated_from == 2
    migrated.apply([(st.POLICY, "/", "p", ".*", "all", "{}", 0), (st.VHOST, "v", "{}")])
    loaded = migrated.load()
    assert [n.name for n in loaded.nodes] == ["kept"]
    assert [p.name for p in loaded.policies] == ["p"] and [h.name for h in loaded.vhosts] == ["v"]
    migrated.close()
    assert st.Store(path).migrated_from is None


def test_imported_users_keep_the_users_file_consistent(broker: RunningBroker, tmp_path: Path) -> None:
    import_fixture(broker)
    # the file the broker wrote is one `amqp10 users` can change, and the admin is still there
    users = tmp_path / "users.toml"
    update_users_file(users, lambda u: None)
    names = set(read_users_file(users).users)
    assert names == {"admin", "bob", "guest", "orders-app", "monitor"}


def test_listings_leave_out_what_definitions_cannot_recreate() -> None:
    broker = Broker(BrokerConfig())
    v = broker.default
    v.declare_exchange("x", "direct")
    v.declare_queue("kept", arguments={"x-max-length": 3})
    v.declare_queue("mine", exclusive_owner=object())
    v.create_dynamic()
    v.create_node("news", "topic")
    v.bind("x", "kept", "k")
    v.bind("x", "mine", "k")
    v.bind("amq.direct", "kept", "k")
    live = LiveDefinitions(broker)
    defs = live.export()
    assert [x.name for x in defs.exchanges] == ["x"]
    assert [(q.name, q.arguments) for q in defs.queues] == [("kept", {"x-max-length": 3})]
    assert [(b.source, b.destination) for b in defs.bindings] == [("x", "kept")]
    # without a users file, users and permissions are reported, not imported
    body = live.import_document(FIXTURE.read_bytes())
    assert "$.users: 3 users, 4 permissions not imported: the broker has no users file" in body["skipped"]
    assert "user" not in body["imported"] and body["imported"]["queue"] == 4


def test_policies_are_declared_and_deleted_through_management(broker: RunningBroker) -> None:
    policy = {"name": "short", "pattern": "^jobs$", "apply-to": "queues", "definition": {"message-ttl": 500}, "priority": 1}
    with connect(broker, "bob", "bob-pw") as conn:
        status, reply = management(conn, "declare-policy", policy)
        assert status == 403 and "policymaker" in reply["error"]
    with connect(broker, "admin", "admin-pw") as conn:
        conn.open_sender("jobs").send(Message(body="x"))
        jobs = broker.broker.default.nodes["jobs"]
        assert management(conn, "declare-policy", policy) == (201, {})
        assert jobs.policy.message_ttl == 0.5
        assert management(conn, "declare-policy", {**policy, "definition": {"message-ttl": "soon"}})[0] == 409
        assert management(conn, "delete-policy", {"name": "short"}) == (200, {})
        assert jobs.policy.message_ttl is None
        assert management(conn, "delete-policy", {"name": "short"})[0] == 404


def _pika(b: RunningBroker, vhost: str = "/") -> Any:
    import pika

    credentials = pika.PlainCredentials("admin", "admin-pw")
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, virtual_host=vhost, credentials=credentials))


TYPED_ARGUMENTS: dict[str, Any] = {
    "x-decimal": Decimal("1.50"),
    "x-stamp": datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
    "x-bytes": b"\xff\x00",
    "x-text-bytes": b"abc",
    "x-table": {"n": Decimal("2"), "s": "t", "deep": {"when": datetime(2024, 5, 1, tzinfo=UTC)}},
    "x-array": [Decimal("0.5"), 1, "two"],
    "x-plain": {"a": [1, True, "s"]},
}
"""0-9-1 arguments of types JSON has not (what pika sends them as: D, T, x, F, A), and plain ones."""


def test_typed_arguments_export_as_rabbitmq_writes_them_and_import_back_with_their_types(tmp_path: Path) -> None:
    """A definitions export with a 0-9-1 decimal, timestamp or byte array in a queue's,
    exchange's or binding's arguments (the export raised TypeError: every export, and the
    HTTP API's users and permissions read from it): written as RabbitMQ 3.10 writes them
    (rabbit_misc:amqp_table/1: numbers, a timestamp's seconds, a byte array's text or
    'Not UTF-8, base64 is: ...'), their types kept under amqp10_arguments, so that our own
    export imported into another broker declares the same queues, a 0-9-1 re-declaration
    with the same arguments equivalent."""
    (tmp_path / "a").mkdir()
    _users_file(tmp_path / "a")
    with _start(tmp_path / "a") as b:
        conn = _pika(b)
        ch = conn.channel()
        ch.exchange_declare("tx", "headers", durable=True, arguments={"x-decimal": Decimal("1.50")})
        ch.queue_declare("bound", durable=True)
        ch.queue_bind("bound", "tx", arguments={"x-match": "all", "when": datetime(2024, 5, 1, tzinfo=UTC)})
        assert export(b)["exchanges"]  # (raised TypeError: not JSON serializable)
        ch.queue_declare("typed", durable=True, arguments={"x-queue-type": "quorum", **TYPED_ARGUMENTS})
        conn.close()
        declared = dict(b.broker.default.nodes["typed"].arguments)
        exported = export(b)
    assert type(declared["x-decimal"]) is Decimal and type(declared["x-stamp"]) is Timestamp
    (queue,) = [q for q in exported["queues"] if q["name"] == "typed"]
    assert queue["type"] == "quorum"
    assert queue["arguments"] == {
        "x-queue-type": "quorum",
        "x-decimal": 1.5,
        "x-stamp": 1714564800,
        "x-bytes": "Not UTF-8, base64 is: /wA=",
        "x-text-bytes": "abc",
        "x-table": {"n": 2.0, "s": "t", "deep": {"when": 1714521600}},
        "x-array": [0.5, 1, "two"],
        "x-plain": {"a": [1, True, "s"]},
    }
    assert set(queue["amqp10_arguments"]) == {"x-decimal", "x-stamp", "x-bytes", "x-text-bytes", "x-table", "x-array"}
    (exchange,) = [x for x in exported["exchanges"] if x["name"] == "tx"]
    assert exchange["arguments"] == {"x-decimal": 1.5}
    (binding,) = [x for x in exported["bindings"] if x["source"] == "tx"]
    assert binding["arguments"] == {"x-match": "all", "when": 1714521600}

    (tmp_path / "b").mkdir()
    _users_file(tmp_path / "b")
    with _start(tmp_path / "b") as b:
        with connect(b, "admin", "admin-pw") as conn:
            status, outcome = management(conn, "import-definitions", json.dumps(exported))
        assert status == 200 and outcome["skipped"] == [], outcome
        typed_queue = b.broker.default.nodes["typed"]
        assert isinstance(typed_queue, Queue) and typed_queue.arguments == declared
        assert [type(v) for v in typed_queue.arguments.values()] == [type(v) for v in declared.values()]
        conn = _pika(b)
        ch = conn.channel()  # the same declarations again: equivalent, so answered
        ch.queue_declare("typed", durable=True, arguments={"x-queue-type": "quorum", **TYPED_ARGUMENTS})
        ch.exchange_declare("tx", "headers", durable=True, arguments={"x-decimal": Decimal("1.50")})
        conn.close()
        again = export(b)
    assert [q for q in again["queues"] if q["name"] == "typed"] == [queue]


def test_a_quorum_queue_imports_as_quorum_and_exports_so(broker: RunningBroker) -> None:
    """A definitions file's quorum queue (x-queue-type quorum, and a file that gives only
    "type": "quorum") is a quorum queue here: its x-queue-type was taken out on import (the
    queue came back classic, and a 0-9-1 client declaring it quorum was refused as
    inequivalent); exported with "type": "quorum" as RabbitMQ writes it."""
    document = {
        "queues": [
            {"name": "qq", "vhost": "/", "durable": True, "auto_delete": False,
             "arguments": {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3, "x-delivery-limit": 5}},
            {"name": "typed-only", "vhost": "/", "durable": True, "auto_delete": False, "type": "quorum", "arguments": {}},
            {"name": "sq", "vhost": "/", "durable": True, "auto_delete": False, "type": "stream",
             "arguments": {"x-queue-type": "stream", "x-max-age": "7D"}},
        ]
    }  # fmt: skip
    with connect(broker, "admin", "admin-pw") as conn:
        status, outcome = management(conn, "import-definitions", json.dumps(document))
    assert status == 200 and outcome["skipped"] == [] and outcome["warnings"] == [], outcome
    nodes = broker.broker.default.nodes
    assert nodes["qq"].arguments["x-queue-type"] == "quorum" and nodes["qq"].arguments["x-quorum-initial-group-size"] == 3
    assert nodes["typed-only"].arguments == {"x-queue-type": "quorum"}
    assert nodes["sq"].kind == "stream"
    conn = _pika(broker)
    ch = conn.channel()
    ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 3, "x-delivery-limit": 5})
    conn.close()
    queues = {q["name"]: q for q in export(broker)["queues"]}
    assert {n: queues[n]["type"] for n in ("qq", "typed-only", "sq")} == {"qq": "quorum", "typed-only": "quorum", "sq": "stream"}
    assert queues["qq"]["arguments"] == document["queues"][0]["arguments"]


def test_a_vhosts_default_queue_type_is_imported_and_exported_and_checked(broker: RunningBroker) -> None:
    """A vhost's metadata default_queue_type is kept, exported, and checked (RabbitMQ's
    invalid_queue_type); the file's queues are declared as written (RabbitMQ 3.10's import
    declares them without the host's default: rabbit_definitions:add_queue_int/3), a 0-9-1
    declaration in that host gets it (see test_rabbitmq_api)."""
    document = {
        "vhosts": [{"name": "qv", "metadata": {"default_queue_type": "quorum"}}, {"name": "bad", "metadata": {"default_queue_type": "mirrored"}},
                   {"name": "undef", "default_queue_type": "undefined", "metadata": {"default_queue_type": "undefined"}}],  # (RabbitMQ's export of none)
        "queues": [{"name": "plain", "vhost": "qv", "durable": True, "auto_delete": False, "arguments": {}}],
        "permissions": [{"user": "admin", "vhost": "qv", "configure": ".*", "write": ".*", "read": ".*"}],
    }  # fmt: skip
    with connect(broker, "admin", "admin-pw") as conn:
        status, outcome = management(conn, "import-definitions", json.dumps(document))
    assert status == 200 and outcome["imported"] == {"vhost": 2, "permission": 1, "queue": 1}, outcome
    assert "default_queue_type" not in broker.broker.vhosts["undef"].metadata
    assert [s.split(":")[0] for s in outcome["skipped"]] == ["$.vhosts[1]"] and "invalid_queue_type" in outcome["skipped"][0]
    assert "bad" not in broker.broker.vhosts
    assert broker.broker.vhosts["qv"].nodes["plain"].arguments == {}
    conn = _pika(broker, "qv")
    conn.channel().queue_declare("declared", durable=True)
    conn.close()
    assert broker.broker.vhosts["qv"].nodes["declared"].arguments == {"x-queue-type": "quorum"}
    exported = export(broker)
    (vhost,) = [v for v in exported["vhosts"] if v["name"] == "qv"]
    assert vhost["metadata"]["default_queue_type"] == "quorum" and vhost["default_queue_type"] == "quorum"
