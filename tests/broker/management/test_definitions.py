"""RabbitMQ definitions files: parse, report unknown fields, import, export, round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amqp10.amqp091 import methods as m
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Stream
from amqp10.broker.definitions import (
    Definitions,
    DefinitionsError,
    InMemoryTopology,
    dump_definitions,
    export_definitions,
    import_definitions,
    load_definitions,
    parse_definitions,
)
from amqp10.broker.permissions import VhostPermissions
from amqp10.broker.topology import BrokerTopology
from amqp10.broker.users import UsersFile, add_user, read_users_file, write_users_file
from amqp10.cli import main
from amqp10.sasl.credentials import (
    PasswordHashCredential,
    ScramCredential,
    make_password_hash,
    verify_password,
)
from tests.broker.amqp091.test_amqp091_fuzz import InMemory

EXPORT = Path(__file__).parents[1] / "fixtures" / "rabbitmq_definitions.json"
IGNORED = ("topic_permissions", "parameters", "global_parameters")
VERSIONS = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")


def normalised(defs: Definitions) -> dict[str, Any]:
    """What must survive a round trip: everything applied, in a canonical form."""
    data = defs.model_dump(by_alias=True, exclude_none=True)
    for key in (*IGNORED, *VERSIONS):
        data.pop(key, None)
    data["vhosts"] = [v.canonical().model_dump(exclude_none=True) for v in defs.vhosts]
    for u in data["users"]:
        u.pop("limits")
    for items in data.values():  # an export lists by vhost: order is not kept
        items.sort(key=lambda item: json.dumps(item, sort_keys=True))
    return data


def test_a_rabbitmq_export_parses_with_only_the_ignored_parts_reported() -> None:
    defs, warnings = load_definitions(EXPORT)
    assert [str(w) for w in warnings] == [
        "$.global_parameters: 1 entry read; global parameters are not applied"
    ]
    assert [u.name for u in defs.users] == ["guest", "orders-app", "monitor"]
    assert defs.users[2].tags == ("monitoring", "management")
    assert defs.policies[0].apply_to == "queues"
    assert {b.destination_type for b in defs.bindings} == {"queue", "exchange"}


def test_round_trip_through_the_users_file_and_a_topology(tmp_path: Path) -> None:
    original, _ = load_definitions(EXPORT)
    users, topology = UsersFile(), InMemoryTopology()
    report = import_definitions(original, users, topology)
    assert report.errors == []
    assert report.summary() == (
        "3 users, 2 vhosts, 4 permissions, 4 exchanges, 1 policy, 4 queues, 6 bindings"
    )
    # the users file keeps the RabbitMQ hashes through a write and a read
    f = tmp_path / "users.toml"
    write_users_file(f, users)
    users = read_users_file(f)
    guest = users.users["guest"]
    assert guest.tags == ("administrator",)
    assert isinstance(guest.credentials[0], PasswordHashCredential)
    assert verify_password(guest.credentials[0], "guest")
    assert verify_password(users.users["monitor"].credentials[0], "monitor-pw")
    assert users.users["orders-app"].permissions["orders"] == VhostPermissions(
        r"^orders\..*", r"^(orders\..*|amq\.default)$", r"^orders\..*"
    )
    exported = export_definitions(users, topology)
    assert exported.product_name == "amqp10"
    assert normalised(exported) == normalised(original)
    # and the JSON text reads back to the same thing, with no warnings of its own
    again, warnings = parse_definitions(dump_definitions(exported))
    assert warnings == [] and normalised(again) == normalised(original)
    assert '"apply-to": "queues"' in dump_definitions(exported)


def test_unknown_fields_are_reported_with_their_path() -> None:
    data = json.loads(EXPORT.read_text())
    data["explanation"] = "from a newer RabbitMQ"
    data["users"][1]["password_expiry"] = 30
    data["vhosts"][1]["metadata"]["protected_from_deletion"] = True
    data["bindings"][0]["bound_at"] = "now"
    _, warnings = parse_definitions(data)
    unknown = [str(w) for w in warnings if "unknown field" in w.message]
    assert unknown == [
        "$.explanation: unknown field, ignored",
        "$.users[1].password_expiry: unknown field, ignored",
        "$.vhosts[1].metadata.protected_from_deletion: unknown field, ignored",
        "$.bindings[0].bound_at: unknown field, ignored",
    ]


def test_what_is_read_but_not_applied_is_reported() -> None:
    data = {
        "users": [
            {"name": "u", "password_hash": "", "tags": "administrator,impersonator,custom", "limits": {"max-connections": 5}}
        ],
        "vhosts": [{"name": "/", "limits": [{"max-queues": 3}]}],
        "topic_permissions": [{"user": "u", "vhost": "/", "exchange": "amq.topic", "write": ".*", "read": ".*"}],
        "parameters": [{"vhost": "/", "component": "shovel", "name": "s", "value": {}}],
        "queues": [
            {"name": "q", "vhost": "/", "arguments": {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}},
            {"name": "r", "vhost": "/", "type": "mirrored", "arguments": {"x-weird": 1}},
        ],
        "exchanges": [{"name": "x", "vhost": "/", "type": "direct", "arguments": {"x-weird": 1}}],
    }  # fmt: skip
    defs, warnings = parse_definitions(data)
    assert defs.users[0].tags == ("administrator", "impersonator", "custom")
    assert {w.path for w in warnings} == {
        "$.topic_permissions",
        "$.parameters",
        "$.users[0].limits",
        "$.users[0].tags",
        "$.vhosts[0].limits",
        "$.queues[1].arguments.x-weird",  # (a quorum queue and its arguments are taken: no warning)
        "$.queues[1]",
        "$.exchanges[0].arguments.x-weird",
    }
    assert any("'custom' has no meaning here" in str(w) for w in warnings)
    users = UsersFile()
    import_definitions(defs, users, InMemoryTopology())
    assert users.users["u"].tags == ("administrator", "impersonator")
    assert users.users["u"].credentials == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "a definitions document is a JSON object"),
        ('{"users": [{"password_hash": ""}]}', "users.0.name: Field required"),
        ('{"bindings": [{"source": "a", "vhost": "/", "destination": "b", "destination_type": "node"}]}',
         "bindings.0.destination_type"),
    ],
)  # fmt: skip
def test_bad_documents_give_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(DefinitionsError) as info:
        parse_definitions(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_import_skips_and_reports_what_cannot_be_applied() -> None:
    defs, _ = parse_definitions(
        {
            "users": [{"name": "bad", "password_hash": "AAAA"}],
            "vhosts": [{"name": "/"}],
            "permissions": [
                {"user": "ghost", "vhost": "/", "configure": "", "write": "", "read": ""}
            ],
            "exchanges": [
                {"name": "amq.direct", "vhost": "/", "type": "direct"},
                {"name": "x", "vhost": "/", "type": "x-consistent-hash"},
                {"name": "y", "vhost": "nowhere", "type": "fanout"},
            ],
            "bindings": [
                {"source": "z", "vhost": "/", "destination": "q", "destination_type": "queue"}
            ],
        }
    )
    users = UsersFile()
    report = import_definitions(defs, users, InMemoryTopology())
    assert report.errors == [
        "$.users[0]: salt must be 4 bytes long",
        "$.permissions[0]: no user 'ghost'",
        "$.exchanges[0]: amq.direct is predeclared, skipped",
        "$.exchanges[1]: exchange type 'x-consistent-hash' not supported",
        "$.exchanges[2]: no vhost 'nowhere'",
        "$.bindings[0]: no exchange 'z' in vhost '/'",
    ]
    assert report.summary() == "1 vhost" and users.users == {}


def test_plain_password_on_import_becomes_scram_and_is_never_kept(tmp_path: Path) -> None:
    defs, _ = parse_definitions(
        {"users": [{"name": "kolla", "password": "pa55", "tags": "management"}]}
    )
    users = UsersFile()
    import_definitions(defs, users, InMemoryTopology())
    f = tmp_path / "users.toml"
    write_users_file(f, users)
    assert "pa55" not in f.read_text()
    creds = read_users_file(f).users["kolla"].credentials
    assert creds and all(isinstance(c, ScramCredential) for c in creds)
    assert verify_password(creds[1], "pa55")


def test_scram_users_export_with_their_credentials_beside_an_empty_hash(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16, tags=["management"])
    users = read_users_file(f)
    exported = export_definitions(users, InMemoryTopology())
    (alice,) = exported.users
    assert alice.password_hash == "" and alice.amqp10_credentials is not None
    assert len(alice.amqp10_credentials) == 3
    # importing that export gives alice back, able to log in with SCRAM
    back = UsersFile()
    import_definitions(exported, back, InMemoryTopology())
    assert back.users["alice"].credentials == users.users["alice"].credentials
    assert back.users["alice"].permissions == {"/": users.users["alice"].permissions["/"]}


def test_import_replaces_users_but_keeps_their_other_permissions() -> None:
    users = UsersFile()
    users.users["guest"] = read_fixture_user()
    defs, _ = parse_definitions({"users": [{"name": "guest", "password_hash": "", "tags": []}]})
    import_definitions(defs, users, InMemoryTopology())
    assert users.users["guest"].credentials == [] and users.users["guest"].permissions


def read_fixture_user() -> Any:
    defs, _ = load_definitions(EXPORT)
    users = UsersFile()
    import_definitions(defs, users, InMemoryTopology())
    return users.users["guest"]


# -- amqp10 definitions check ------------------------------------------------------------------


def test_cli_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "check", str(EXPORT)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "warning: $.global_parameters: 1 entry read; global parameters are not applied",
        "would import: 3 users, 2 vhosts, 4 permissions, 4 exchanges, 1 policy, 4 queues, 6 bindings",
    ]
    f = tmp_path / "users.toml"
    add_user(f, "guest", "pw", iterations=16)
    assert main(["definitions", "check", str(EXPORT), "--users-file", str(f)]) == 0
    assert f"would replace user 'guest' of {f}" in capsys.readouterr().out

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"bindings": [{"source": "x", "vhost": "/", "destination": "q", "destination_type": "queue", "extra": 1}]}))  # fmt: skip
    assert main(["definitions", "check", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "warning: $.bindings[0].extra: unknown field, ignored" in out
    # check asks a broker core in memory: '/' exists, the exchange does not
    assert "would skip: $.bindings[0]: no exchange 'x' in vhost '/'" in out
    # ... and the core refuses what a running broker would refuse
    policy = {"vhost": "/", "name": "p", "pattern": ".*", "definition": {"max-length": "many"}}
    queue = {"vhost": "/", "name": "q", "arguments": {"x-max-priority": 1000}}
    bad.write_text(json.dumps({"policies": [policy], "queues": [queue]}))
    assert main(["definitions", "check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "would skip: $.policies[0]: policy 'p' in vhost '/': x-max-length must be a non-negative integer" in out
    assert "would skip: $.queues[0]: invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,1000}" in out

    assert main(["definitions", "check", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.startswith("amqp10 definitions: definitions file not found")


class CoreRefusal(Exception):
    """Stands for the core's own error classes (not ValueError)."""


