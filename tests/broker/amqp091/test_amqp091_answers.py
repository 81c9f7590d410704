"""The 0-9-1 front end's answers to what the core says of a publish (one table, ``ANSWERS``)
and of a consume (one table, ``basic.CONSUME_REFUSALS``),
its transactions as records, and direct reply-to through the broker's registry; in
memory, a client engine against the front end (no sockets)."""

from __future__ import annotations

from typing import Any

from amqp10.amqp091 import ChannelClosed, ContentReceived, MethodReceived
from amqp10.amqp091 import methods as m
from amqp10.broker.amqp091.basic import CONSUME_REFUSALS
from amqp10.broker.amqp091.publish import ANSWERS
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, ConsumeResult, PublishResult, QueuedMessage
from amqp10.broker.core.replies import REPLY_TO, DirectReplies

from .test_amqp091_fuzz import InMemory


def _confirming_pair() -> InMemory:
    pair = InMemory()
    assert pair.channel(1)
    pair.client.send_method(1, m.ConfirmSelect())
    pair.pump()
    pair.client_events.clear()
    return pair


def _publish(pair: InMemory, exchange: str, key: str, *, mandatory: bool = False, reply_to: str | None = None) -> None:
    props = m.BasicProperties(reply_to=reply_to)
    pair.client.send_content(1, m.BasicPublish(exchange=exchange, routing_key=key, mandatory=mandatory), props, b"hi")
    pair.pump()


def _seen(pair: InMemory) -> list[Any]:
    """What came back, in order: a returned message as (reply code, text); a confirm as ('ack'|'nack', tag)."""
    out: list[Any] = []
    for e in pair.client_events:
        method = e.method if isinstance(e, (MethodReceived, ContentReceived)) else None
        if isinstance(method, m.BasicReturn):
            out.append((method.reply_code, method.reply_text))
        elif isinstance(method, m.BasicAck):
            out.append(("ack", method.delivery_tag))
        elif isinstance(method, m.BasicNack):
            out.append(("nack", method.delivery_tag))
    return out


def test_every_publish_result_has_an_answer() -> None:
    assert set(ANSWERS) == set(PublishResult)


def test_every_reason_a_queue_refuses_a_consumer_has_an_answer() -> None:
    assert set(CONSUME_REFUSALS) == {r for r in ConsumeResult if r is not ConsumeResult.ADMITTED}


def _consume(pair: InMemory, queue: str, tag: str, *, exclusive: bool = False) -> Any:
    """``basic.consume`` on channel 1: ``("ok", tag)``, or the channel's close as (code, text)."""
    assert pair.channel(1)
    pair.client_events.clear()
    pair.client.send_method(1, m.BasicConsume(queue=queue, consumer_tag=tag, exclusive=exclusive))
    pair.pump()
    (answer,) = pair.client_events
    if isinstance(answer, ChannelClosed):
        return (answer.reply_code, answer.reply_text)
    assert isinstance(answer, MethodReceived) and isinstance(answer.method, m.BasicConsumeOk)
    return ("ok", answer.method.consumer_tag)


def test_a_consume_the_queue_refuses_closes_the_channel_with_the_tables_answer() -> None:
    broker = Broker(BrokerConfig())
    broker.default.declare_queue("q", durable=False)
    holder, other = InMemory(broker), InMemory(broker)
    refused = (403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")
    assert _consume(holder, "q", "shared") == ("ok", "shared")
    assert _consume(other, "q", "mine", exclusive=True) == refused  # in use
    holder.client.send_method(1, m.BasicCancel(consumer_tag="shared"))
    holder.pump()
    assert _consume(holder, "q", "mine", exclusive=True) == ("ok", "mine")
    assert _consume(other, "q", "late") == refused  # held


def test_an_unroutable_mandatory_publish_comes_back_then_is_confirmed() -> None:
    pair = _confirming_pair()
    _publish(pair, "amq.direct", "nowhere", mandatory=True)
    _publish(pair, "amq.direct", "nowhere")  # not mandatory: dropped, confirmed
    assert _seen(pair) == [(312, "NO_ROUTE"), ("ack", 1), ("ack", 2)]


def test_a_publish_to_a_full_queue_is_nacked_not_returned() -> None:
    pair = _confirming_pair()
    args = {"x-max-length": 1, "x-overflow": "reject-publish"}
    pair.client.send_method(1, m.QueueDeclare(queue="small", arguments=args))
    pair.pump()
    _publish(pair, "", "small", mandatory=True)
    _publish(pair, "", "small", mandatory=True)
    assert _seen(pair) == [("ack", 1), ("nack", 2)]
    assert pair.broker.default.queue("small").count == 1  # type: ignore[union-attr]


def test_a_transaction_publishes_and_settles_at_commit_only() -> None:
    pair = InMemory()
    assert pair.channel(1)
    pair.client.send_method(1, m.QueueDeclare(queue="q"))
    pair.client.send_method(1, m.TxSelect())
    pair.pump()
    _publish(pair, "", "q")
    q = pair.broker.default.queue("q")
    assert q is not None and q.count == 0  # waiting in the transaction
    pair.client.send_method(1, m.TxCommit())
    pair.pump()
    assert q.count == 1
    pair.client.send_method(1, m.BasicGet(queue="q"))
    pair.client.send_method(1, m.TxCommit())
    pair.pump()
    pair.client.send_method(1, m.BasicAck(delivery_tag=1))
    pair.client.send_method(1, m.TxRollback())  # the ack is undone
    pair.pump()
    assert len(pair.handler.channels[1].unacked) == 1
    pair.client.send_method(1, m.BasicAck(delivery_tag=1))
    pair.client.send_method(1, m.TxCommit())
    pair.pump()
    assert (len(pair.handler.channels[1].unacked), q.count) == (0, 0)


def test_direct_reply_to_goes_through_the_brokers_registry() -> None:
    broker = Broker(BrokerConfig())
    requester, responder = InMemory(broker), InMemory(broker)
    assert requester.channel(1) and responder.channel(1)
    requester.client.send_method(1, m.BasicConsume(queue=REPLY_TO, no_ack=True, consumer_tag="r"))
    requester.pump()
    address = requester.handler.channels[1].reply_address
    assert DirectReplies.is_reply_address(address)
    assert broker.replies.consumer(broker.default, address) is requester.handler.channels[1]
    assert Broker(BrokerConfig()).replies.consumer(broker.default, address) is None  # per broker, not global
    requester.client_events.clear()
    _publish(responder, "", address)
    requester.pump()
    delivered = [e for e in requester.client_events if isinstance(e, ContentReceived)]
    assert [(e.method, e.body) for e in delivered] == [(m.BasicDeliver(consumer_tag="r", delivery_tag=1, routing_key=address), b"hi")]
    requester.client.close_channel(1)
    requester.pump()
    assert broker.replies.consumer(broker.default, address) is None  # gone with its channel


class _Taker:
    def __init__(self) -> None:
        self.got: list[QueuedMessage] = []

    def deliver_reply(self, msg: QueuedMessage) -> None:
        self.got.append(msg)


def test_reply_addresses_belong_to_their_virtual_host() -> None:
    broker = Broker(BrokerConfig())
    other = broker.add_vhost("other")
    taker = _Taker()
    address = broker.replies.register(broker.default, taker)
    assert address.startswith(REPLY_TO + ".")
    assert broker.replies.consumer(broker.default, address) is taker
    assert broker.replies.consumer(other, address) is None
    assert broker.replies.register(broker.default, taker) != address  # each registration its own
    broker.replies.unregister(address)
    assert broker.replies.consumer(broker.default, address) is None
