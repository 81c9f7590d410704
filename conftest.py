"""The collection rule of the whole suite (``tests`` and ``interop``): the ``in_process``
marker, and at ``AMQP10_TEST_WORKERS=N`` > 1 what runs against ``amqp10 broker --workers N``
(``tests/broker/workers_mode.py``). Here, at the root, so that it sees every test once,
whichever of the two directories a run collects."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``in_process`` marker, and at ``AMQP10_TEST_WORKERS=N`` > 1 what runs
    (``tests/broker/workers_mode.py``)."""
    from tests.broker.workers_mode import select

    select(config, items)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    from tests.broker.workers_mode import summary

    for line in summary(config):
        terminalreporter.write_line(line)