class RefusingTopology(InMemoryTopology):
    def declare_queue(self, queue: Any) -> None:
        raise CoreRefusal(f"queue {queue.name!r} refused")


def test_a_streams_retention_is_imported_with_it_and_it_is_declared_again_as_it_was() -> None:
    """``x-max-age`` is a stream's retention (its policy's ``max_age_seconds``): imported
    with the stream, not reported as unsupported; a 0-9-1 client that declares the stream
    again with it is answered (its arguments were dropped on import: it was refused 406)."""
    stream = {"x-queue-type": "stream", "x-max-age": "7D", "x-max-length-bytes": 10_000}
    defs, warnings = parse_definitions(
        {"vhosts": [{"name": "/"}], "queues": [{"name": "s", "vhost": "/", "durable": True, "arguments": stream}]}
    )
    assert warnings == []
    broker = Broker(BrokerConfig())
    report = import_definitions(defs, UsersFile(), BrokerTopology(broker))
    assert report.errors == []
    s = broker.default.nodes["s"]
    assert isinstance(s, Stream) and s.policy.max_age_seconds == 7 * 86400
    assert broker.default.stream_arguments["s"] == stream
    pair = InMemory(broker)
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="s", durable=True, arguments=stream))
    assert [type(e.method).__name__ for e in pair.client_events if hasattr(e, "method")][-1] == "QueueDeclareOk"


