"""Fixtures: every pair-harness test runs fed whole and byte by byte."""

from __future__ import annotations

import pytest

from .pair import Pair


@pytest.fixture(params=[None, 1], ids=["whole", "bytewise"])
def chunk(request: pytest.FixtureRequest) -> int | None:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def pair(chunk: int | None) -> Pair:
    return Pair(chunk=chunk)
