"""The 0-10 column's rows: ``qpid.messaging`` (qpid-python 1.36 under Python 2.7, through
interop/qpid_messaging.py) on one side of a queue, our 1.0 client or pika (0-9-1) on the
other, in both directions; the mapping checked is the one in ``docs/protocols.md``.

Every queue is new (the ``Ctx`` prefix), declared with pika first, with a ``.replies``
queue beside it for qpid.messaging's reply-to (which it resolves on the broker).
"""

from __future__ import annotations

from typing import Any

import pika

import amqp10.sync
from amqp10.message import Message

from ..peers.base import PeerUnavailable
from ..qpid_messaging import VERSION, Unavailable, cross_side, python2, sdist
from . import Ctx, check

__all__ = ["client_version", "prepare", "run"]

WAIT = 10.0


def prepare(install: bool = False) -> None:
    try:
        python2()
        sdist()
    except Unavailable as exc:
        raise PeerUnavailable(f"qpid-python {VERSION} cannot run here: {exc}") from None


def client_version() -> str:
    return f"qpid-python {VERSION}"


def _pika(ctx: Ctx) -> pika.BlockingConnection:
    user, password = ctx.ep.plain or ("guest", "guest")
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", ctx.ep.port, credentials=pika.PlainCredentials(user, password), socket_timeout=WAIT
        )
    )


def _queue(ctx: Ctx) -> str:
    """A new queue (and its ``.replies``), declared with 0-9-1."""
    q = f"interop.{ctx.scenario}.{ctx.prefix}"
    c = _pika(ctx)
    try:
        ch = c.channel()
        ch.queue_declare(q)
        ch.queue_declare(f"{q}.replies")
    finally:
        c.close()
    return q


def _url(ctx: Ctx) -> str:
    user, password = ctx.ep.plain or ("guest", "guest")
    return f"amqp://{user}:{password}@127.0.0.1:{ctx.ep.port}"


def cross_010_to_10(ctx: Ctx) -> None:
    q = _queue(ctx)
    cross_side("send", ctx.ep, q)
    with amqp10.sync.connect(_url(ctx), timeout=WAIT) as c:
        d = c.open_receiver(q, credit=1).receive(timeout=WAIT)
        msg = d.message
        d.accept()
    got = {
        "body": msg.body,
        "content_type": msg.content_type,
        "subject": msg.subject,
        "correlation_id": msg.correlation_id,
        "reply_to": msg.reply_to,
        "durable": msg.durable,
        "priority": msg.priority,
        "ttl": msg.ttl,
        "group_id": msg.group_id,
        "application_properties": msg.application_properties,
    }
    want = {
        "body": [b"from 0-10"] if isinstance(msg.body, list) else b"from 0-10",
        "content_type": "text/plain",
        "subject": "subj-010",
        "correlation_id": "corr-010",
        "reply_to": f"{q}.replies",
        "durable": True,
        "priority": 6,
        "ttl": 60,  # seconds
        "group_id": "g1",
        "application_properties": {"str": "text", "int": 42, "true": True},
    }
    check(got == want, f"1.0 got {_diff(got, want)}")


def cross_10_to_010(ctx: Ctx) -> None:
    q = _queue(ctx)
    with amqp10.sync.connect(_url(ctx), timeout=WAIT) as c:
        c.open_sender(q).send(
            Message(
                body="from 1.0",
                subject="subj-10",
                correlation_id="corr-10",
                reply_to=f"{q}.replies",
                durable=True,
                priority=3,
                group_id="g2",
                application_properties={"str": "text", "int": 42, "true": True},
            )
        )
    got = cross_side("receive", ctx.ep, q)
    want = {
        "content": "from 1.0",
        "content_type": "text/plain",
        "subject": "subj-10",
        "correlation_id": "corr-10",
        "reply_to": f"{q}.replies",
        "durable": True,
        "priority": 3,
        "properties": {
            "str": "text",
            "int": 42,
            "true": True,
            "JMSXGroupID": "g2",
            "qpid.subject": "subj-10",
            "x-amqp-0-10.routing-key": "subj-10",  # (qpid.messaging's: the routing key)
        },
    }
    check(got == want, f"0-10 got {_diff(got, want)}")


def cross_010_to_091(ctx: Ctx) -> None:
    q = _queue(ctx)
    cross_side("send", ctx.ep, q)
    c = _pika(ctx)
    try:
        method, p, body = c.channel().basic_get(q, auto_ack=True)
    finally:
        c.close()
    check(method is not None, "0-9-1 got nothing")
    got = {
        "body": body,
        "content_type": p.content_type,
        "correlation_id": p.correlation_id,
        "reply_to": p.reply_to,
        "delivery_mode": p.delivery_mode,
        "priority": p.priority,
        "expiration": p.expiration,
        "headers": p.headers,
    }
    want = {
        "body": b"from 0-10",
        "content_type": "text/plain",
        "correlation_id": "corr-010",
        "reply_to": f"{q}.replies",
        "delivery_mode": 2,
        "priority": 6,
        "expiration": "60000",  # (ms; qpid.messaging's ttl is in seconds)
        "headers": {"str": "text", "int": 42, "true": True, "JMSXGroupID": "g1"},  # (the group: docs/protocols.md)
    }
    check(got == want, f"0-9-1 got {_diff(got, want)}")


def cross_091_to_010(ctx: Ctx) -> None:
    q = _queue(ctx)
    c = _pika(ctx)
    try:
        c.channel().basic_publish(
            "",
            q,
            b"from 0-9-1",
            pika.BasicProperties(
                content_type="text/plain",
                correlation_id="corr-091",
                reply_to=f"{q}.replies",
                delivery_mode=2,
                priority=4,
                headers={"str": "text", "int": 42, "true": True},
            ),
        )
    finally:
        c.close()
    got = cross_side("receive", ctx.ep, q)
    want = {
        "content": "from 0-9-1",
        "content_type": "text/plain",
        "subject": q,  # (0-9-1's routing key is 1.0's subject, kept where qpid.messaging reads one)
        "correlation_id": "corr-091",
        "reply_to": f"{q}.replies",
        "durable": True,
        "priority": 4,
        "properties": {"str": "text", "int": 42, "true": True, "qpid.subject": q, "x-amqp-0-10.routing-key": q},
    }
    check(got == want, f"0-10 got {_diff(got, want)}")


def _diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    return ", ".join(f"{k}={got.get(k)!r} (want {v!r})" for k, v in want.items() if got.get(k) != v) or "?"


ROWS = {
    "cross-010-to-10": cross_010_to_10,
    "cross-10-to-010": cross_10_to_010,
    "cross-010-to-091": cross_010_to_091,
    "cross-091-to-010": cross_091_to_010,
}


def run(ctx: Ctx) -> str | None:
    ROWS[ctx.scenario](ctx)
    return None