def test_the_cores_own_refusals_are_reported_when_named() -> None:
    defs, _ = parse_definitions(
        {"vhosts": [{"name": "/"}], "queues": [{"name": "q", "vhost": "/"}]}
    )
    report = import_definitions(defs, UsersFile(), RefusingTopology(), refused=(CoreRefusal,))
    assert report.errors == ["$.queues[0]: queue 'q' refused"]
    with pytest.raises(CoreRefusal):  # not named: a bug, not a refusal
        import_definitions(defs, UsersFile(), RefusingTopology())


@pytest.mark.parametrize(
    ("version", "algorithm"),
    [
        ("3.5.7", "rabbit_password_hashing_md5"),
        ("3.0.0", "rabbit_password_hashing_md5"),
        ("3.6.0", "rabbit_password_hashing_sha256"),
        ("3.13.7", "rabbit_password_hashing_sha256"),
        (None, "rabbit_password_hashing_sha256"),
    ],
)
def test_a_hash_without_algorithm_is_read_as_rabbitmq_would(
    version: str | None, algorithm: str
) -> None:
    cred = make_password_hash("pw", algorithm)
    doc: dict[str, Any] = {
        "users": [{"name": "old", "password_hash": cred.to_rabbit(), "tags": ""}]
    }
    if version is not None:
        doc["rabbit_version"] = version
    defs, _ = parse_definitions(doc)
    users = UsersFile()
    assert import_definitions(defs, users, InMemoryTopology()).errors == []
    (got,) = users.users["old"].credentials
    assert isinstance(got, PasswordHashCredential) and got.algorithm == algorithm
    assert got.verify("pw")


