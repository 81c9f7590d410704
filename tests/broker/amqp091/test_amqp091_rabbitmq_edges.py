"""Where aio-pika's, aiormq's, amqplib's and kombu's suites found the 0-9-1 front end
answering otherwise than RabbitMQ 3.10 (each checked against it): the order of a
``queue.delete``'s reply and the cancels it causes, exclusive queues re-declared
otherwise, the default and ``amq.*`` exchanges declared, unbinding where an end is
gone, ``channel.flow``, and how many channels a connection opens. In memory (a client
engine against the front end, no store) and, where the store's commit matters, over a
socket."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from amqp10.amqp091 import (
    ChannelClosed,
    ConnectionClosed,
    MethodReceived,
)
from amqp10.amqp091 import methods as m
from amqp10.amqp091.fields import Float32, Int8, Int64, LongString, Timestamp
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.core.store import Store
from tests.broker.conftest import broker_with
from tests.broker.harness import SyncJournal

from .test_amqp091_fuzz import InMemory
from .test_amqp091_pika import EngineClient


def _methods(pair: InMemory) -> list[tuple[int, str]]:
    return [(e.channel, type(e.method).__name__) for e in pair.client_events if isinstance(e, MethodReceived)]


def _closed(pair: InMemory) -> tuple[int, str]:
    (closed,) = [e for e in pair.client_events if isinstance(e, (ChannelClosed, ConnectionClosed))]
    return closed.reply_code, closed.reply_text


def test_queue_delete_is_answered_before_the_cancels_it_causes() -> None:
    """RabbitMQ sends delete-ok, then basic.cancel to each consumer; amqplib and kombu
    take a cancel that comes first for the reply's place."""
    pair = InMemory()
    assert pair.channel(1) and pair.channel(2)
    pair.send(1, m.QueueDeclare(queue="q"))
    pair.send(1, m.BasicConsume(queue="q", consumer_tag="mine"))
    pair.send(2, m.BasicConsume(queue="q", consumer_tag="theirs"))
    pair.client_events.clear()
    pair.send(1, m.QueueDelete(queue="q"))
    assert _methods(pair) == [(1, "QueueDeleteOk"), (1, "BasicCancel"), (2, "BasicCancel")]


def test_queue_delete_no_wait_still_cancels() -> None:
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="q"))
    pair.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    pair.client_events.clear()
    pair.send(1, m.QueueDelete(queue="q", no_wait=True))
    assert _methods(pair) == [(1, "BasicCancel")]


def test_delete_ok_goes_first_when_it_waits_for_the_store(tmp_path: Path) -> None:
    """With a store the reply waits for the commit; the cancels wait behind it."""
    with broker_with(tmp_path) as b:
        c = EngineClient(b.port)
        try:
            ch = c.open_channel()
            c.conn.send_method(ch, m.QueueDeclare(queue="q", durable=True))
            c.conn.send_method(ch, m.BasicConsume(queue="q", consumer_tag="c"))
            c.conn.send_method(ch, m.QueueDelete(queue="q"))
            c.flush()

            def seen() -> list[str]:
                return [type(e.method).__name__ for e in c.events if isinstance(e, MethodReceived)]

            c.until(lambda: "BasicCancel" in seen())
            assert seen()[-2:] == ["QueueDeleteOk", "BasicCancel"]
        finally:
            c.close()


def _declare_twice(first: dict[str, Any], second: dict[str, Any]) -> tuple[int, str]:
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="q", **first))
    pair.client_events.clear()
    pair.send(1, m.QueueDeclare(queue="q", **second))
    return _closed(pair)


@pytest.mark.parametrize(
    ("first", "second"),
    [({"exclusive": True}, {}), ({"auto_delete": True}, {"auto_delete": True, "exclusive": True})],
)
def test_exclusive_declared_otherwise_is_resource_locked(first: dict[str, Any], second: dict[str, Any]) -> None:
    """RabbitMQ checks the exclusive owner before durable, auto-delete and arguments
    (aiormq's test_exclusive_queue_locked: same connection, another channel)."""
    code, text = _declare_twice(first, second)
    assert code == 405
    assert text.startswith("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'.")


def test_other_inequivalent_flags_are_still_precondition_failed() -> None:
    code, text = _declare_twice({"durable": True}, {})
    assert (code, text) == (406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
                                 "received 'false' but current is 'true'")  # fmt: skip


