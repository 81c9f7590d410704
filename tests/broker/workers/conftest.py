"""What the tests of N worker processes share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.broker.test_workers import Parent

P = TypeVar("P", bound=Parent)


def running(parent: P) -> Iterator[P]:
    """``parent`` once each of its workers listens (``yield from`` it in a fixture); stopped after."""
    try:
        parent.wait_listening()
        yield parent
    finally:
        parent.stop()


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Parent]:
    """``amqp10 broker --workers 2``, once both workers listen: a ``Parent``, or the test
    module's ``BROKER`` (a ``Parent`` class taking the data directory: HTTP on, say)."""
    yield from running(getattr(request.module, "BROKER", Parent)(tmp_path))
