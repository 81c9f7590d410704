from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .helpers import BACKENDS, Certs, have_openssl, make_certs


@pytest.fixture(params=BACKENDS, scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certs]:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    yield make_certs(tmp_path_factory.mktemp("certs"))
