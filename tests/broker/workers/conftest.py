"""What the tests of N worker processes share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.test_workers import Parent


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Parent]:
    """``amqp10 broker --workers 2``, once both workers listen."""
    p = Parent(tmp_path)
    try:
        p.wait_for(r"worker=0 logger=amqp10.broker msg=.listening on")
        p.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on")
        yield p
    finally:
        p.stop()
