"""A real broker on 127.0.0.1 (random port, temp store) running in a background thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

from amqp10.broker.config import BrokerConfig, Listener, StoreConfig
from amqp10.broker.service import BrokerService


class RunningBroker:
    def __init__(self, service: BrokerService, portal: Any, cancel: Any) -> None:
        self.service = service
        self.portal = portal
        self._cancel = cancel

    @property
    def port(self) -> int:
        return self.service.ports[0]

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def broker(self) -> Any:
        return self.service.broker


def start_broker(config: BrokerConfig) -> Iterator[RunningBroker]:
    with anyio.from_thread.start_blocking_portal() as portal:
        service = BrokerService(config)
        future, _ = portal.start_task(service.run)
        yield RunningBroker(service, portal, future)
        future.cancel()
        try:
            future.result(timeout=10)
        except BaseException:
            pass


@pytest.fixture
def broker_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(
        listeners=[Listener(host="127.0.0.1", port=0)],
        store=StoreConfig(path=tmp_path / "store.sqlite3", commit_interval_ms=1),
    )


@pytest.fixture
def running_broker(broker_config: BrokerConfig) -> Iterator[RunningBroker]:
    yield from start_broker(broker_config)