def test_a_stream_is_redeclared_with_its_own_arguments_and_refused_with_others() -> None:
    """A stream keeps the arguments it was declared with: declared again with them it is
    answered (it was refused as if it had none), with another ``x-max-age`` it is 406."""
    stream = {"durable": True, "arguments": {"x-queue-type": "stream", "x-max-age": "1D"}}
    pair = InMemory()
    assert pair.channel(1)
    for _ in range(2):
        pair.send(1, m.QueueDeclare(queue="s", **stream))
        assert _methods(pair)[-1] == (1, "QueueDeclareOk")
    pair.send(1, m.QueueDeclare(queue="s", durable=True, arguments={"x-queue-type": "stream", "x-max-age": "2D"}))
    assert _closed(pair) == (406, "PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue 's' in vhost '/': "
                                  "received '2D' but current is '1D'")  # fmt: skip


@pytest.mark.parametrize("queue_type", ["stream", "quorum"])
def test_a_stream_or_quorum_queue_declared_again_without_its_type_is_refused(queue_type: str) -> None:
    """RabbitMQ compares ``x-queue-type``: a stream (or quorum queue) declared again without
    it is refused (a stream was answered)."""
    code, text = _declare_twice({"durable": True, "arguments": {"x-queue-type": queue_type}}, {"durable": True})
    assert (code, text) == (406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': "
                                 f"received none but current is the value '{queue_type}' of type 'longstr'")  # fmt: skip


@pytest.mark.parametrize(
    ("second", "answer"),
    [  # as RabbitMQ 3.10.8 answers (rabbit_amqqueue:assert_equivalence/5: the owner, then durable, auto_delete)
        ({"durable": False}, (406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 's' in vhost '/': "
                                   "received 'false' but current is 'true'")),
        ({"durable": True, "auto_delete": True}, (406, "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for "
                                                       "queue 's' in vhost '/': received 'true' but current is 'false'")),
        ({"durable": True, "exclusive": True}, (405, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue "
                                                     "'s' in vhost '/'. It could be originally declared on another "
                                                     "connection or the exclusive property value does not match that "
                                                     "of the original declaration.")),
    ],
)  # fmt: skip
def test_a_stream_declared_again_non_durable_auto_delete_or_exclusive_is_refused(
    second: dict[str, Any], answer: tuple[int, str]
) -> None:
    """A stream is durable, never auto-delete nor exclusive: declared again otherwise it is
    refused as a queue of those properties would be (each was answered declare-ok)."""
    stream = {"x-queue-type": "stream"}
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="s", durable=True, arguments=stream))
    pair.client_events.clear()
    pair.send(1, m.QueueDeclare(queue="s", arguments=stream, **second))
    assert _closed(pair) == answer


@pytest.mark.parametrize("queue_type", ["stream", "quorum"])
@pytest.mark.parametrize(
    ("first", "refused"),
    [  # rabbit_queue_type_util's checks, in their order: auto-delete, exclusive owner, durable
        ({"durable": False}, "non-durable"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": False, "exclusive": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_a_stream_or_quorum_queue_declared_non_durable_auto_delete_or_exclusive_is_refused(
    queue_type: str, first: dict[str, Any], refused: str
) -> None:
    """The first declaration of a stream or quorum queue that is not durable, or is auto-delete
    or exclusive, is refused as RabbitMQ 3.10.8 refuses it, and makes no queue (it was made)."""
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="s", arguments={"x-queue-type": queue_type}, **first))
    assert _closed(pair) == (406, f"PRECONDITION_FAILED - invalid property '{refused}' for queue 's' in vhost '/'")
    assert "s" not in pair.broker.default.nodes


def test_a_stream_an_attach_made_is_a_stream_to_a_re_declaration() -> None:
    """A stream a 1.0 attach made has a stream's type: declared again with it, it is answered;
    without it, refused (it had no arguments, and was answered both ways)."""
    pair = InMemory()
    pair.broker.default.lookup("s", create=True, kind="stream")
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="s", durable=True, arguments={"x-queue-type": "stream"}))
    assert _methods(pair)[-1] == (1, "QueueDeclareOk")
    pair.send(1, m.QueueDeclare(queue="s", durable=True))
    assert _closed(pair) == (406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 's' in vhost '/': "
                                  "received none but current is the value 'stream' of type 'longstr'")  # fmt: skip


