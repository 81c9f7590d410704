"""Qpid's ``no-local`` queue argument over 0-9-1 (the core's, :mod:`amqp10.broker.core.no_local`):
an exclusive queue declared with it does not take what its own connection publishes."""

from __future__ import annotations

from pathlib import Path

import pika

from tests.broker.conftest import broker_with


def test_an_exclusive_no_local_queue_skips_its_own_connections_publishes(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        params = pika.ConnectionParameters("127.0.0.1", b.port)
        me, other = pika.BlockingConnection(params), pika.BlockingConnection(params)
        try:
            ch, och = me.channel(), other.channel()
            ch.confirm_delivery()
            och.confirm_delivery()  # (each publish waits until it is routed)
            ch.queue_declare("nl", exclusive=True, arguments={"no-local": True})
            ch.queue_declare("plain", exclusive=True)
            for q in ("nl", "plain"):
                ch.queue_bind(q, "amq.fanout")
            ch.basic_publish("amq.fanout", "", b"local")
            och.basic_publish("amq.fanout", "", b"foreign")
            counts = [
                ch.queue_declare(q, passive=True).method.message_count for q in ("nl", "plain")
            ]
            assert counts == [1, 2]
            assert ch.basic_get("nl", auto_ack=True)[2] == b"foreign"
        finally:
            me.close()
            other.close()