def test_a_cleartext_password_wins_over_a_hash_as_in_rabbitmq() -> None:
    doc = {
        "users": [
            {"name": "u", "password": "new", "password_hash": make_password_hash("old").to_rabbit()}
        ]
    }
    defs, _ = parse_definitions(doc)
    users = UsersFile()
    import_definitions(defs, users, InMemoryTopology())
    assert all(isinstance(c, ScramCredential) for c in users.users["u"].credentials)
    assert verify_password(users.users["u"].credentials[0], "new")


def test_cli_import_then_export_the_users_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16)
    secret = read_users_file(f).secret
    assert main(["definitions", "import", str(EXPORT), "--users-file", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [
        f"imported into {f}: 3 users, 4 permissions",
        "not imported (they need a running broker): 2 vhosts, 4 exchanges, 1 policy, 4 queues, 6 bindings",
    ]
    users = read_users_file(f)
    assert list(users.users) == ["alice", "guest", "orders-app", "monitor"]
    assert users.secret == secret
    assert verify_password(users.users["guest"].credentials[0], "guest")

    out_file = tmp_path / "export.json"
    assert main(["definitions", "export", str(out_file), "--users-file", str(f)]) == 0
    exported, warnings = load_definitions(out_file)
    assert warnings == []
    original, _ = load_definitions(EXPORT)
    alice = {"user": "alice", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    expected = [*normalised(original)["permissions"], alice]
    assert normalised(exported)["permissions"] == sorted(
        expected, key=lambda p: json.dumps(p, sort_keys=True)
    )
    # vhosts that permissions name are there, so that RabbitMQ can import the file
    assert sorted(v.name for v in exported.vhosts) == ["/", "orders"]
    assert main(["definitions", "export", "-", "--users-file", str(f)]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(out_file.read_text())


def test_cli_import_writes_nothing_when_a_user_entry_is_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"users": [{"name": "u", "password_hash": "AAAA"}]}))
    f = tmp_path / "users.toml"
    assert main(["definitions", "import", str(bad), "--users-file", str(f)]) == 1
    captured = capsys.readouterr()
    assert "would skip: $.users[0]: salt must be 4 bytes long" in captured.out
    assert captured.err == f"amqp10 definitions: nothing written to {f}: fix the entries above\n"
    assert not f.exists()
