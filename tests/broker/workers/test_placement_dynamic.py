"""Dynamic nodes are placed on the worker of the connection that asked (``--workers 2``).

A 1.0 dynamic source's node is made on its receiver's worker, with that worker in its
name (``amqp10.dynamic.w<K>.``), so a reply sent to it from a connection on either worker
(a named sender, or the anonymous relay with ``to``) reaches it. Real processes on
127.0.0.1, our client pinned to each worker; every wait is bounded.
"""

from __future__ import annotations

import pytest

from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.test_workers import WAIT, Parent

from .test_processes import one_on_each

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_dynamic_node_is_on_its_receivers_worker_and_reached_from_either(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for mine in (0, 1):
            replies = await conns[mine].open_receiver(dynamic=True, credit=10)
            address = replies.address
            assert address is not None and address.startswith(f"amqp10.dynamic.w{mine}.")
            for w in (1 - mine, mine):
                named = await conns[w].open_sender(address)
                assert isinstance(await named.send(Message(body=f"named from {w}")), Accepted)
                relay = await conns[w].open_sender(None)
                assert isinstance(await relay.send(Message(body=f"relayed from {w}", to=address)), Accepted)
                for expected in (f"named from {w}", f"relayed from {w}"):
                    d = await replies.receive(timeout=WAIT)
                    assert d.message.body == expected
                    await d.accept()
                await named.close()
                await relay.close()
            await replies.close()
