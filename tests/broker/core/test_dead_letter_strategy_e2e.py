"""``x-dead-letter-strategy: at-least-once`` across a restart: a dead letter that reached no
queue is kept aside in its source queue, and a broker started again on the same store keeps
it aside (never a ready message a consumer gets) and sends it once a route takes it, as
RabbitMQ keeps its quorum queues' dead letters."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import amqp10
from amqp10 import errors
from amqp10.broker.core import Queue
from amqp10.message import Message
from amqp10.types import Header, Rejected
from tests.broker.conftest import broker_in_loop

pytestmark = pytest.mark.anyio

AT_LEAST_ONCE = {"x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_kept_dead_letter_is_kept_aside_after_a_restart(tmp_path: Path) -> None:
    async with broker_in_loop(tmp_path) as service:
        v = service.broker.default
        v.declare_exchange("dlx", "direct")  # no binding: the dead letter reaches no queue
        v.declare_queue("work", arguments=AT_LEAST_ONCE)
        async with await amqp10.connect(f"amqp://127.0.0.1:{service.ports[0]}") as conn:
            s = await conn.open_sender("/queues/work")
            await s.send(Message(body="kept", header=Header(durable=True)))
            r = await conn.open_receiver("/queues/work", credit=1)
            d = await r.receive(timeout=10)
            await d.settle(Rejected())
        work = v.nodes["work"]
        assert isinstance(work, Queue) and work.held_dead is not None and len(work.held_dead) == 1
    async with broker_in_loop(tmp_path) as service:  # the same store
        v = service.broker.default
        work = v.nodes["work"]
        assert isinstance(work, Queue)
        assert work.count == 0 and work.held_dead is not None and len(work.held_dead) == 1
        assert v.holding == {work}
        async with await amqp10.connect(f"amqp://127.0.0.1:{service.ports[0]}") as conn:
            r = await conn.open_receiver("/queues/work", credit=1)
            with pytest.raises(errors.TimeoutError):
                await r.receive(timeout=0.5)  # not a ready message
            v.declare_queue("dead")
            v.bind("dlx", "dead", "")  # a route: it is sent there, and leaves work for good
            dead = await conn.open_receiver("/queues/dead", credit=1)
            d = await dead.receive(timeout=10)
            assert d.message.body == "kept"
            (death,) = d.message.message_annotations["x-opt-deaths"]
            assert (death["queue"], death["reason"], death["count"]) == ("work", "rejected", 1)
            await d.accept()
        assert work.held_dead is None and work.count == 0
    async with broker_in_loop(tmp_path) as service:  # and it is not back after another restart
        work = service.broker.default.nodes["work"]
        assert isinstance(work, Queue) and work.held_dead is None and work.count == 0
        await anyio.sleep(0)
