"""Qpid's queue arguments over 0-9-1 (the core's, :mod:`amqp10.broker.core.qpid_queues`):
``no-local`` and ``alternate-exchange``; RabbitMQ's own arguments keep RabbitMQ's meaning."""

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


def test_a_deleted_queues_messages_go_to_its_alternate_exchange_not_its_dead_letter_exchange(
    tmp_path: Path,
) -> None:
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("dead")
            ch.queue_bind("dead", "amq.fanout")
            ch.queue_declare("ae", arguments={"alternate-exchange": "amq.fanout"})
            ch.queue_declare("dlx", arguments={"x-dead-letter-exchange": "amq.fanout"})
            for q in ("ae", "dlx"):
                ch.basic_publish("", q, q.encode())
                ch.queue_delete(q)
            assert ch.basic_get("dead", auto_ack=True)[2] == b"ae"
            assert ch.queue_declare("dead", passive=True).method.message_count == 0
        finally:
            conn.close()
