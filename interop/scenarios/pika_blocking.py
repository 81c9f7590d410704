"""The 0-9-1 rows driven by pika's ``BlockingConnection`` (``amqp091.py`` has the rows).

pika's blocking API does its I/O inside its calls, so a scenario's waits run
``process_data_events`` (bounded); the async interface of ``amqp091.py`` is only a
coat over blocking calls here.
"""

from __future__ import annotations

import ssl
import time
from typing import Any

import pika
import pika.exceptions

from . import Ctx, ScenarioFailed
from .amqp091 import WAIT, Chan, Conn, Delivery, runner

__all__ = ["PikaSettle", "client_version", "parameters", "props_of", "run"]

_FIELDS = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
    "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
)  # fmt: skip


def props_of(p: pika.BasicProperties) -> dict[str, Any]:
    return {k: getattr(p, k) for k in _FIELDS}


def parameters(ctx: Ctx, *, plain: bool, tls: bool, heartbeat: int | None) -> pika.ConnectionParameters:
    """Connection parameters for ``ctx.ep`` (shared by both pika drivers)."""
    ep = ctx.ep
    user, password = ep.plain if plain and ep.plain else ("guest", "guest")
    kw: dict[str, Any] = {"credentials": pika.PlainCredentials(user, password), "socket_timeout": WAIT}
    port = ep.port
    if tls:
        if ep.tls_port is None or ep.ca is None:
            from . import NotApplicable

            raise NotApplicable("the peer has no TLS listener")
        context = ssl.create_default_context(cafile=str(ep.ca))
        kw["ssl_options"] = pika.SSLOptions(context, "127.0.0.1")
        port = ep.tls_port
    if heartbeat is not None:
        kw["heartbeat"] = heartbeat
    return pika.ConnectionParameters("127.0.0.1", port, **kw)


class PikaSettle:
    """Acknowledgements through a pika channel (no answer to wait for), for both pika drivers."""

    ch: Any

    async def ack(self, d: Delivery) -> None:
        self.ch.basic_ack(d.handle)

    async def nack(self, d: Delivery, *, requeue: bool) -> None:
        self.ch.basic_nack(d.handle, requeue=requeue)

    async def reject(self, d: Delivery, *, requeue: bool) -> None:
        self.ch.basic_reject(d.handle, requeue=requeue)


class BlockingChan(PikaSettle):
    def __init__(self, conn: pika.BlockingConnection, confirm: bool) -> None:
        self.conn = conn
        self.ch = conn.channel()
        if confirm:
            self.ch.confirm_delivery()
        self.inbox: list[Delivery] = []
        self._returned: list[tuple[int, bytes]] = []
        self.ch.add_on_return_callback(lambda _ch, m, _p, body: self._returned.append((m.reply_code, body)))

    async def declare(self, name: str = "", *, durable: bool = False, exclusive: bool = False) -> str:
        ok = self.ch.queue_declare(name, durable=durable, exclusive=exclusive)
        return str(ok.method.queue)

    async def ready(self, name: str) -> int:
        return int(self.ch.queue_declare(name, passive=True).method.message_count)

    async def publish(
        self, routing_key: str, body: bytes, props: dict[str, Any] | None = None, *, exchange: str = "", mandatory: bool = False
    ) -> None:
        try:
            self.ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(**(props or {})), mandatory=mandatory)
        except pika.exceptions.UnroutableError:
            pass  # confirm mode: returned (the return callback has it), then acked

    async def qos(self, prefetch: int) -> None:
        self.ch.basic_qos(prefetch_count=prefetch)

    async def consume(self, queue: str, *, no_ack: bool = False) -> None:
        def on_message(_ch: Any, m: Any, p: Any, body: bytes) -> None:
            self.inbox.append(Delivery(body, props_of(p), m.redelivered, m.exchange, m.routing_key, m.delivery_tag))

        self.ch.basic_consume(queue, on_message, auto_ack=no_ack)

    async def next(self) -> Delivery:
        deadline = time.monotonic() + WAIT
        while not self.inbox:
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"no delivery within {WAIT:g}s")
            self.conn.process_data_events(time_limit=0.05)
        return self.inbox.pop(0)

    async def returned(self) -> list[tuple[int, bytes]]:
        self.conn.process_data_events(time_limit=0)
        return list(self._returned)

    async def tx_select(self) -> None:
        self.ch.tx_select()

    async def tx_commit(self) -> None:
        self.ch.tx_commit()

    async def tx_rollback(self) -> None:
        self.ch.tx_rollback()


class BlockingConn:
    def __init__(self, conn: pika.BlockingConnection) -> None:
        self.conn = conn

    async def channel(self, *, confirm: bool = False) -> Chan:
        return BlockingChan(self.conn, confirm)

    async def idle(self, seconds: float) -> None:
        self.conn.process_data_events(time_limit=seconds)  # heartbeats go on meanwhile
        if not self.conn.is_open:
            raise ScenarioFailed("the connection closed while idle")

    async def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


class BlockingClient:
    async def connect(self, ctx: Ctx, *, plain: bool = False, tls: bool = False, heartbeat: int | None = None) -> Conn:
        return BlockingConn(pika.BlockingConnection(parameters(ctx, plain=plain, tls=tls, heartbeat=heartbeat)))


def client_version() -> str:
    return f"pika {pika.__version__}"


run = runner(BlockingClient)