def _declared_twice(first: dict[str, Any], second: dict[str, Any]) -> list[tuple[int, str]]:
    pair = InMemory()
    assert pair.channel(1)
    for arguments in (first, second):  # (durable: a stream is, and one declared again otherwise is refused)
        pair.send(1, m.QueueDeclare(queue="q", durable=True, arguments=arguments))
    return _methods(pair)


@pytest.mark.parametrize(("first", "second"), [({}, {"x-queue-type": "classic"}), ({"x-queue-type": "classic"}, {})])
def test_a_classic_queues_type_may_be_given_or_left_out(first: dict[str, Any], second: dict[str, Any]) -> None:
    """RabbitMQ's one exception (``rabbit_misc:assert_field_equivalence/4``): each was refused."""
    assert _declared_twice(first, second) == [(1, "QueueDeclareOk")] * 2


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"x-consumer-timeout": 5000}, {}),
        ({}, {"x-consumer-timeout": 5000}),
        ({"x-consumer-timeout": 5000}, {"x-consumer-timeout": 6000}),
        ({"x-queue-type": "stream"}, {"x-queue-type": "stream", "x-message-ttl": 5000}),
        ({"x-max-length": 5}, {"x-max-length": Int8(5)}),  # (the same value, another integer type)
        ({"x-max-length": 5}, {"x-max-length": Timestamp(5)}),
    ],
)
def test_what_rabbitmq_does_not_compare_may_differ(first: dict[str, Any], second: dict[str, Any]) -> None:
    """An argument RabbitMQ 3.10 does not compare for the queue's type
    (``rabbit_queue_type:arguments(queue_arguments, Type)``: not ``x-consumer-timeout``,
    nor a stream's ``x-message-ttl``) may differ or be left out; an integer of another field
    type is the same integer (each was refused, but the last two)."""
    assert _declared_twice(first, second) == [(1, "QueueDeclareOk")] * 2


@pytest.mark.parametrize(
    ("first", "second", "shown"),
    [  # each as RabbitMQ 3.10.8 answered it
        ({"x-max-length": 5}, {"x-max-length": 10}, "x-max-length' for queue 'q' in vhost '/': received '10' but current is '5'"),
        ({"x-message-ttl": 5}, {}, "x-message-ttl' for queue 'q' in vhost '/': received none but current is the value '5' of type 'signedint'"),
        ({}, {"x-message-ttl": 5}, "x-message-ttl' for queue 'q' in vhost '/': received the value '5' of type 'signedint' but current is none"),
        ({}, {"x-queue-type": "stream"}, "x-queue-type' for queue 'q' in vhost '/': received the value 'stream' of type 'longstr' but current is none"),
        ({"x-max-length": 5, "x-message-ttl": 1}, {"x-max-length": 6, "x-message-ttl": 2}, "x-message-ttl' for queue 'q' in vhost '/': received '2' but current is '1'"),
        ({"x-max-length": 5}, {"x-max-length": "5"}, "x-max-length' for queue 'q' in vhost '/': received '5' but current is '5'"),
        ({"x-max-length": 5}, {"x-max-length": 5.0}, "x-max-length' for queue 'q' in vhost '/': received '5.0' but current is '5'"),
        ({"x-max-length": 5}, {"x-max-length": True}, "x-max-length' for queue 'q' in vhost '/': received 'true' but current is '5'"),
        ({"x-max-length": 5}, {"x-max-length": None}, "x-max-length' for queue 'q' in vhost '/': received none but current is '5'"),
        ({"x-max-length": 5}, {"x-max-length": b"raw"}, "x-max-length' for queue 'q' in vhost '/': received 'raw' but current is '5'"),
        ({"x-max-length": 5}, {"x-max-length": datetime(2024, 5, 1, 12, 0, tzinfo=UTC)}, "x-max-length' for queue 'q' in vhost '/': received '1714564800' but current is '5'"),
        ({"x-max-length": 5}, {"x-max-length": [True, None, 2.5, Decimal("1.5"), b"x"]},
         "x-max-length' for queue 'q' in vhost '/': received '[{bool,true},{void,undefined},{double,2.5},{decimal,{1,15}},{binary,<<\"x\">>}]' but current is '5'"),
        ({"x-max-length": 5}, {}, "x-max-length' for queue 'q' in vhost '/': received none but current is the value '5' of type 'signedint'"),
        ({"x-queue-master-locator": 2.1}, {"x-queue-master-locator": Float32(2.1)},  # (any type is taken there)
         "x-queue-master-locator' for queue 'q' in vhost '/': received '2.0999999046325684' but current is '2.1'"),  # (a float is 32 bits)
    ],
)  # fmt: skip
def test_an_inequivalent_argument_is_refused_in_rabbitmqs_words(
    first: dict[str, Any], second: dict[str, Any], shown: str
) -> None:
    """RabbitMQ's text (``rabbit_misc:assert_args_equivalence/4``, ``val/1``): the values alone
    where both are given, a value with its field type where the other is left out, compared
    exactly (an integer is not the float of its value, nor true), in the order RabbitMQ
    compares the arguments of the queue's type (the texts said 'the value' without its type)."""
    assert _declare_twice({"arguments": first}, {"arguments": second}) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg '" + shown,
    )


