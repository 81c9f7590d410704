"""A virtual host's default queue type as written, read back and replayed; a re-declaration
logged once is not checked again; an export's timestamps in UTC."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core.broker import Broker
from amqp10.broker.core.typed_values import as_json
from amqp10.broker.core.vhost import PreconditionFailed
from amqp10.broker.definitions import VhostDef
from amqp10.broker.workers.metadata import apply_change


@pytest.mark.parametrize("none", [None, "", "undefined"])
def test_no_default_queue_type_is_written_none_empty_or_undefined(none: str | None) -> None:
    """RabbitMQ exports a host without a default queue type as ``undefined``: that is none (a
    0-9-1 declaration there got ``x-queue-type: undefined`` and was refused)."""
    vhost = Broker(BrokerConfig()).default
    vhost.set_metadata({"description": "d", "default_queue_type": none})
    assert vhost.metadata == {"description": "d"}
    assert vhost.declared_arguments({}, durable=True, exclusive=False, auto_delete=False) == {}
    canonical = VhostDef(name="v", metadata={"default_queue_type": none}).canonical()
    assert canonical.default_queue_type is None and canonical.metadata is not None
    assert canonical.metadata.default_queue_type is None


def test_an_unknown_default_queue_type_is_refused_as_written_and_left_out_when_read_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vhost = Broker(BrokerConfig()).default
    with pytest.raises(PreconditionFailed, match="invalid_queue_type"):
        vhost.set_metadata({"default_queue_type": "mirrored"})
    with caplog.at_level(logging.WARNING, logger="amqp10.broker"):
        vhost.set_metadata({"description": "d", "default_queue_type": "mirrored"}, persist=False)  # (from the store)
    assert vhost.metadata == {"description": "d"}
    assert "'mirrored' is not classic, quorum or stream" in caplog.text


@pytest.mark.parametrize(
    ("arguments", "auto_delete"),
    [
        ({"x-queue-type": "quorum", "x-quorum-initial-group-size": 3.0}, False),  # (a float: refused now)
        ({"x-queue-type": "quorum"}, True),  # (an auto-delete quorum queue: refused now)
    ],
)
def test_a_logged_declaration_is_made_again_as_it_was_taken(arguments: dict[str, object], auto_delete: bool) -> None:
    """A queue declaration in the metadata log (or shared by the worker that took it) is made
    again without the checks of a new declaration: one taken before a check existed is not
    refused when the log is replayed (the worker stopped on it)."""
    broker = Broker(BrokerConfig())
    with pytest.raises(PreconditionFailed):
        broker.default.declare_queue("q", arguments=arguments, auto_delete=auto_delete)
    apply_change(broker, "", ("queue", "q", "queue", True, auto_delete, arguments), check=False)
    assert broker.default.nodes["q"].arguments == arguments


@pytest.fixture
def new_york() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TZ", "EST+05EDT,M3.2.0,M11.1.0")
        time.tzset()
        yield
    time.tzset()


def test_a_timestamp_without_a_zone_is_exported_as_utc(new_york: None) -> None:
    """A naive datetime (a 0-9-1 timestamp is UTC) is its UTC seconds, whatever the host's zone
    (it was read as local time: five hours off here)."""
    assert as_json(datetime(2024, 1, 1)) == as_json(datetime(2024, 1, 1, tzinfo=UTC)) == 1704067200
