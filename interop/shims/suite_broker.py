"""A pytest plugin and a stand-in for aio-pika's and aiormq's ``tests/docker_client.py``.

Their suites start RabbitMQ in Docker (``mosquito/aiormq-rabbitmq``); the runner
(``interop/suites.py``) starts the broker under test itself instead and names it in
``SUITE_BROKER_HOST``, ``SUITE_BROKER_PORT`` and ``SUITE_BROKER_TLS_PORT``. As a plugin
(``-p suite_broker``) this module gives the fixtures aiormq's conftest uses without
defining (``rabbitmq_container``, ``amqp_direct_url``); copied over a suite's
``tests/docker_client.py`` it answers aio-pika's conftest's Docker calls with that
broker. Nothing else of the suites changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from yarl import URL


class DockerNotAvailableError(Exception):
    """Never raised: the broker is started by the runner."""


@dataclass
class DockerHostInfo:
    is_tcp: bool = False


@dataclass
class ContainerInfo:
    id: str
    ports: dict[str, int]
    host: str


def broker() -> ContainerInfo:
    """The broker the runner started."""
    host = os.environ.get("SUITE_BROKER_HOST", "127.0.0.1")
    port = int(os.environ.get("SUITE_BROKER_PORT", "5672"))
    tls_port = int(os.environ.get("SUITE_BROKER_TLS_PORT", "5671"))
    return ContainerInfo(id="broker-under-test", ports={"5672/tcp": port, "5671/tcp": tls_port}, host=host)


def check_docker_available() -> DockerHostInfo:
    return DockerHostInfo()


class DockerClient:
    def __init__(self, info: DockerHostInfo | None = None) -> None:
        self.info = info

    def run(self, image: str, ports: list[str], environment: dict[str, str] | None = None) -> ContainerInfo:
        return broker()

    def kill(self, container_id: str) -> None:
        pass

    def remove(self, container_id: str) -> None:
        pass


@pytest.fixture(scope="session")
def rabbitmq_container() -> ContainerInfo:
    return broker()


@pytest.fixture(scope="session")
def amqp_direct_url(rabbitmq_container: ContainerInfo) -> URL:
    return URL.build(
        scheme="amqp",
        user="guest",
        password="guest",
        path="//",
        host=rabbitmq_container.host,
        port=rabbitmq_container.ports["5672/tcp"],
    )


@pytest.fixture(autouse=True)
def _each_test_timed(aiomisc_test_timeout: float | None) -> None:
    """aiomisc's ``--aiomisc-test-timeout`` limits a test only where the test asks for this
    fixture; asked for here, it limits every test (one that waits for what never comes
    fails instead of stopping the run)."""
