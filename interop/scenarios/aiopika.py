"""The 0-9-1 rows driven by aio-pika (asyncio, on aiormq/pamqp); the rows are in ``amqp091.py``.

aio-pika speaks in seconds and datetimes where 0-9-1 carries milliseconds and
whole seconds: ``expiration`` and ``timestamp`` are converted both ways so the
rows compare pika's forms. aio-pika reports a returned message only as the outcome
of a publish on a confirming channel.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage
from aiormq.abc import DeliveredMessage

from . import Ctx, NotApplicable, ScenarioFailed
from .amqp091 import WAIT, Chan, Conn, Delivery, next_from, runner

__all__ = ["client_version", "run"]


def _message(body: bytes, props: dict[str, Any] | None) -> aio_pika.Message:
    p = {k: v for k, v in (props or {}).items() if v is not None}
    if "expiration" in p:
        p["expiration"] = int(p["expiration"]) / 1000  # aio-pika takes seconds
    return aio_pika.Message(body, **p)


def _props(m: AbstractIncomingMessage) -> dict[str, Any]:
    return {
        "content_type": m.content_type,
        "content_encoding": m.content_encoding,
        "headers": m.headers or None,
        "delivery_mode": None if m.delivery_mode is None else int(m.delivery_mode),
        "priority": m.priority,
        "correlation_id": m.correlation_id,
        "reply_to": m.reply_to,
        "expiration": None if m.expiration is None else str(round(float(m.expiration) * 1000)),
        "message_id": m.message_id,
        "timestamp": None if m.timestamp is None else int(m.timestamp.timestamp()),
        "type": m.type,
        "user_id": m.user_id,
        "app_id": m.app_id,
    }


class AioChan:
    def __init__(self, ch: AbstractChannel) -> None:
        self.ch = ch
        self.inbox: asyncio.Queue[Delivery] = asyncio.Queue()
        self._returned: list[tuple[int, bytes]] = []
        self._tx: Any = None

    async def start(self) -> None:
        self.underlay = await self.ch.get_underlay_channel()  # settles without aio-pika's once-only rule

    async def declare(self, name: str = "", *, durable: bool = False, exclusive: bool = False) -> str:
        q = await self.ch.declare_queue(name or None, durable=durable, exclusive=exclusive, timeout=WAIT)
        return str(q.name)

    async def ready(self, name: str) -> int:
        q = await self.ch.declare_queue(name, passive=True, timeout=WAIT)
        result = q.declaration_result
        return int(result.message_count or 0)

    async def publish(
        self, routing_key: str, body: bytes, props: dict[str, Any] | None = None, *, exchange: str = "", mandatory: bool = False
    ) -> None:
        x = self.ch.default_exchange if not exchange else await self.ch.get_exchange(exchange, ensure=False)
        # on a confirming channel this returns once the broker acknowledged the message, or
        # the message itself if it was returned (aio-pika sees returns only with confirms)
        outcome = await x.publish(_message(body, props), routing_key, mandatory=mandatory, timeout=WAIT)
        if isinstance(outcome, DeliveredMessage):
            self._returned.append((outcome.delivery.reply_code, outcome.body))

    async def qos(self, prefetch: int) -> None:
        await self.ch.set_qos(prefetch_count=prefetch, timeout=WAIT)

    async def consume(self, queue: str, *, no_ack: bool = False) -> None:
        async def on_message(m: AbstractIncomingMessage) -> None:
            self.inbox.put_nowait(
                Delivery(m.body, _props(m), bool(m.redelivered), m.exchange or "", m.routing_key or "", m)
            )

        q = await self.ch.get_queue(queue, ensure=False)
        await q.consume(on_message, no_ack=no_ack, timeout=WAIT)

    async def next(self) -> Delivery:
        return await next_from(self.inbox)

    # through aiormq's channel: aio-pika lets a message be settled once, but an ack rolled
    # back in a transaction leaves it to settle again
    async def ack(self, d: Delivery) -> None:
        await self.underlay.basic_ack(d.handle.delivery_tag)

    async def nack(self, d: Delivery, *, requeue: bool) -> None:
        await self.underlay.basic_nack(d.handle.delivery_tag, requeue=requeue)

    async def reject(self, d: Delivery, *, requeue: bool) -> None:
        await self.underlay.basic_reject(d.handle.delivery_tag, requeue=requeue)

    async def returned(self) -> list[tuple[int, bytes]]:
        return list(self._returned)

    async def tx_select(self) -> None:
        self._tx = self.ch.transaction()
        await self._tx.select(timeout=WAIT)

    async def tx_commit(self) -> None:
        await self._tx.commit(timeout=WAIT)

    async def tx_rollback(self) -> None:
        await self._tx.rollback(timeout=WAIT)


class AioConn:
    def __init__(self, conn: AbstractConnection) -> None:
        self.conn = conn

    async def channel(self, *, confirm: bool = False) -> Chan:
        ch = AioChan(await self.conn.channel(publisher_confirms=confirm))
        await ch.start()
        return ch

    async def idle(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # aiormq sends and checks heartbeats meanwhile
        if self.conn.is_closed:
            raise ScenarioFailed("the connection closed while idle")

    async def close(self) -> None:
        await self.conn.close()


class AioClient:
    async def connect(self, ctx: Ctx, *, plain: bool = False, tls: bool = False, heartbeat: int | None = None) -> Conn:
        ep = ctx.ep
        user, password = ep.plain if plain and ep.plain else ("guest", "guest")
        kw: dict[str, Any] = {"host": "127.0.0.1", "port": ep.port, "login": user, "password": password}
        if tls:
            if ep.tls_port is None or ep.ca is None:
                raise NotApplicable("the peer has no TLS listener")
            kw.update(port=ep.tls_port, ssl=True, ssl_context=ssl.create_default_context(cafile=str(ep.ca)))
        if heartbeat is not None:
            kw["heartbeat"] = heartbeat
        return AioConn(await aio_pika.connect(timeout=WAIT, **kw))


def client_version() -> str:
    return f"aio-pika {aio_pika.__version__}"


run = runner(AioClient)
