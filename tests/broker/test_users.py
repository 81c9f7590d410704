"""The broker's users file: hashed credentials, tags, permissions, clear errors; and
``amqp10 users`` with every verb."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amqp10.broker.config import SaslConfig
from amqp10.broker.permissions import FULL_ACCESS, KNOWN_TAGS, VhostPermissions
from amqp10.broker.users import (
    User,
    UsersFile,
    UsersFileError,
    add_user,
    load_access,
    load_users,
    read_users_file,
    write_users_file,
)
from amqp10.cli import main
from amqp10.sasl.credentials import (
    PasswordHashCredential,
    format_credential,
    make_password_hash,
    verify_password,
)


def test_add_then_load_verifies_password_and_stores_no_plain_text(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "s3cret", iterations=16)
    add_user(f, "bob", "hunter2", iterations=16)
    text = f.read_text()
    assert "s3cret" not in text and "hunter2" not in text
    store = load_users(f)
    cred = store.lookup("alice", "SCRAM-SHA-256")
    assert cred is not None and verify_password(cred, "s3cret")
    assert not verify_password(cred, "wrong")
    assert store.lookup("bob", "SCRAM-SHA-1") is not None
    assert store.lookup("carol", "SCRAM-SHA-256") is None
    assert os.stat(f).st_mode & 0o777 == 0o600


def test_decoys_are_stable_across_loads(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16)
    a = load_users(f).decoy("nobody", "SCRAM-SHA-256")
    b = load_users(f).decoy("nobody", "SCRAM-SHA-256")
    assert a.salt == b.salt


OLD_FILE = """\
secret = "00112233"

