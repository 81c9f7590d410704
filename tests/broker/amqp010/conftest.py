"""What the 0-10 front end's tests share: ``peer``, a bare 0-10 peer logged in (ANONYMOUS) to
the test module's ``broker`` with a session attached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.amqp010.peer import SocketPeer
from tests.broker.conftest import RunningBroker


@pytest.fixture
def peer(broker: RunningBroker) -> Iterator[SocketPeer]:
    p = SocketPeer(broker.port)
    p.attach()
    yield p
    p.close()
