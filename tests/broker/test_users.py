"""The broker's users file: SCRAM credentials only, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqp10.broker.users import UsersFileError, add_user, load_users
from amqp10.sasl.credentials import verify_password


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


def test_decoys_are_stable_across_loads(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    add_user(f, "alice", "pw", iterations=16)
    a = load_users(f).decoy("nobody", "SCRAM-SHA-256")
    b = load_users(f).decoy("nobody", "SCRAM-SHA-256")
    assert a.salt == b.salt


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("users = 3", "[users] must be a table"),
        ("[users.alice]\ncredentials = []", "users.alice.credentials must be a non-empty list"),
        ('[users.alice]\ncredentials = ["nonsense"]', "users.alice.credentials[0]"),
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


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsersFileError, match="not found"):
        load_users(tmp_path / "nope.toml")
