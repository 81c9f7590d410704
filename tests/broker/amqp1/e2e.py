"""What the 1.0 front end's end-to-end tests share: their waits, the address rules
several of them test against, and our client connected to a broker in a thread of the
test process (``tests.broker.conftest.broker_with``; the ``broker`` fixture of this
folder's conftest)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from amqp10 import errors
from amqp10.broker.config import AddressRule, QueuePolicy
from amqp10.client import Connection, Receiver, connect
from tests.broker.conftest import RunningBroker

__all__ = ["ADDRESS_RULES", "QUIET", "T", "bodies", "client", "nothing_arrives"]

T = 10.0
"""Seconds any single wait may take."""
QUIET = 0.5
"""How long "nothing arrives" is watched for."""

ADDRESS_RULES = [
    AddressRule(pattern="dl.*", policy=QueuePolicy(dead_letter_address="dlq")),
    AddressRule(pattern="limit.*", policy=QueuePolicy(delivery_limit=2, dead_letter_address="dlq")),
    AddressRule(pattern="ttl.*", policy=QueuePolicy(dead_letter_address="ttl-dlq")),
    AddressRule(pattern="small.*", policy=QueuePolicy(max_length=5)),
    AddressRule(pattern="news.*", kind="topic"),
]
"""Dead-lettering, a delivery limit, a TTL's dead letters, a length limit and topics, by
name: what our own client's and Proton's end-to-end tests run against."""


@asynccontextmanager
async def client(b: RunningBroker | str, **kwargs: Any) -> AsyncIterator[Connection]:
    """Our client connected to ``b`` (a running broker, or its ``host:port``)."""
    url = b if isinstance(b, str) else b.url
    async with await connect(f"amqp://{url}", timeout=T, **kwargs) as conn:
        yield conn


async def bodies(conn: Connection, address: str, n: int, **kw: Any) -> list[Any]:
    """The bodies of ``n`` messages taken (accepted) from ``address`` by a receiver of its
    own (``kw``: more of ``open_receiver``'s options), closed after."""
    r = await conn.open_receiver(address, credit=n, **kw)
    out = []
    for _ in range(n):
        d = await r.receive(timeout=T)
        out.append(d.message.body)
        await d.accept()
    await r.close()
    return out


async def nothing_arrives(r: Receiver) -> bool:
    """Whether ``r`` receives nothing for :data:`QUIET` seconds."""
    try:
        await r.receive(timeout=QUIET)
    except errors.TimeoutError:
        return True
    return False