@pytest.mark.parametrize(
    ("first", "second", "shown"),
    [
        ({"x-max-length": 5}, {"x-max-length": Decimal("1.5")},
         "x-max-length' for queue 'q' in vhost '/': received the value '1.5' of type 'decimal' but current is '5'"),
        # (x-queue-master-locator: RabbitMQ 3.10 takes any type there at the first declaration, and compares it)
        ({"x-queue-master-locator": Decimal("3.0")}, {"x-queue-master-locator": 3},
         "x-queue-master-locator' for queue 'q' in vhost '/': received '3' but current is the value '3.0' of type 'decimal'"),
        ({"x-queue-master-locator": Decimal("1E+1")}, {"x-queue-master-locator": Decimal("10.0")},
         "x-queue-master-locator' for queue 'q' in vhost '/': received the value '10.0' of type 'decimal' but current is the value '10' of type 'decimal'"),
    ],
)  # fmt: skip
def test_a_decimal_given_both_times_and_not_the_same_is_refused_406_with_its_value(
    first: dict[str, Any], second: dict[str, Any], shown: str
) -> None:
    """Where both declarations give the argument and one is a decimal RabbitMQ 3.10 crashes
    (``rabbit_misc:val/1`` takes the decimal's ``{Scale, Digits}`` for ``{Type, Value}``:
    541, the connection closed); here the 406 the comparison means, the decimal shown as
    its value and type (it was shown as '{1,15}', the term no user wrote)."""
    assert _declare_twice({"durable": True, "arguments": first}, {"durable": True, "arguments": second}) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg '" + shown,
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-queue-master-locator": Decimal("1.50")},
        {"x-queue-type": "classic", "x-queue-master-locator": Decimal("3.0")},
        {"x-queue-master-locator": [Int8(3)]},
        {"x-queue-master-locator": {"n": Int64(3)}},
        {"x-queue-master-locator": [Float32(2.5), LongString(b"\xff"), Timestamp(5)]},
    ],
)
def test_a_queue_declared_with_a_decimal_is_declared_again_so_after_a_restart(tmp_path: Path, arguments: Any) -> None:
    """A declaration's arguments are stored with their types: after a restart a stream or
    queue declared with a decimal is declared again with it and answered (the decimal came
    back as its text, and the same declaration was refused 406 after a restart only); so
    is one with a field type inside an array or a table, which RabbitMQ compares with its
    type (an Int8 came back an int: '[{byte,3}]' but current is '[{signedint,3}]'). In
    x-queue-master-locator: an argument RabbitMQ 3.10 compares on a classic queue and takes
    of any type (a decimal or an array in x-quorum-initial-group-size or
    x-stream-max-segment-size-bytes, as these were, it refuses at declaration)."""
    store = Store(tmp_path / "store.sqlite3")
    try:
        before = Broker(BrokerConfig(), journal=SyncJournal(store))
        after = Broker(BrokerConfig())
        for broker in (before, after):
            if broker is after:
                broker.recover(store)
            pair = InMemory(broker)
            assert pair.channel(1)
            pair.send(1, m.QueueDeclare(queue="q", durable=True, arguments=arguments))
            assert [e for e in pair.client_events if isinstance(e, ChannelClosed)] == []
            assert _methods(pair)[-1] == (1, "QueueDeclareOk")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"x-max-length": -1}, "'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"),
        ({"x-max-length": "ten"}, '\'x-max-length\' for queue \'q\' in vhost \'/\': "expected integer, got longstr"'),
        ({"x-max-length-bytes": Timestamp(5)}, '\'x-max-length-bytes\' for queue \'q\' in vhost \'/\': "expected integer, got timestamp"'),
        ({"x-quorum-initial-group-size": Decimal("3.0")}, '\'x-quorum-initial-group-size\' for queue \'q\' in vhost \'/\': "expected integer, got decimal"'),
        ({"x-queue-type": "quorum", "x-quorum-initial-group-size": [Int8(3)]}, '\'x-quorum-initial-group-size\' for queue \'q\' in vhost \'/\': "expected integer, got array"'),
        ({"x-queue-type": "quorum", "x-quorum-initial-group-size": 0}, "'x-quorum-initial-group-size' for queue 'q' in vhost '/': {value_zero,0}"),
        ({"x-queue-type": "stream", "x-initial-cluster-size": {"n": 1}}, '\'x-initial-cluster-size\' for queue \'q\' in vhost \'/\': "expected integer, got table"'),
        ({"x-queue-type": "stream", "x-stream-max-segment-size-bytes": Float32(2.5)}, '\'x-stream-max-segment-size-bytes\' for queue \'q\' in vhost \'/\': "expected integer, got float"'),
        ({"x-queue-type": "stream", "x-max-age": 7}, "'x-max-age' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
        ({"x-queue-type": "stream", "x-max-age": "7 days"}, "'x-max-age' for queue 'q' in vhost '/': invalid_max_age"),
        ({"x-expires": 0}, "'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
        ({"x-message-ttl": 315_360_000_001}, "'x-message-ttl' for queue 'q' in vhost '/': {value_too_large,315360000001}"),
        ({"x-dead-letter-exchange": b"dlx"}, "'x-dead-letter-exchange' for queue 'q' in vhost '/': {unacceptable_type,binary}"),
        ({"x-dead-letter-routing-key": "k"}, "'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"),
        ({"x-dead-letter-strategy": "twice"}, "'x-dead-letter-strategy' for queue 'q' in vhost '/': invalid_dlx_strategy"),
        ({"x-max-priority": 256}, "'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}"),
        ({"x-overflow": "block"}, "'x-overflow' for queue 'q' in vhost '/': invalid_overflow"),
        ({"x-overflow": True}, "'x-overflow' for queue 'q' in vhost '/': {unacceptable_type,bool}"),
        ({"x-queue-mode": "eager"}, '\'x-queue-mode\' for queue \'q\' in vhost \'/\': "unsupported queue mode \'eager\'"'),
        ({"x-queue-version": 3}, '\'x-queue-version\' for queue \'q\' in vhost \'/\': "unsupported queue version \'3\'"'),
        ({"x-single-active-consumer": 1}, "'x-single-active-consumer' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
        ({"x-queue-type": "mirrored"}, '\'x-queue-type\' for queue \'q\' in vhost \'/\': "unsupported queue type \'mirrored\'"'),
        ({"x-queue-type": "quorum", "x-queue-leader-locator": "nearest"}, "'x-queue-leader-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg"),
        # x-queue-type is checked first, the others in RabbitMQ's order (declare_args/0)
        ({"x-max-length": -1, "x-queue-type": 1, "x-expires": 0}, "'x-queue-type' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
        ({"x-max-length": -1, "x-expires": 0}, "'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
    ],
)  # fmt: skip
def test_a_declarations_arguments_are_checked_in_rabbitmqs_words(arguments: dict[str, Any], error: str) -> None:
    """RabbitMQ 3.10's checks of each argument's type and value at declaration
    (rabbit_amqqueue:check_declare_arguments/2) and its text; a decimal or an array for an
    integer argument was taken (and kept), a bad value refused in other words."""
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="q", durable=True, arguments=arguments))
    assert _closed(pair) == (406, "PRECONDITION_FAILED - invalid arg " + error)


def test_arguments_it_gives_no_meaning_to_are_taken_and_kept_as_rabbitmq_does() -> None:
    """Any other argument is kept, whatever its type (RabbitMQ's), and a re-declaration
    without it is equivalent (it is not compared); it was refused as unknown."""
    broker = Broker(BrokerConfig())
    pair = InMemory(broker)
    assert pair.channel(1)
    arguments = {"x-custom": Decimal("1.5"), "x-queue-master-locator": "min-masters", "x-queue-mode": "lazy", "x-queue-version": 2}
    pair.send(1, m.QueueDeclare(queue="q", durable=True, arguments=arguments))
    compared = {k: v for k, v in arguments.items() if k != "x-custom"}  # (a classic queue's: _COMPARED)
    pair.send(1, m.QueueDeclare(queue="q", durable=True, arguments=compared))
    assert _methods(pair)[-2:] == [(1, "QueueDeclareOk"), (1, "QueueDeclareOk")]
    assert broker.default.nodes["q"].arguments == arguments


@pytest.mark.parametrize("passive", [True, False])
def test_declaring_the_default_exchange_is_refused(passive: bool) -> None:
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.ExchangeDeclare(exchange="", type="direct", passive=passive))
    assert _closed(pair) == (403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_an_amq_exchange_is_redeclared_as_it_is_but_not_created() -> None:
    pair = InMemory()
    assert pair.channel(1) and pair.channel(2)
    pair.send(1, m.ExchangeDeclare(exchange="amq.direct", type="direct", durable=True))
    assert _methods(pair)[-1] == (1, "ExchangeDeclareOk")
    pair.client_events.clear()
    pair.send(2, m.ExchangeDeclare(exchange="amq.new", type="direct"))
    assert _closed(pair) == (403, "ACCESS_REFUSED - exchange name 'amq.new' contains reserved prefix 'amq.*'")


@pytest.mark.parametrize(
    "unbind",
    [
        m.QueueUnbind(queue="q", exchange="gone", routing_key="k"),
        m.QueueUnbind(queue="gone", exchange="amq.direct", routing_key="k"),
        m.ExchangeUnbind(destination="x", source="gone", routing_key="k"),
        m.ExchangeUnbind(destination="gone", source="x", routing_key="k"),
    ],
)
def test_unbinding_where_an_end_is_gone_succeeds(unbind: Any) -> None:
    """aio-pika's cleanup unbinds from an auto-delete exchange the broker already removed."""
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="q"))
    pair.send(1, m.ExchangeDeclare(exchange="x", type="fanout"))
    pair.client_events.clear()
    pair.send(1, unbind)
    assert _methods(pair) == [(1, type(unbind).RESPONSES[0].__name__)]


