"""The 0-9-1 rows, written once against a small client interface that each 0-9-1 client
driver implements (``pika_blocking.py``, ``pika_async.py``, ``aiopika.py``).

A driver module gives a :class:`Client` (connect) whose :class:`Conn` opens
:class:`Chan`\\ s; :func:`runner` turns it into the ``run(ctx)`` the matrix calls. The
scenarios read a 1.0 row in 0-9-1 terms (pre-settled is no-ack, rejected is
``basic.reject`` without requeue, released is ``basic.nack`` with requeue), add 0-9-1's
own rows, and cross protocols with our 1.0 client (``amqp10.connect``) on the other side:
the mapping checked is the one in ``docs/protocols.md``.

Queues are plain names (0-9-1 has no address syntax); the 1.0 side uses
``ctx.ep.address(name)`` (``/queue/NAME`` on RabbitMQ). Every queue a scenario declares
is new (the ``Ctx`` prefix) and not durable, as the 1.0 side of RabbitMQ declares it.
Every wait is bounded: ``WAIT`` per operation, ``LIMIT`` per scenario.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from amqp10.client import connect as connect10
from amqp10.message import Message
from amqp10.types import Accepted

from . import Ctx, ScenarioFailed, check

__all__ = ["LIMIT", "WAIT", "Chan", "Client", "Conn", "Delivery", "next_from", "runner"]

WAIT = 10.0  # seconds for any one operation
LIMIT = 60.0  # seconds for a whole scenario
HEARTBEAT = 1  # seconds, asked for in the idle-timeout row
LARGE = 1024 * 1024


@dataclass
class Delivery:
    """A message as a driver got it: basic properties in pika's names and forms
    (``timestamp`` in whole seconds, ``expiration`` the string of milliseconds)."""

    body: bytes
    props: dict[str, Any]
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""
    handle: Any = field(default=None, repr=False)
    """What the driver needs to settle it."""


class Chan(Protocol):
    async def declare(self, name: str = "", *, durable: bool = False, exclusive: bool = False) -> str:
        """queue.declare; returns the queue's name (a server-named one for ``""``)."""

    async def ready(self, name: str) -> int:
        """A passive queue.declare's message count: the messages ready in ``name``."""

    async def publish(
        self, routing_key: str, body: bytes, props: dict[str, Any] | None = None, *, exchange: str = "", mandatory: bool = False
    ) -> None:
        """basic.publish; on a confirming channel, returns once the broker acknowledged it."""

    async def qos(self, prefetch: int) -> None: ...

    async def consume(self, queue: str, *, no_ack: bool = False) -> None:
        """basic.consume; what arrives is taken with :meth:`next`."""

    async def next(self) -> Delivery:
        """The next delivery to this channel's consumers (waits at most ``WAIT``)."""

    async def ack(self, d: Delivery) -> None: ...

    async def nack(self, d: Delivery, *, requeue: bool) -> None: ...

    async def reject(self, d: Delivery, *, requeue: bool) -> None: ...

    async def returned(self) -> list[tuple[int, bytes]]:
        """(reply code, body) of the messages returned so far (mandatory, unroutable; a
        publish on a confirming channel that is returned is not an error)."""

    async def tx_select(self) -> None: ...

    async def tx_commit(self) -> None: ...

    async def tx_rollback(self) -> None: ...


class Conn(Protocol):
    async def channel(self, *, confirm: bool = False) -> Chan:
        """A new channel (``confirm``: in publisher-confirm mode)."""

    async def idle(self, seconds: float) -> None:
        """Do nothing for ``seconds`` but the client's own I/O (heartbeats)."""

    async def close(self) -> None: ...


class Client(Protocol):
    async def connect(self, ctx: Ctx, *, plain: bool = False, tls: bool = False, heartbeat: int | None = None) -> Conn:
        """Connect to ``ctx.ep`` (its PLAIN user if ``plain``, else guest/guest; its TLS port
        with its CA if ``tls``)."""


Fn = Callable[[Client, Ctx], Awaitable["str | None"]]


async def next_from(inbox: asyncio.Queue[Delivery]) -> Delivery:
    """The next of the deliveries an async driver queues up, waiting at most ``WAIT``."""
    try:
        return await asyncio.wait_for(inbox.get(), WAIT)
    except TimeoutError:
        raise ScenarioFailed(f"no delivery within {WAIT:g}s") from None


