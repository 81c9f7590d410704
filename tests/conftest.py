"""Shared test configuration: Hypothesis profiles.

``default`` keeps the whole suite quick; ``ci`` digs deeper. Pick one with
``HYPOTHESIS_PROFILE=ci``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``in_process`` marker, and at ``AMQP10_TEST_WORKERS=N`` > 1 what runs
    (``tests/broker/workers_mode.py``)."""
    from tests.broker.workers_mode import select

    select(config, items)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    from tests.broker.workers_mode import summary

    for line in summary(config):
        terminalreporter.write_line(line)
