from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import amqp10.sync
from amqp10.broker.config import AddressRule, QueuePolicy
from tests.broker.conftest import RunningBroker, broker_with

from .helpers import BACKENDS, WAIT, Certs, have_openssl, make_certs


@pytest.fixture(params=BACKENDS, scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certs]:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    yield make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """Our broker for the blocking facade's tests (a module may define its own)."""
    rules = [
        AddressRule(pattern="full.*", policy=QueuePolicy(max_length=1)),  # blocks the sender
        AddressRule(pattern="cap.*", policy=QueuePolicy(max_length=3, overflow="reject")),
    ]
    with broker_with(tmp_path, addresses=rules) as b:
        yield b


@pytest.fixture
def conn(broker: RunningBroker) -> Iterator[amqp10.sync.Connection]:
    """A blocking connection to ``broker``."""
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=WAIT) as c:
        yield c