def test_binding_to_a_missing_exchange_is_still_not_found() -> None:
    pair = InMemory()
    assert pair.channel(1)
    pair.send(1, m.QueueDeclare(queue="q"))
    pair.send(1, m.QueueBind(queue="q", exchange="gone", routing_key="k"))
    assert _closed(pair) == (404, "NOT_FOUND - no exchange 'gone' in vhost '/'")


def test_channel_flow_as_rabbitmq_answers_it(tmp_path: Path) -> None:
    """active=true: flow-ok; active=false: the connection closes with 540, no flow-ok."""
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        ch = conn.channel()
        assert ch.flow(True) is True
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            ch.flow(False)
        assert (closed.value.reply_code, closed.value.reply_text) == (540, "NOT_IMPLEMENTED - active=false")


def test_channel_numbers_up_to_65535_within_channel_max(tmp_path: Path) -> None:
    """RabbitMQ limits how many channels are open, not their numbers (aiormq's test_bad_channel)."""
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        try:
            ch = conn.channel(65535)
            ch.queue_declare("", exclusive=True)
            assert ch.channel_number == 65535
        finally:
            conn.close()


def test_cc_and_bcc_headers_route_by_extra_keys_and_bcc_is_not_delivered(tmp_path: Path) -> None:
    """RabbitMQ's sender-selected distribution: a publish reaches the queues bound by its
    routing key and by each key of its ``CC`` and ``BCC`` headers, each queue once; the
    ``BCC`` header is taken out before delivery, ``CC`` stays."""
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        try:
            ch = conn.channel()
            ch.exchange_declare("sd", "direct")
            for name in ("to", "cc", "bcc", "other"):
                ch.queue_declare(name)
                ch.queue_bind(name, "sd", routing_key=name)
            ch.queue_bind("cc", "sd", routing_key="cc2")  # two of its keys: still one copy
            headers = {"CC": ["cc", "cc2"], "BCC": ["bcc"], "keep": 1}
            ch.basic_publish("sd", "to", b"hello", pika.BasicProperties(headers=headers))
            got = {}
            for name in ("to", "cc", "bcc"):
                method, props, body = ch.basic_get(name, auto_ack=True)
                assert body == b"hello" and method.routing_key == "to"
                got[name] = props.headers
                assert ch.basic_get(name, auto_ack=True) == (None, None, None)  # each queue once
            assert got["to"] == got["cc"] == got["bcc"] == {"CC": ["cc", "cc2"], "keep": 1}
            assert ch.basic_get("other", auto_ack=True) == (None, None, None)
            ch.basic_publish("sd", "nowhere", b"x", pika.BasicProperties(headers={"CC": "other"}))  # not an array
            assert ch.queue_declare("other", passive=True).method.message_count == 0
        finally:
            conn.close()


