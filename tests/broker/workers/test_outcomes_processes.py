"""What a 1.0 consumer or requester on one worker says about a node another worker owns
reaches that worker whole (``amqp10 broker --workers 2``): a ``modified`` outcome's
message annotations, a stream delivery's ``x-stream-offset``, and a ``$management``
reply-to that names nothing there. Real processes on 127.0.0.1, our client pinned to a
worker as ``test_processes`` does; every wait is bounded, none is a timed assertion."""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.message import Message
from amqp10.types import Accepted, Described, Rejected, Source, Target, symbol
from tests.broker.amqp1.test_rabbitmq4 import Management
from tests.broker.test_workers import WAIT, Parent

from .test_processes import one_on_each, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def annotations(d: Any) -> dict[Any, Any]:
    return dict(d.message.message_annotations or {})


async def test_a_modified_outcomes_annotations_reach_the_queues_owner(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for owner in (0, 1):  # the consumer on the worker that owns neither queue
            here = conns[1 - owner]
            m = await Management.open(here)
            work, dead, dlx = owned_by(owner, f"work{owner}-"), owned_by(owner, f"dead{owner}-"), f"dlx{owner}"
            await m.request("PUT", f"/exchanges/{dlx}", {"type": "fanout"})
            await m.request("PUT", f"/queues/{dead}", {})
            await m.request("POST", "/bindings", {"source": dlx, "destination_queue": dead, "binding_key": ""})
            await m.request("PUT", f"/queues/{work}", {"arguments": {"x-dead-letter-exchange": dlx}})
            s = await conns[owner].open_sender(f"/queues/{work}")
            assert isinstance(await s.send(Message(body="job", durable=True)), Accepted)
            r = await here.open_receiver(f"/queues/{work}", credit=1)
            d = await r.receive(timeout=WAIT)
            await d.modify(delivery_failed=False, message_annotations={symbol("x-opt-tries"): 1})
            d = await r.receive(timeout=WAIT)  # requeued by the owner with them
            assert annotations(d).get("x-opt-tries") == 1
            # RabbitMQ 4: a /queues/ consumer's undeliverable-here is a discard, dead-lettered with them
            await d.modify(delivery_failed=True, undeliverable_here=True, message_annotations={symbol("x-opt-why"): "bad"})
            dead_letters = await conns[owner].open_receiver(f"/queues/{dead}", credit=1)
            d = await dead_letters.receive(timeout=WAIT)
            got = annotations(d)
            assert got.get("x-opt-tries") == 1 and got.get("x-opt-why") == "bad" and "x-opt-deaths" in got
            await d.accept()


async def test_a_stream_delivery_from_the_other_workers_stream_says_its_offset(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for owner in (0, 1):
            log = owned_by(owner, f"log{owner}-")
            m = await Management.open(conns[owner])
            await m.request("PUT", f"/queues/{log}", {"arguments": {"x-queue-type": "stream"}})
            s = await conns[owner].open_sender(f"/queues/{log}")
            for i in range(3):
                assert isinstance(await s.send(Message(body=i)), Accepted)
            spec = symbol("rabbitmq:stream-offset-spec")
            source = Source(address=f"/queues/{log}", filter={spec: Described(spec, 1)})
            r = await conns[1 - owner].open_receiver(f"/queues/{log}", source=source, credit=2)
            for offset in (1, 2):
                d = await r.receive(timeout=WAIT)
                assert d.message.body == offset and annotations(d).get("x-stream-offset") == offset
                await d.accept()


async def test_a_management_reply_to_is_looked_for_on_its_owner(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for owner in (0, 1):
            here = conns[1 - owner]
            sender = await here.open_sender("$management")
            request = Message(body=None, application_properties={"operation": "GET-MGMT-NODES"})
            request.reply_to = owned_by(owner, f"nobody{owner}-")  # no node there: rejected, as one broker does
            await sender.send(request, settled=True)  # pre-settled: not answered, and it makes no node there
            outcome = await sender.send(request)
            assert isinstance(outcome, Rejected) and outcome.error is not None, outcome
            assert outcome.error.condition == "amqp:not-found" and request.reply_to in str(outcome.error.description)
            # a queue its owner has (made by a 1.0 attach there: no other worker has a record of it)
            replies = owned_by(owner, f"replies{owner}-")
            r = await conns[owner].open_receiver(replies, target=Target(address=replies), credit=1)
            request.reply_to, request.id = replies, f"request-{owner}"
            assert isinstance(await sender.send(request), Accepted)
            d = await r.receive(timeout=WAIT)
            assert d.message.correlation_id == f"request-{owner}"
            assert (d.message.application_properties or {}).get("statusCode") == 200
            await d.accept()
