"""RabbitMQ's own ``rabbitmqadmin`` (Debian's ``rabbitmq-server`` ships it) drives the broker
through its HTTP API: declare, list, publish, get, export, import, delete.

The script is run as it is, with the system's Python, against a broker on 127.0.0.1 with a
users file (an administrator, a user without tags); the same commands also run on a quick
start broker (no users file) from loopback with RabbitMQ's ``guest``/``guest``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqp10.broker.users import add_user
from tests.broker.conftest import RunningBroker, broker_with

RABBITMQADMIN = shutil.which("rabbitmqadmin") or next(
    (p for p in ("/usr/sbin/rabbitmqadmin", "/usr/bin/rabbitmqadmin") if Path(p).exists()),
    None,
)
pytestmark = pytest.mark.skipif(
    RABBITMQADMIN is None,
    reason="rabbitmqadmin is not installed (Debian: apt-get install rabbitmq-server, "
    "listed in .ci/debian-packages)",
)
T = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    users = tmp_path_factory.mktemp("admin-users") / "users.toml"
    add_user(users, "admin", "s3cret", tags=["administrator"], iterations=1000)
    add_user(users, "plain", "hunter2", iterations=1000)
    with broker_with(
        tmp_path_factory.mktemp("admin-broker"),
        sasl={"users_file": users},
        security={"login_delay_base": 0.0},
    ) as b:
        yield b


def admin(
    b: RunningBroker, *args: str, user: str = "admin", password: str = "s3cret", ok: bool = True
) -> str:
    """Run ``rabbitmqadmin ARGS`` against ``b``; its standard output (fails the test on a
    non-zero exit unless ``ok`` is False)."""
    assert RABBITMQADMIN is not None and b.service.http_port is not None
    cmd = [RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(b.service.http_port),
           "-u", user, "-p", password, *args]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=T, check=False)
    if ok:
        assert r.returncode == 0, f"{' '.join(args)}: {r.stdout} {r.stderr}"
    return r.stdout if ok else r.stdout + r.stderr


def listed(b: RunningBroker, what: str, *args: str) -> list[dict[str, object]]:
    out = json.loads(admin(b, "-f", "raw_json", "list", what, *args))
    assert isinstance(out, list)
    return out


def test_declare_publish_get_delete(broker: RunningBroker) -> None:
    admin(broker, "declare", "exchange", "name=orders", "type=direct")
    admin(broker, "declare", "queue", "name=orders.eu", "durable=true")
    admin(broker, "declare", "binding", "source=orders", "destination=orders.eu", "routing_key=eu")

    queues = {q["name"]: q for q in listed(broker, "queues")}
    assert queues["orders.eu"]["durable"] is True and queues["orders.eu"]["messages"] == 0
    exchanges = {x["name"]: x for x in listed(broker, "exchanges")}
    assert exchanges["orders"]["type"] == "direct"
    bindings = listed(broker, "bindings")
    assert {"source": "orders", "destination": "orders.eu", "routing_key": "eu"}.items() <= next(
        b for b in bindings if b["source"] == "orders"
    ).items()

    out = admin(broker, "publish", "exchange=orders", "routing_key=eu", "payload=hello")
    assert "Message published" in out and "NOT routed" not in out
    out = admin(broker, "publish", "exchange=orders", "routing_key=nowhere", "payload=x")
    assert "NOT routed" in out
    admin(broker, "publish", "routing_key=orders.eu", "payload=second",
          'properties={"content_type": "text/plain", "headers": {"k": "v"}}')  # fmt: skip
    assert {q["name"]: q for q in listed(broker, "queues")}["orders.eu"]["messages"] == 2

    # ack_requeue_true (the default) leaves them there, now redelivered
    got = json.loads(admin(broker, "-f", "raw_json", "get", "queue=orders.eu", "count=2"))
    assert [m["payload"] for m in got] == ["hello", "second"]
    assert [m["message_count"] for m in got] == [1, 0]
    assert got[0]["exchange"] == "orders" and got[0]["routing_key"] == "eu"
    assert got[1]["properties"]["content_type"] == "text/plain"
    assert got[1]["properties"]["headers"] == {"k": "v"}
    got = json.loads(
        admin(broker, "-f", "raw_json", "get", "queue=orders.eu", "ackmode=ack_requeue_false")
    )
    assert got[0]["payload"] == "hello" and got[0]["redelivered"] is True
    assert {q["name"]: q for q in listed(broker, "queues")}["orders.eu"]["messages"] == 1

    admin(broker, "purge", "queue", "name=orders.eu")
    assert {q["name"]: q for q in listed(broker, "queues")}["orders.eu"]["messages"] == 0
    admin(broker, "delete", "binding", "source=orders", "destination_type=queue",
          "destination=orders.eu", "properties_key=eu")  # fmt: skip
    assert not [b for b in listed(broker, "bindings") if b["source"] == "orders"]
    admin(broker, "delete", "queue", "name=orders.eu")
    admin(broker, "delete", "exchange", "name=orders")
    assert "orders.eu" not in {q["name"] for q in listed(broker, "queues")}


def test_export_then_import(broker: RunningBroker, tmp_path: Path) -> None:
    admin(broker, "declare", "queue", "name=kept", 'arguments={"x-max-length": 5}')
    admin(broker, "declare", "policy", "name=short", "pattern=^kept$",
          'definition={"message-ttl": 60000}', "apply-to=queues")  # fmt: skip
    exported = tmp_path / "defs.json"
    admin(broker, "export", str(exported))
    document = json.loads(exported.read_text())
    assert {q["name"] for q in document["queues"]} >= {"kept"}
    assert "admin" in {u["name"] for u in document["users"]}
    assert [p["name"] for p in document["policies"]] == ["short"]

    admin(broker, "delete", "queue", "name=kept")
    admin(broker, "delete", "policy", "name=short")
    document["queues"].append({"name": "imported", "vhost": "/", "durable": True,
                               "auto_delete": False, "arguments": {}})  # fmt: skip
    exported.write_text(json.dumps(document))
    admin(broker, "import", str(exported))
    queues = {q["name"]: q for q in listed(broker, "queues")}
    assert queues["kept"]["arguments"] == {"x-max-length": 5}
    assert "imported" in queues
    assert [p["name"] for p in listed(broker, "policies")] == ["short"]


def test_show_overview_and_lists(broker: RunningBroker) -> None:
    overview = json.loads(admin(broker, "-f", "raw_json", "show", "overview"))[0]
    assert overview["rabbitmq_version"] and "queues" in overview["object_totals"]
    assert {v["name"] for v in listed(broker, "vhosts")} >= {"/"}
    assert {"admin", "plain"} <= {u["name"] for u in listed(broker, "users")}
    assert listed(broker, "connections") == [] or isinstance(listed(broker, "connections"), list)
    admin(broker, "list", "channels")
    admin(broker, "list", "nodes")


def test_vhosts_users_and_permissions(broker: RunningBroker) -> None:
    admin(broker, "declare", "vhost", "name=staging")
    assert "staging" in {v["name"] for v in listed(broker, "vhosts")}
    admin(broker, "declare", "user", "name=ops", "password=opspw", "tags=management")
    admin(broker, "declare", "permission", "vhost=staging", "user=ops",
          "configure=.*", "write=.*", "read=.*")  # fmt: skip
    assert {"user": "ops", "vhost": "staging"}.items() <= next(
        p for p in listed(broker, "permissions") if p["user"] == "ops"
    ).items()
    # the new user drives rabbitmqadmin in its host
    admin(broker, "-V", "staging", "declare", "queue", "name=work", user="ops", password="opspw")
    assert ("staging", "work") in {(q["vhost"], q["name"]) for q in listed(broker, "queues")}
    assert [q["name"] for q in listed(broker, "queues", "-V", "staging")] == ["work"]
    admin(broker, "delete", "permission", "vhost=staging", "user=ops")
    admin(broker, "delete", "user", "name=ops")
    assert "ops" not in {u["name"] for u in listed(broker, "users")}


def test_refusals(broker: RunningBroker) -> None:
    out = admin(broker, "list", "queues", password="wrong", ok=False)
    assert "Access refused" in out
    out = admin(broker, "list", "queues", user="plain", password="hunter2", ok=False)
    assert "Access refused" in out  # no management tag
    out = admin(broker, "declare", "queue", "name=x", "durable=nope", ok=False)
    assert "durable" in out  # a 400 with RabbitMQ's reason


def test_quick_start_guest_from_loopback(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:  # no users file: anonymous allowed
        admin(b, "declare", "queue", "name=q", user="guest", password="guest")
        admin(b, "publish", "routing_key=q", "payload=hi", user="guest", password="guest")
        got = json.loads(
            admin(
                b,
                "-f",
                "raw_json",
                "get",
                "queue=q",
                "ackmode=ack_requeue_false",
                user="guest",
                password="guest",
            )
        )
        assert got[0]["payload"] == "hi"