def queue(ctx: Ctx, name: str = "q") -> str:
    return f"interop.{ctx.scenario}.{ctx.prefix}.{name}"


async def _get_one(ch: Chan, q: str, body: bytes) -> Delivery:
    await ch.consume(q)
    d = await ch.next()
    check(d.body == body, f"got {d.body[:40]!r}, sent {body[:40]!r}")
    return d


# -- rows shared with 1.0 ------------------------------------------------------------------
async def sasl_plain(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx, plain=True)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.publish(q, b"plain")
        await ch.ack(await _get_one(ch, q, b"plain"))
    finally:
        await conn.close()
    return None


async def at_most_once(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.consume(q, no_ack=True)
        bodies = [b"one", b"two", b"three"]
        for b in bodies:
            await ch.publish(q, b)
        got = [(await ch.next()).body for _ in bodies]
        check(got == bodies, f"received {got}, sent {bodies}")
        check(await ch.ready(q) == 0, "no-ack deliveries left messages in the queue")
    finally:
        await conn.close()
    return None


async def at_least_once(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        bodies = [b"one", b"two", b"three"]
        for b in bodies:
            await ch.publish(q, b)
        await ch.consume(q)
        got = [await ch.next() for _ in bodies]
        check([d.body for d in got] == bodies, f"received {[d.body for d in got]}, sent {bodies}")
        for d in got:
            await ch.ack(d)
    finally:
        await conn.close()
    conn = await client.connect(ctx)  # acknowledged: nothing comes back after the close
    try:
        ch = await conn.channel()
        check(await ch.ready(q) == 0, "acknowledged messages came back")
    finally:
        await conn.close()
    return None


async def outcome_reject(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.publish(q, b"reject me")
        await ch.reject(await _get_one(ch, q, b"reject me"), requeue=False)
        check(await ch.ready(q) == 0, "a rejected message (requeue=false) stayed in the queue")
    finally:
        await conn.close()
    return None


async def outcome_release(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.publish(q, b"again")
        first = await _get_one(ch, q, b"again")
        check(not first.redelivered, "a first delivery was marked redelivered")
        await ch.nack(first, requeue=True)
        again = await ch.next()
        check(again.body == b"again" and again.redelivered, f"after nack+requeue: {again}")
        await ch.ack(again)
    finally:
        await conn.close()
    return None


async def large_message(client: Client, ctx: Ctx) -> str | None:
    body = os.urandom(LARGE)
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.publish(q, body)
        await ch.ack(await _get_one(ch, q, body))
    finally:
        await conn.close()
    return None


HEADERS: dict[str, Any] = {  # (no float: pika cannot encode one in a field table)
    "str": "text",
    "int": 42,
    "negative": -7,
    "big": 2**40,
    "true": True,
    "false": False,
    "table": {"nested": "yes", "n": 1},
    "array": [1, "two", True],
}


def full_props(reply_to: str = "replies") -> dict[str, Any]:
    """Every basic property, headers of several field-table types."""
    return {
        "content_type": "application/json",
        "content_encoding": "identity",
        "headers": dict(HEADERS),
        "delivery_mode": 2,
        "priority": 5,
        "correlation_id": "corr-1",
        "reply_to": reply_to,
        "expiration": "60000",
        "message_id": "msg-1",
        "timestamp": 1700000000,
        "type": "order.created",
        "user_id": None,  # checked by the broker against the login: left out
        "app_id": "interop",
    }


def _props_diff(sent: dict[str, Any], got: dict[str, Any]) -> list[str]:
    return [f"{k}: sent {v!r}, got {got.get(k)!r}" for k, v in sent.items() if v is not None and got.get(k) != v]


async def message_sections(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        props = full_props()
        await ch.publish(q, b'{"all": "properties"}', props)
        d = await _get_one(ch, q, b'{"all": "properties"}')
        diff = _props_diff(props, d.props)
        check(not diff, "; ".join(diff))
        await ch.ack(d)
    finally:
        await conn.close()
    return None


async def request_response(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        server, caller = await conn.channel(), await conn.channel()
        requests = await server.declare(queue(ctx, "requests"))
        replies = await caller.declare("", exclusive=True)  # server-named
        check(replies.startswith("amq.gen-"), f"a server-named queue is called {replies!r}")
        await caller.consume(replies)
        await server.consume(requests)
        for i in range(3):
            await caller.publish(requests, b"ping %d" % i, {"reply_to": replies, "correlation_id": str(i)})
            req = await server.next()
            await server.publish(req.props["reply_to"], req.body.upper(), {"correlation_id": req.props["correlation_id"]})
            await server.ack(req)
            rep = await caller.next()
            check((rep.body, rep.props.get("correlation_id")) == (b"PING %d" % i, str(i)), f"reply {rep}")
            await caller.ack(rep)
    finally:
        await conn.close()
    return None


async def tls(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx, tls=True)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.publish(q, b"secret")
        await ch.ack(await _get_one(ch, q, b"secret"))
    finally:
        await conn.close()
    return None


async def idle_timeout(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx, heartbeat=HEARTBEAT)
    try:
        await conn.idle(HEARTBEAT * 3.5)  # missing 2 heartbeats would close it
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.publish(q, b"still here")
        await ch.ack(await _get_one(ch, q, b"still here"))
    finally:
        await conn.close()
    return None


async def transactions(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        await ch.tx_select()
        await ch.publish(q, b"rolled back")
        await ch.tx_rollback()
        check(await ch.ready(q) == 0, "a rolled-back publish arrived")
        await ch.publish(q, b"committed")
        check(await ch.ready(q) == 0, "a publish arrived before its commit")
        await ch.tx_commit()
        check(await ch.ready(q) == 1, "a committed publish did not arrive")
        d = await _get_one(ch, q, b"committed")
        await ch.ack(d)  # an acknowledgement in a transaction waits for the commit too
        await ch.tx_rollback()
        await ch.nack(d, requeue=True)
        await ch.tx_commit()
        again = await ch.next()
        check(again.body == b"committed" and again.redelivered, f"after a rolled-back ack: {again}")
        await ch.ack(again)
        await ch.tx_commit()
    finally:
        await conn.close()
    return None


# -- 0-9-1's own rows ----------------------------------------------------------------------
async def publisher_confirms(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel(confirm=True)
        q = await ch.declare(queue(ctx), durable=True)
        for i in range(5):  # each publish returns once confirmed
            await ch.publish(q, b"%d" % i, {"delivery_mode": 2})
        check(await ch.ready(q) == 5, "confirmed messages are not all in the queue")
    finally:
        await conn.close()
    return None


async def mandatory_return(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        # with confirms, as clients do it (aio-pika sees returns only so): the return
        # comes before the confirm, which the publish waits for
        ch = await conn.channel(confirm=True)
        await ch.publish(queue(ctx, "nowhere"), b"lost", exchange="amq.direct", mandatory=True)
        got = await ch.returned()
        check(got == [(312, b"lost")], f"returned: {got}")
    finally:
        await conn.close()
    return None


async def prefetch(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))
        for i in range(5):
            await ch.publish(q, b"%d" % i)
        await ch.qos(2)
        await ch.consume(q)
        first = [await ch.next() for _ in range(2)]
        check(await ch.ready(q) == 3, "more than the prefetch count left the queue")
        await ch.ack(first[0])
        third = await ch.next()
        check(third.body == b"2", f"after one ack the next delivery is {third.body!r}")
        check(await ch.ready(q) == 2, "one ack let more than one message out")
    finally:
        await conn.close()
    return None


async def direct_reply_to(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        server, caller = await conn.channel(), await conn.channel()
        requests = await server.declare(queue(ctx, "requests"))
        await caller.consume("amq.rabbitmq.reply-to", no_ack=True)
        await server.consume(requests)
        await caller.publish(requests, b"ping", {"reply_to": "amq.rabbitmq.reply-to"})
        req = await server.next()
        to = req.props.get("reply_to") or ""
        check(to.startswith("amq.rabbitmq.reply-to."), f"reply-to arrived as {to!r}")
        await server.publish(to, b"pong")
        await server.ack(req)
        check((await caller.next()).body == b"pong", "no reply through direct reply-to")
    finally:
        await conn.close()
    return None


# -- across protocols ----------------------------------------------------------------------
async def _connect10(ctx: Ctx) -> Any:
    user, password = ctx.ep.plain or ("guest", "guest")
    return await connect10(f"amqp://{user}:{password}@127.0.0.1:{ctx.ep.port}", timeout=WAIT)


async def cross_091_to_10(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))  # as RabbitMQ's /queue/NAME declares it
        props = full_props()
        await ch.publish(q, b"from 0-9-1", props)
    finally:
        await conn.close()
    async with await _connect10(ctx) as c, await c.open_receiver(ctx.ep.address(q), credit=1) as rcv:
        d = await rcv.receive(timeout=WAIT)
        msg: Message = d.message
        await d.accept()
    got = {
        "body": msg.body,
        "content_type": msg.content_type,
        "content_encoding": msg.content_encoding,
        "application_properties": msg.application_properties,
        "durable": msg.durable,
        "priority": msg.priority,
        "correlation_id": msg.correlation_id,
        "reply_to": msg.reply_to,
        "ttl": msg.ttl,
        "id": msg.id,
        "creation_time": msg.creation_time,
        "subject": msg.subject,
        "x-basic-type": (msg.message_annotations or {}).get("x-basic-type"),
        "x-basic-app-id": (msg.message_annotations or {}).get("x-basic-app-id"),
    }
    want = {
        "body": [b"from 0-9-1"] if isinstance(msg.body, list) else b"from 0-9-1",
        "content_type": "application/json",
        "content_encoding": "identity",
        "application_properties": {k: v for k, v in HEADERS.items() if k not in ("table", "array")},
        "durable": True,
        "priority": 5,
        "correlation_id": "corr-1",
        "reply_to": "replies",
        "ttl": 60,  # seconds
        "id": "msg-1",
        "creation_time": _seconds(1700000000, msg.creation_time),
        "subject": q,
        "x-basic-type": "order.created",
        "x-basic-app-id": "interop",
    }
    diff = [f"{k}: want {v!r}, got {got[k]!r}" for k, v in want.items() if got[k] != v]
    check(not diff, "; ".join(diff))
    return None


def _seconds(s: int, like: Any) -> Any:
    """``s`` in the form the client gave a creation-time (datetime or float seconds)."""
    if isinstance(like, dt.datetime):
        return dt.datetime.fromtimestamp(s, dt.UTC)
    return float(s)


async def cross_10_to_091(client: Client, ctx: Ctx) -> str | None:
    conn = await client.connect(ctx)
    try:
        ch = await conn.channel()
        q = await ch.declare(queue(ctx))  # as RabbitMQ's /queue/NAME declares it
        async with await _connect10(ctx) as c, await c.open_sender(ctx.ep.address(q)) as snd:
            m = Message(
                body=[b"from 1.0"],
                body_type="data",
                application_properties={"k": "v", "n": 3, "yes": True},
                durable=True, priority=3, id="m-10", correlation_id="c-10", reply_to="back-10",
                content_type="application/x-interop", creation_time=1700000000.0, ttl=30,  # s
            )  # fmt: skip
            outcome = await snd.send(m, timeout=WAIT)
            check(isinstance(outcome, Accepted), f"the 1.0 send was answered {outcome!r}")
        d = await _get_one(ch, q, b"from 1.0")
        await ch.ack(d)
    finally:
        await conn.close()
    want = {
        "headers": {"k": "v", "n": 3, "yes": True},
        "delivery_mode": 2,
        "priority": 3,
        "message_id": "m-10",
        "correlation_id": "c-10",
        "reply_to": "back-10",
        "content_type": "application/x-interop",
        "expiration": "30000",
        "timestamp": 1700000000,
    }
    diff = _props_diff(want, d.props)
    check(not diff, "; ".join(diff))
    return None


SCENARIOS: dict[str, Fn] = {
    "sasl-plain": sasl_plain,
    "at-most-once": at_most_once,
    "at-least-once": at_least_once,
    "outcome-reject": outcome_reject,
    "outcome-release": outcome_release,
    "large-message": large_message,
    "message-sections": message_sections,
    "request-response": request_response,
    "tls": tls,
    "idle-timeout": idle_timeout,
    "transactions": transactions,
    "publisher-confirms": publisher_confirms,
    "mandatory-return": mandatory_return,
    "prefetch": prefetch,
    "direct-reply-to": direct_reply_to,
    "cross-091-to-10": cross_091_to_10,
    "cross-10-to-091": cross_10_to_091,
}


def runner(client: Callable[[], Client]) -> Callable[[Ctx], str | None]:
    """The ``run(ctx)`` of a driver: the scenario in a fresh asyncio loop, at most ``LIMIT`` s."""

    def run(ctx: Ctx) -> str | None:
        fn = SCENARIOS[ctx.scenario]

        async def bounded() -> str | None:
            with anyio.fail_after(LIMIT):
                return await fn(client(), ctx)

        return anyio.run(bounded)

    return run