def _dead_letter(ch: Any, queue: str, headers: dict[str, Any]) -> None:
    ch.basic_publish("", queue, b"m", pika.BasicProperties(headers=headers))
    method, _, _ = ch.basic_get(queue)
    ch.basic_reject(method.delivery_tag, requeue=False)


def _take(ch: Any, queue: str) -> Any:
    """The one message ``queue`` holds (its properties), or None; the queue is then empty."""
    for _ in range(50):  # bounded: a dead letter is routed as the reject is handled
        method, props, _ = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            assert ch.basic_get(queue, auto_ack=True) == (None, None, None)
            return props
        ch.connection.process_data_events(time_limit=0.01)
    return None


def test_a_dead_letter_keeps_its_cc_keys_unless_a_dead_letter_routing_key_is_set(tmp_path: Path) -> None:
    """RabbitMQ: x-death's routing-keys lists the CC keys after the key; a dead letter is
    routed by all of them again, but with x-dead-letter-routing-key by that key alone,
    its CC header removed."""
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        try:
            ch = conn.channel()
            ch.exchange_declare("dlx", "direct")
            for name in ("q", "k", "dl"):
                ch.queue_declare(f"dead-{name}")
                ch.queue_bind(f"dead-{name}", "dlx", routing_key=name)
            ch.queue_declare("q", arguments={"x-dead-letter-exchange": "dlx"})
            ch.queue_declare("rekeyed", arguments={"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dl"})

            _dead_letter(ch, "q", {"CC": ["k"]})
            by_key, by_cc = _take(ch, "dead-q"), _take(ch, "dead-k")
            assert by_key is not None and by_cc is not None
            assert by_key.headers["x-death"][0]["routing-keys"] == ["q", "k"]
            assert by_key.headers["CC"] == ["k"]

            _dead_letter(ch, "rekeyed", {"CC": ["k"]})
            props = _take(ch, "dead-dl")
            assert props is not None and "CC" not in props.headers
            assert props.headers["x-death"][0]["routing-keys"] == ["rekeyed", "k"]
            assert _take(ch, "dead-k") is None
        finally:
            conn.close()