[users.alice]
credentials = ["{cred}"]
"""


def test_an_old_file_gives_its_users_full_permissions_on_slash(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    cred = format_credential(make_password_hash("pw"))
    f.write_text(OLD_FILE.format(cred=cred))
    users = read_users_file(f)
    assert users.users["alice"].tags == ()
    assert users.users["alice"].permissions == {"/": FULL_ACCESS}
    checker = users.permission_checker()
    assert checker.allowed("alice", "/", "configure", "queue", "anything")
    assert not checker.vhost_access("alice", "other")
    # rewriting makes the meaning explicit, and keeps secret and hashes
    add_user(f, "bob", "pw2", iterations=16, permissions={})
    data = tomllib.loads(f.read_text())
    assert data["secret"] == "00112233"
    assert data["users"]["alice"]["credentials"] == [cred]
    assert data["users"]["alice"]["permissions"] == {
        "/": {"configure": ".*", "write": ".*", "read": ".*"}
    }
    assert data["users"]["bob"]["permissions"] == {}
    again = read_users_file(f)
    assert again.users["bob"].permissions == {}
    assert again.users["alice"].permissions == {"/": FULL_ACCESS}


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16, tags=["administrator", "monitoring"])
    users = read_users_file(f)
    odd = 'we"ird\\ name\n\t/é'
    users.users["alice"].permissions[odd] = VhostPermissions(r"^amq\.gen-.*$", "", r"a|b")
    users.users["alice"].credentials.append(
        make_password_hash("pw", "rabbit_password_hashing_sha512")
    )
    write_users_file(f, users)
    again = read_users_file(f)
    assert again == users
    store = again.credential_store()
    plain = store.lookup("alice", "PLAIN")
    assert isinstance(plain, PasswordHashCredential) and plain.verify("pw")


def test_add_keeps_tags_and_permissions_of_an_existing_user(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    assert add_user(f, "alice", "pw", iterations=16, tags=["management"], permissions={})
    assert not add_user(f, "alice", "new", iterations=16)
    alice = read_users_file(f).users["alice"]
    assert alice.tags == ("management",) and alice.permissions == {}
    cred = load_users(f).lookup("alice", "SCRAM-SHA-256")
    assert cred is not None and verify_password(cred, "new")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("users = 3", "users: Input should be a valid dictionary"),
        ('[users.alice]\ncredentials = ["nonsense"]', "users.alice.credentials[0]"),
        ("[users.alice]\ncredentials = []\ntags = ['root']", "unknown tag(s) root"),
        (
            "[users.alice]\ncredentials = []\n[users.alice.permissions.'/']\nconfigure = '('\nwrite = ''\nread = ''",
            "users.alice.permissions./.configure",
        ),
        (
            "[users.alice]\ncredentials = []\npermisions = {}",
            "users.alice.permisions: Extra inputs",
        ),
        ("secret = 'xyz'", "secret must be a hex string"),
        (
            '[users.alice]\ncredentials = ["rabbit_password_hashing_sha256$AAAA"]',
            "bad rabbit_password_hashing_sha256 credential",
        ),
        ("not toml ===", "not valid TOML"),
    ],
)
def test_bad_files_give_one_line_errors(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "users.toml"
    f.write_text(content)
    with pytest.raises(UsersFileError) as info:
        load_users(f)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_user_without_credentials_is_allowed(tmp_path: Path) -> None:
    # e.g. imported from RabbitMQ with an empty password_hash: EXTERNAL only
    f = tmp_path / "users.toml"
    f.write_text("[users.cert-user]\ncredentials = []\n")
    assert load_users(f).lookup("cert-user", "PLAIN") is None


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsersFileError, match="not found"):
        load_users(tmp_path / "nope.toml")


def test_load_access(tmp_path: Path) -> None:
    store, checker = load_access(SaslConfig())
    assert store is None and checker.allowed("x", "any", "configure", "queue", "q")
    f = tmp_path / "users.toml"
    add_user(f, "guest", "pw", iterations=16, permissions={"/": VhostPermissions("", "", ".*")})
    store, checker = load_access(SaslConfig(users_file=f, anonymous_user="guest"))
    assert store is not None and store.lookup("guest", "SCRAM-SHA-256") is not None
    assert checker.allowed(None, "/", "read", "queue", "q")
    assert not checker.allowed(None, "/", "write", "exchange", "")
    with pytest.raises(UsersFileError, match="anonymous_user 'ghost' is not one of its users"):
        load_access(SaslConfig(users_file=f, anonymous_user="ghost"))
    with pytest.raises(ValueError, match="anonymous_user needs users_file"):
        SaslConfig(anonymous_user="guest")


# -- amqp10 users ------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["users", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_every_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(tmp_path / "users.toml")
    code, out, _ = run(capsys, "add", f, "alice", "--password", "pw", "--iterations", "16")
    assert code == 0 and "added alice" in out and "full permissions on vhost '/'" in out
    code, out, _ = run(
        capsys, "add", f, "bob", "--password", "pw", "--iterations", "16", "--no-permissions",
        "--tags", "monitoring",
    )  # fmt: skip
    assert code == 0 and "no permissions" in out
    secret = tomllib.loads(Path(f).read_text())["secret"]

    assert run(capsys, "set-tags", f, "alice", "administrator", "management")[0] == 0
    code, out, _ = run(capsys, "list", f)
    assert out.splitlines() == ["alice\t[administrator, management]", "bob\t[monitoring]"]

    code, out, _ = run(
        capsys, "set-permissions", "--vhost", "orders", f, "bob", "", r"orders\..*", ".*"
    )
    assert code == 0 and "orders" in out
    code, out, _ = run(capsys, "list-permissions", "--vhost", "orders", f)
    assert out.splitlines() == ["user\tconfigure\twrite\tread", "bob\t\torders\\..*\t.*"]
    code, out, _ = run(capsys, "list-permissions", f)
    assert out.splitlines() == ["user\tconfigure\twrite\tread", "alice\t.*\t.*\t.*"]

    users = read_users_file(Path(f))
    assert users.users["bob"].permissions == {"orders": VhostPermissions("", r"orders\..*", ".*")}

    assert run(capsys, "clear-permissions", f, "alice")[0] == 0
    assert read_users_file(Path(f)).users["alice"].permissions == {}
    code, _, err = run(capsys, "clear-permissions", f, "alice")
    assert code == 2 and err == "amqp10 users: alice has no permissions on vhost '/'\n"

    assert run(capsys, "set-tags", f, "alice")[0] == 0  # no tags: cleared
    assert read_users_file(Path(f)).users["alice"].tags == ()

    code, out, _ = run(capsys, "delete", f, "alice")
    assert code == 0 and "deleted alice" in out
    data = tomllib.loads(Path(f).read_text())
    assert list(data["users"]) == ["bob"] and data["secret"] == secret
    assert [p.name for p in tmp_path.iterdir()] == ["users.toml"]  # no temporary files left


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["delete", "{f}", "ghost"], "no user 'ghost'"),
        (["set-tags", "{f}", "alice", "root"], "unknown tag(s) root"),
        (["set-tags", "{f}", "ghost", "management"], "no user 'ghost'"),
        (
            ["set-permissions", "{f}", "alice", "(", ".*", ".*"],
            "'(' is not a valid regular expression",
        ),
        (["set-permissions", "{f}", "ghost", ".*", ".*", ".*"], "no user 'ghost'"),
        (["list", "{f}.missing"], "users file not found"),
    ],
)
def test_cli_errors_are_one_line_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16)
    before = f.read_text()
    code, _, err = run(capsys, *(a.format(f=f) for a in argv))
    assert (
        code == 2 and message in err and err.count("\n") == 1 and err.startswith("amqp10 users: ")
    )
    assert f.read_text() == before


def test_cli_as_a_subprocess(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def users(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "amqp10.cli", "users", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    assert users("add", str(f), "carol", "--password", "pw", "--iterations", "16").returncode == 0
    done = users("list", str(f))
    assert done.returncode == 0 and done.stdout == "carol\t[]\n"


def test_the_checker_of_a_file_knows_tags(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16, tags=["administrator"])
    checker = read_users_file(f).permission_checker()
    assert checker.has_tag("alice", "administrator") and not checker.has_tag("alice", "monitoring")


def test_an_empty_secret_is_replaced_on_write(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    f.write_text('secret = ""\n')
    add_user(f, "alice", "pw", iterations=16)
    assert len(bytes.fromhex(tomllib.loads(f.read_text())["secret"])) == 32


CRED = make_password_hash("pw")

# Names and patterns as a person might type them, minus what TOML cannot hold (lone
# surrogates); patterns are escaped literals so that they always compile.
names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(users={'del\x7f\x00\n"\\': (["administrator"], {"/\x7f": ("\x1f", "", "é")})})
@given(
    users=st.dictionaries(
        names,
        st.tuples(
            st.lists(st.sampled_from(sorted(KNOWN_TAGS)), unique=True, max_size=3),
            st.dictionaries(names, st.tuples(names, names, names), max_size=3),
        ),
        max_size=4,
    )
)
def test_any_names_and_patterns_survive_a_write_and_a_read(
    tmp_path: Path, users: dict[str, tuple[list[str], dict[str, tuple[str, str, str]]]]
) -> None:
    f = tmp_path / "users.toml"
    model = UsersFile(secret="ab")
    for name, (tags, perms) in users.items():
        model.users[name] = User(
            [CRED],
            tuple(tags),
            {v: VhostPermissions(*(re.escape(p) for p in ps)) for v, ps in perms.items()},
        )
    write_users_file(f, model)
    assert read_users_file(f) == model
