"""The workers = N mode of the suite (``tests/broker/workers_mode.py``): its config file
and its rule for the tests that need the in-process broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amqp10.broker.config import load_config
from tests.broker.conftest import RunningBroker, held_commits, make_config
from tests.broker.workers_mode import needs_in_process, referred, write_config


def test_the_config_file_reads_back_as_the_config(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        limits={"max_connections": 7, "memory_limit_bytes": 4096},
        vhosts=[{"name": "shop", "exchanges": [{"name": "orders", "type": "topic"}], "queues": ["eu"],
                 "bindings": [{"source": "orders", "destination": "eu", "routing_key": "eu.#"}]}],
        addresses=[{"pattern": "q.*", "kind": "queue"}],
        container_id='a "quoted" name\n',
        link_recovery_seconds=0.5,
    )  # fmt: skip
    path = write_config(config, tmp_path / "broker.toml")
    assert load_config(path) == config
    assert load_config(path).vhosts[0].bindings[0].routing_key == "eu.#"


def _reads_the_service(b: RunningBroker) -> Any:
    return b.service.broker


def _calls_a_helper_that_does(b: RunningBroker) -> Any:
    return _reads_the_service(b)


def _holds_commits(b: RunningBroker) -> None:
    with held_commits(b):
        pass


def _only_the_port(b: RunningBroker) -> str:
    return f"{b.url} {b.port}"


def test_the_rule_finds_what_reads_the_in_process_broker() -> None:
    assert needs_in_process(referred([_reads_the_service])[0])
    assert needs_in_process(referred([_calls_a_helper_that_does])[0])  # through the module's helper
    assert needs_in_process(referred([_holds_commits])[0])
    assert not needs_in_process(referred([_only_the_port])[0])
    names, words = referred([test_the_config_file_reads_back_as_the_config])
    assert "memory_limit_bytes" in words and "memory_limit_bytes" not in names  # a keyword's name is a word