def test_a_dead_letter_is_delivered_as_republished_with_original_expiration(tmp_path: Path) -> None:
    """RabbitMQ republishes a dead letter to the dead-letter exchange with the dead-letter
    routing key (basic.deliver says so: aio-pika's test_dlx checks it), and a message that
    had an expiration loses it, x-death keeping it as original-expiration (test_expiration)."""
    with broker_with(tmp_path) as b:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        try:
            ch = conn.channel()
            ch.exchange_declare("dlx", "direct")
            ch.queue_declare("dead")
            ch.queue_bind("dead", "dlx", routing_key="dl")
            ch.queue_declare("q", arguments={"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dl"})
            ch.basic_publish("", "q", b"m", pika.BasicProperties(expiration="60000", headers={"h": 1}))
            method, _, _ = ch.basic_get("q")
            ch.basic_reject(method.delivery_tag, requeue=False)
            for _ in range(50):  # bounded: the dead letter is routed as the reject is handled
                method, props, body = ch.basic_get("dead", auto_ack=True)
                if method is not None:
                    break
                conn.process_data_events(time_limit=0.01)
            assert method is not None and body == b"m"
            assert (method.exchange, method.routing_key) == ("dlx", "dl")
            assert props.expiration is None and props.headers["h"] == 1
            (death,) = props.headers["x-death"]
            assert death["original-expiration"] == "60000" and death["routing-keys"] == ["q"]
        finally:
            conn.close()
