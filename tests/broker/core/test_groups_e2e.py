"""Message groups end to end over loopback with our async client: two consumers."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqp10.client import connect
from amqp10.message import Message
from tests.broker.conftest import broker_with

pytestmark = pytest.mark.anyio

T = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_two_consumers_groups_stick_and_move_on_detach(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            ra = await conn.open_receiver("groups-e2e", credit=4)
            rb = await conn.open_receiver("groups-e2e", credit=4)
            s = await conn.open_sender("groups-e2e")
            for n in (1, 2):
                for g in ("x", "y"):
                    await s.send(Message(body=f"{g}{n}", group_id=g, group_sequence=n))
            got_a = [await ra.receive(timeout=T) for _ in range(2)]
            got_b = [await rb.receive(timeout=T) for _ in range(2)]
            seen = {tuple(d.message.body for d in got_a), tuple(d.message.body for d in got_b)}
            assert seen == {("x1", "x2"), ("y1", "y2")}
            for d in got_a:
                await d.accept()
            group_a = got_a[0].message.properties.group_id
            # a keeps its group: more of it goes to a, even with b's credit open
            await s.send(Message(body=f"{group_a}3", group_id=group_a, group_sequence=3))
            d = await ra.receive(timeout=T)
            assert d.message.body == f"{group_a}3"
            await ra.close()  # d unsettled: it comes back, and the group moves to b
            d2 = await rb.receive(timeout=T)
            assert d2.message.body == f"{group_a}3"
            await d2.accept()
