"""``amqp10 admin`` run as subprocesses (``python -m amqp10.cli admin ...``) against a real
broker on 127.0.0.1, speaking the OASIS AMQP Management draft to its ``$management``."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp10 import errors
from amqp10.broker.users import add_user
from amqp10.sync import connect
from tests.broker.conftest import RunningBroker, make_config, start_broker
from tests.test_cli import amqp10, one_line_error

T = 10.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from start_broker(make_config(tmp_path_factory.mktemp("admin-broker")))


def run(url: str, *args: str) -> subprocess.CompletedProcess[Any]:
    """``amqp10 admin ARGS --url URL``."""
    return amqp10("admin", *args, "--url", url)


def admin(url: str, *args: str) -> str:
    """The output of a run that must succeed."""
    r = run(url, *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return str(r.stdout)


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_create_list_peek_purge_delete_a_queue(broker: RunningBroker) -> None:
    url = broker.url
    assert admin(url, "create", "queue", "adm-q", "durable:=false") == "created queue adm-q\n"
    assert amqp10("send", url, "adm-q", "first", "second", "third").returncode == 0
    rows = table(admin(url, "queues"))
    assert rows[0][:3] == ["NAME", "DEPTH", "CONSUMERS"]
    assert next(r for r in rows if r[0] == "adm-q")[:2] == ["adm-q", "3"]
    listed = json.loads(admin(url, "queues", "--json"))
    mine = next(q for q in listed if q["name"] == "adm-q")
    assert (mine["depth"], mine["durable"], mine["type"]) == (3, False, "queue")
    peeked = json.loads(admin(url, "peek", "adm-q", "--count", "2", "--json"))
    assert [m["body"] for m in peeked] == ["first", "second"]
    peeked = json.loads(admin(url, "peek", "adm-q", "--offset", "1", "--json"))
    assert [(m["position"], m["body"]) for m in peeked] == [(1, "second"), (2, "third")]
    assert table(admin(url, "peek", "adm-q"))[1][-1] == "first"
    assert admin(url, "get", "queue", "adm-q", "--json").count('"depth": 3') == 1
    assert admin(url, "purge", "adm-q") == "purged 3 message(s) from queue adm-q\n"
    assert json.loads(admin(url, "get", "queue", "adm-q", "--json"))["depth"] == 0
    assert admin(url, "delete", "queue", "adm-q") == "deleted queue adm-q\n"
    r = run(url, "get", "queue", "adm-q")
    assert one_line_error(r, "admin") == "amqp10 admin: READ queue adm-q: 404 no queue 'adm-q' in vhost '/'"


def test_exchanges_bindings_topics_policies(broker: RunningBroker) -> None:
    url = broker.url
    admin(url, "create", "queue", "adm-bq")
    assert admin(url, "create", "exchange", "adm-x", "exchange_type=topic") == "created exchange adm-x\n"
    assert "adm-x" in [r[0] for r in table(admin(url, "exchanges"))]
    admin(url, "create", "binding", "source=adm-x", "destination=adm-bq", "routing_key=a.*")
    (binding,) = [b for b in json.loads(admin(url, "bindings", "--json")) if b["source"] == "adm-x"]
    assert (binding["destination"], binding["routing_key"]) == ("adm-bq", "a.*")
    admin(url, "create", "topic", "adm-t")
    assert next(r for r in table(admin(url, "topics")) if r[0] == "adm-t")[:3] == ["adm-t", "0", "0"]
    admin(url, "create", "policy", "adm-p", "pattern=^adm-bq$", 'definition:={"max-length": 5}')
    assert admin(url, "update", "policy", "adm-p", "priority:=2") == "updated policy adm-p\n"
    (policy,) = [p for p in json.loads(admin(url, "policies", "--json")) if p["name"] == "adm-p"]
    assert (policy["priority"], policy["definition"]) == (2, {"max-length": 5})
    for kind, name in [("binding", binding["name"]), ("policy", "adm-p"), ("topic", "adm-t"), ("exchange", "adm-x"), ("queue", "adm-bq")]:
        assert admin(url, "delete", kind, name) == f"deleted {kind} {name}\n"
    types = table(admin(url, "types"))
    assert ["queue", "CREATE", "READ", "DELETE", "PURGE", "PEEK"] in types


def test_list_and_close_a_connection(broker: RunningBroker) -> None:
    url = broker.url
    with connect(url, container_id="adm-victim", timeout=T) as victim:
        victim.open_sender("adm-anything")
        conns = json.loads(admin(url, "connections", "--json"))
        (mine,) = [c for c in conns if c["container_id"] == "adm-victim"]
        assert (mine["protocol"], mine["links"]) == ("AMQP 1.0", 1)
        assert admin(url, "close-connection", mine["name"]) == f"closed connection {mine['name']}\n"
        with pytest.raises(errors.AMQPError) as info:
            victim.open_sender("adm-other", timeout=T)
        assert info.value.condition == "amqp:connection:forced"
    r = run(url, "close-connection", "no-such-connection")
    assert "404" in one_line_error(r, "admin")


def test_export_then_import_definitions(broker: RunningBroker, tmp_path: Path) -> None:
    url = broker.url
    admin(url, "create", "queue", "adm-durable")
    out = tmp_path / "defs.json"
    assert admin(url, "export", str(out)) == f"exported the definitions to {out}\n"
    defs = json.loads(out.read_text())
    assert "adm-durable" in [q["name"] for q in defs["queues"]]
    admin(url, "delete", "queue", "adm-durable")
    assert admin(url, "import", str(out)).startswith(f"imported into {url}: ")
    assert json.loads(admin(url, "get", "queue", "adm-durable", "--json"))["name"] == "adm-durable"
    assert json.loads(admin(url, "export", "-"))["queues"]


def test_errors_are_one_line(broker: RunningBroker) -> None:
    url = broker.url
    r = run(url, "get", "nonsense", "x")
    assert one_line_error(r, "admin").startswith("amqp10 admin: READ nonsense x: 404 unknown entity type 'nonsense'")
    r = run(url, "create", "queue", "adm-bad", "durable:=not json")
    assert "is not JSON" in one_line_error(r, "admin") and r.returncode == 2
    r = run(url, "create", "queue", "adm-bad", "durable=yes")
    assert "400 durable must be a boolean" in one_line_error(r, "admin")
    r = run(url, "peek", "adm-none", "--count", "1000000")
    assert "400" in one_line_error(r, "admin")
    r = run(url, "peek", "adm-none", "--offset", "-1")
    assert one_line_error(r, "admin") == "amqp10 admin: --offset must not be negative, not -1" and r.returncode == 2
    r = run(url, "create", "exchange", "amq.mine")
    assert "403" in one_line_error(r, "admin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run(f"127.0.0.1:{port}", "queues", "--timeout", "5")
    assert one_line_error(r, "admin") == f"amqp10 admin: could not connect to 127.0.0.1:{port}: connection refused"
    r = run("http://127.0.0.1", "queues")
    assert "unsupported URL scheme" in one_line_error(r, "admin") and r.returncode == 2


def test_credentials_in_the_url_and_tags(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    add_user(users, "boss", "boss-pw", tags=["administrator"])
    add_user(users, "bob", "bob-pw")
    config = make_config(tmp_path, sasl={"users_file": users, "allow_anonymous": False})
    for b in start_broker(config):
        assert "NAME" in admin(f"amqp://boss:boss-pw@{b.url}", "vhosts")
        r = run(f"amqp://bob:bob-pw@{b.url}", "queues")
        assert "403 listing queues needs the" in one_line_error(r, "admin")
        r = run(f"amqp://bob:wrong@{b.url}", "queues")
        one_line_error(r, "admin")


def test_another_virtual_host(broker: RunningBroker) -> None:
    url = broker.url
    assert admin(url, "create", "vhost", "adm-tenant", "description=for the CLI") == "created vhost adm-tenant\n"
    admin(url, "create", "queue", "adm-tenant-q", "--vhost", "adm-tenant")
    assert [r[0] for r in table(admin(url, "queues", "--vhost", "adm-tenant"))[1:]] == ["adm-tenant-q"]
    assert "adm-tenant-q" not in [r[0] for r in table(admin(url, "queues"))]
    (row,) = [r for r in json.loads(admin(url, "vhosts", "--json")) if r["name"] == "adm-tenant"]
    assert (row["queues"], row["description"]) == (1, "for the CLI")
