"""A consumer whose queue the other worker owns drains, and is answered, as on one broker.

``amqp10 broker --workers 2`` on 127.0.0.1, a client on each worker, the consumer on the
worker that does not own its queue (and, for comparison, on the one that does):

- a 1.0 drain (flow with drain=true) is answered once the owner has sent what the credit
  allows: the messages first, then the credit given back (delivery-count advanced, credit
  0), or used up by the transfers when messages are left;
- a 0-10 ``message.flush`` (0-10's drain) completes once those messages were sent;
- a receiver's or sender's attach answer names the node's kind in its terminus's
  capabilities (``queue``; ``stream`` for an address the rules make a stream), the owner's
  kind, as one broker answers.

Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from amqp10.broker.config import AddressRule
from amqp10.client import Receiver, Sender
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import make_config
from tests.broker.test_workers import WAIT, Parent
from tests.broker.workers_mode import start_processes

from . import test_amqp010_processes as p010
from .test_processes import one_on_each, owned_by

pytestmark = [pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def streams_too(tmp_path: Path) -> Iterator[Parent]:
    """Two workers whose rules make ``stream.*`` addresses streams."""
    config = make_config(tmp_path, addresses=[AddressRule(pattern="stream.*", kind="stream")])
    with contextmanager(start_processes)(config, 2) as b:
        yield b  # type: ignore[misc]


async def send(sender: Sender, bodies: range) -> None:
    for i in bodies:
        assert isinstance(await sender.send(Message(body=f"m{i}"), timeout=WAIT), Accepted)


async def drain(rcv: Receiver, credit: int) -> list[str]:
    """Grant ``credit`` and drain: what came (accepted), once the credit is 0."""
    rcv.add_credit(credit)
    await rcv.drain(timeout=WAIT)
    assert rcv.credit == 0
    got = []
    while rcv.buffered:
        d = await rcv.receive(timeout=WAIT)
        got.append(str(d.message.body))
        await d.accept()
    return got


@pytest.mark.anyio
async def test_a_drain_brings_what_the_owner_has_then_gives_the_credit_back(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for owner in (0, 1):
            for consumer in (1 - owner, owner):  # the consumer's worker does not own it / does
                name = owned_by(owner, f"drain{consumer}.")
                sender = await conns[owner].open_sender(name)
                rcv = await conns[consumer].open_receiver(name, credit=0)
                await send(sender, range(2))
                assert await drain(rcv, 5) == [
                    "m0",
                    "m1",
                ]  # all there is, the rest of the credit back
                await send(sender, range(2, 5))
                assert await drain(rcv, 2) == ["m2", "m3"]  # the credit used up, one left
                assert await drain(rcv, 4) == ["m4"]
                assert await drain(rcv, 3) == []  # nothing there: the credit back at once
                await send(sender, range(5, 6))  # (nothing was left granted on the owner: it waits)
                assert await drain(rcv, 1) == ["m5"]
                await rcv.close()
                await sender.close()


def test_a_0_10_flush_completes_once_the_owner_sent_what_the_credit_allows(broker: Parent) -> None:
    with p010.one_on_each(broker) as peers:
        for owner in (0, 1):
            name = owned_by(owner, "flush010.")
            p, at_owner = peers[1 - owner], peers[owner]
            at_owner.call("queue.declare", queue=name)
            for i in range(3):
                p010.publish(at_owner, name, str(i).encode())
            p010.subscribe(p, name, "c", 0)
            for credit, want in ((2, [b"0", b"1"]), (5, [b"2"]), (1, [])):
                # the credit and the flush in one write: the flush is what sends them (and
                # stops the subscription: its byte credit too)
                p.command(
                    "message.flow",
                    destination="c",
                    unit=p010.BYTES,
                    value=p010.UNLIMITED,
                    sync=False,
                )
                p.command(
                    "message.flow", destination="c", unit=p010.MESSAGES, value=credit, sync=False
                )
                p.call("message.flush", destination="c")
                assert [t.body for _, t in p.take("message.transfer")] == want
            p.call("message.cancel", destination="c")
            at_owner.call("queue.delete", queue=name)


@pytest.mark.anyio
async def test_attach_answers_carry_the_owners_node_kind(streams_too: Parent) -> None:
    async with one_on_each(streams_too) as conns:
        for owner in (0, 1):
            for prefix, kind in (("kind.", "queue"), ("stream.kind.", "stream")):
                name = owned_by(owner, prefix)
                for w in (1 - owner, owner):
                    rcv = await conns[w].open_receiver(name, credit=0)
                    caps = {str(c) for c in rcv.remote_source.capabilities or []}
                    assert kind in caps, (name, w, caps)
                    await rcv.close()
                    snd = await conns[w].open_sender(name)
                    caps = {str(c) for c in snd.remote_target.capabilities or []}
                    assert kind in caps, (name, w, caps)
                    await snd.close()
