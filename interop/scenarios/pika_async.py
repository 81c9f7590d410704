"""The 0-9-1 rows driven by pika's ``AsyncioConnection`` (callbacks on an asyncio loop).

Each pika call that takes a callback is awaited through a future (at most ``WAIT``
seconds); deliveries land in an ``asyncio.Queue``. The rows are in ``amqp091.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pika
from pika.adapters.asyncio_connection import AsyncioConnection

from . import Ctx, ScenarioFailed
from .amqp091 import WAIT, Chan, Conn, Delivery, next_from, runner
from .pika_blocking import PikaSettle, parameters, props_of

__all__ = ["client_version", "run"]


async def _wait(fut: asyncio.Future[Any], what: str) -> Any:
    try:
        return await asyncio.wait_for(fut, WAIT)
    except TimeoutError:
        raise ScenarioFailed(f"no answer to {what} within {WAIT:g}s") from None


def _setter(fut: asyncio.Future[Any]) -> Callable[[Any], None]:
    def done(value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    return done


class AsyncChan(PikaSettle):
    def __init__(self, ch: Any, confirm: bool) -> None:
        self.ch = ch
        self.loop = asyncio.get_running_loop()
        self.inbox: asyncio.Queue[Delivery] = asyncio.Queue()
        self._returned: list[tuple[int, bytes]] = []
        self.confirm = confirm
        self._seq = 0
        self._unconfirmed: dict[int, asyncio.Future[bool]] = {}
        self.closed: str | None = None
        ch.add_on_return_callback(lambda _ch, m, _p, body: self._returned.append((m.reply_code, body)))
        ch.add_on_close_callback(self._on_close)

    def _on_close(self, _ch: Any, reason: Any) -> None:
        self.closed = str(reason)
        for fut in self._unconfirmed.values():
            if not fut.done():
                fut.set_exception(ScenarioFailed(f"channel closed: {reason}"))

    async def _call(self, method: Callable[..., Any], what: str, *args: Any, **kw: Any) -> Any:
        fut: asyncio.Future[Any] = self.loop.create_future()
        method(*args, callback=_setter(fut), **kw)
        try:
            return await _wait(fut, what)
        except ScenarioFailed:
            if self.closed:
                raise ScenarioFailed(f"{what}: the channel closed: {self.closed}") from None
            raise

    async def start(self) -> None:
        if self.confirm:
            await self._call(self.ch.confirm_delivery, "confirm.select", self._on_confirm)

    def _on_confirm(self, frame: Any) -> None:
        m = frame.method
        ok = isinstance(m, pika.spec.Basic.Ack)
        tags = [t for t in self._unconfirmed if t <= m.delivery_tag] if m.multiple else [m.delivery_tag]
        for t in tags:
            fut = self._unconfirmed.pop(t, None)
            if fut is not None and not fut.done():
                fut.set_result(ok)

    async def declare(self, name: str = "", *, durable: bool = False, exclusive: bool = False) -> str:
        frame = await self._call(self.ch.queue_declare, "queue.declare", name, durable=durable, exclusive=exclusive)
        return str(frame.method.queue)

    async def ready(self, name: str) -> int:
        frame = await self._call(self.ch.queue_declare, "queue.declare (passive)", name, passive=True)
        return int(frame.method.message_count)

    async def publish(
        self, routing_key: str, body: bytes, props: dict[str, Any] | None = None, *, exchange: str = "", mandatory: bool = False
    ) -> None:
        self.ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(**(props or {})), mandatory)
        if self.confirm:
            self._seq += 1
            fut: asyncio.Future[bool] = self.loop.create_future()
            self._unconfirmed[self._seq] = fut
            if not await _wait(fut, "a confirm"):
                raise ScenarioFailed("the broker nacked a publish")

    async def qos(self, prefetch: int) -> None:
        await self._call(self.ch.basic_qos, "basic.qos", prefetch_count=prefetch)

    async def consume(self, queue: str, *, no_ack: bool = False) -> None:
        def on_message(_ch: Any, m: Any, p: Any, body: bytes) -> None:
            self.inbox.put_nowait(Delivery(body, props_of(p), m.redelivered, m.exchange, m.routing_key, m.delivery_tag))

        await self._call(self.ch.basic_consume, "basic.consume", queue, on_message, auto_ack=no_ack)

    async def next(self) -> Delivery:
        return await next_from(self.inbox)

    async def returned(self) -> list[tuple[int, bytes]]:
        return list(self._returned)

    async def tx_select(self) -> None:
        await self._call(self.ch.tx_select, "tx.select")

    async def tx_commit(self) -> None:
        await self._call(self.ch.tx_commit, "tx.commit")

    async def tx_rollback(self) -> None:
        await self._call(self.ch.tx_rollback, "tx.rollback")


class AsyncConn:
    def __init__(self, conn: AsyncioConnection, closed: asyncio.Future[Any]) -> None:
        self.conn = conn
        self.closed = closed

    async def channel(self, *, confirm: bool = False) -> Chan:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.conn.channel(on_open_callback=_setter(fut))
        chan = AsyncChan(await _wait(fut, "channel.open"), confirm)
        await chan.start()
        return chan

    async def idle(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # the loop runs pika's heartbeats meanwhile
        if self.closed.done():
            raise ScenarioFailed(f"the connection closed while idle: {self.closed.result()}")

    async def close(self) -> None:
        if not self.closed.done():
            if self.conn.is_open:
                self.conn.close()
            await _wait(self.closed, "connection.close")


class AsyncClient:
    async def connect(self, ctx: Ctx, *, plain: bool = False, tls: bool = False, heartbeat: int | None = None) -> Conn:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[Any] = loop.create_future()
        closed: asyncio.Future[Any] = loop.create_future()

        def open_failed(_c: Any, err: Any) -> None:
            if not opened.done():
                opened.set_exception(ScenarioFailed(f"connect failed: {err!r}"))

        def on_close(_c: Any, reason: Any) -> None:
            _setter(closed)(reason)
            open_failed(_c, reason)

        conn = AsyncioConnection(
            parameters(ctx, plain=plain, tls=tls, heartbeat=heartbeat),
            on_open_callback=_setter(opened),
            on_open_error_callback=open_failed,
            on_close_callback=on_close,
            custom_ioloop=loop,
        )
        await _wait(opened, "the connection's open")
        return AsyncConn(conn, closed)


def client_version() -> str:
    return f"pika {pika.__version__} (asyncio adapter)"


run = runner(AsyncClient)
