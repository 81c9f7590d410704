"""Fixtures of the 1.0 front end's tests (helpers that are not fixtures: ``e2e.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.conftest import RunningBroker, broker_with


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker with the default configuration, in a thread of the test process (a test
    module that needs another configuration has a ``broker`` fixture of its own)."""
    with broker_with(tmp_path) as b:
        yield b
