"""Random sequences of 0-9-1 methods against the front end, in memory (no sockets).

Whatever a client sends, the handler must answer within the protocol: a channel
or connection close with a reply code, never a Python exception out of
``handle``, and its bookkeeping (delivery tags, prefetch counts) must stay
consistent.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp10.amqp091 import ChannelClosed, ChannelState, ConnectionState
from amqp10.amqp091 import Connection as Client
from amqp10.amqp091 import methods as m
from amqp10.broker.amqp091 import Amqp091Handler, BrokerConnection
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker

QUEUES = st.sampled_from(["a", "b", "", "amq.x"])
EXCHANGES = st.sampled_from(["", "x", "amq.direct", "amq.fanout", "missing"])
KEYS = st.sampled_from(["a", "b", "k"])
FLAGS = st.booleans()
TAGS = st.integers(min_value=0, max_value=6)

OPS = st.one_of(
    st.builds(lambda q, d, e, a, p: m.QueueDeclare(queue=q, durable=d, exclusive=e, auto_delete=a, passive=p), QUEUES, FLAGS, FLAGS, FLAGS, FLAGS),
    st.builds(lambda x, t, p: m.ExchangeDeclare(exchange=x, type=t, passive=p), EXCHANGES, st.sampled_from(["direct", "fanout", "topic", "bogus"]), FLAGS),
    st.builds(lambda q, x, k: m.QueueBind(queue=q, exchange=x, routing_key=k), QUEUES, EXCHANGES, KEYS),
    st.builds(lambda q, x, k: m.QueueUnbind(queue=q, exchange=x, routing_key=k), QUEUES, EXCHANGES, KEYS),
    st.builds(lambda x, k, mand: (m.BasicPublish(exchange=x, routing_key=k, mandatory=mand), b"body"), EXCHANGES, KEYS, FLAGS),
    st.builds(lambda q, n: m.BasicGet(queue=q, no_ack=n), QUEUES, FLAGS),
    st.builds(lambda q, n, e, t: m.BasicConsume(queue=q, no_ack=n, exclusive=e, consumer_tag=t), QUEUES, FLAGS, FLAGS, st.sampled_from(["", "t1"])),
    st.builds(lambda t: m.BasicCancel(consumer_tag=t), st.sampled_from(["t1", "zz"])),
    st.builds(lambda t, mu: m.BasicAck(delivery_tag=t, multiple=mu), TAGS, FLAGS),
    st.builds(lambda t, mu, r: m.BasicNack(delivery_tag=t, multiple=mu, requeue=r), TAGS, FLAGS, FLAGS),
    st.builds(lambda t, r: m.BasicReject(delivery_tag=t, requeue=r), TAGS, FLAGS),
    st.builds(lambda n, g: m.BasicQos(prefetch_count=n, global_=g), st.integers(0, 3), FLAGS),
    st.just(m.BasicRecover(requeue=True)),  # requeue=false closes the connection (540)
    st.builds(lambda q, u, e: m.QueueDelete(queue=q, if_unused=u, if_empty=e), QUEUES, FLAGS, FLAGS),
    st.builds(lambda q: m.QueuePurge(queue=q), QUEUES),
    st.builds(lambda x, u: m.ExchangeDelete(exchange=x, if_unused=u), EXCHANGES, FLAGS),
    st.just(m.ConfirmSelect()),
    st.just(m.TxSelect()),
    st.just(m.TxCommit()),
    st.just(m.TxRollback()),
    st.just("close-channel"),
)


class InMemory:
    """A client engine wired to the broker's front end through byte buffers."""

    def __init__(self, broker: Broker | None = None) -> None:
        self.broker = broker or Broker(BrokerConfig())
        self.server = BrokerConnection("server")
        self.handler = Amqp091Handler(self.broker, self.server)
        self.client = Client("client")
        self.client_events: list[Any] = []
        self.pump()

    def pump(self) -> None:
        for _ in range(100):
            c2s = self.client.data_to_send()
            if c2s:
                self.handler.handle(self.server.receive_data(c2s))
            self.handler.handle(self.server.poll_events())
            s2c = self.server.data_to_send()
            if s2c:
                self.client_events += self.client.receive_data(s2c)
            if not c2s and not s2c:
                return
        raise AssertionError("the pair did not settle")

    def channel(self, n: int) -> bool:
        state = self.client.channels.get(n)
        if state is None:
            self.client.open_channel(n)
            self.pump()
        return self.client.channels.get(n) is ChannelState.OPEN

    def send(self, n: int, op: Any) -> None:
        if op == "close-channel":
            self.client.close_channel(n)
        elif isinstance(op, tuple):
            method, body = op
            self.client.send_content(n, method, m.BasicProperties(), body)
        else:
            self.client.send_method(n, op)
        self.pump()


def check_bookkeeping(h: Amqp091Handler) -> None:
    for ch in h.channels.values():
        assert ch.unacked_count == len(ch.unacked)
        for c in ch.consumers.values():
            mine = sum(1 for _, _, owner in ch.unacked.values() if owner is c)
            assert c.unacked == mine
    for q in h.vhost.queues():
        assert q.count >= 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([1, 2]), OPS), max_size=40))
def test_random_method_sequences_stay_within_the_protocol(ops: list[tuple[int, Any]]) -> None:
    pair = InMemory()
    assert pair.client.state is ConnectionState.OPEN
    for n, op in ops:
        if pair.client.state is not ConnectionState.OPEN:
            break  # a hard error closed the connection, as it may
        if not pair.channel(n):
            continue
        pair.send(n, op)
        check_bookkeeping(pair.handler)
    # every connection ends cleanly: the exclusive queues go with it
    if pair.client.state is ConnectionState.OPEN:
        pair.client.close()
        pair.pump()
    pair.handler.cleanup()
    assert all(getattr(q, "owner", None) is None for q in pair.handler.vhost.queues())  # (the only connection)


class Guarded:
    """Permissions (an ``Authorizer``) that refuse everything named ``secret*``."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def denial(self, user: str | None, vhost: str, action: Any, kind: Any, name: str) -> Exception | None:
        self.asked.append((name, action))
        return PermissionError(name) if name.startswith("secret") else None

    def vhost_denial(self, user: str | None, vhost: str) -> Exception | None:
        return None

    def has_tag(self, user: str | None, tag: str) -> bool:
        return False


def test_permissions_are_asked_and_refusals_are_403() -> None:
    guard = Guarded()
    pair = InMemory(Broker(BrokerConfig(), permissions=guard))
    pair.channel(1)
    pair.client.send_method(1, m.QueueDeclare(queue="secret-q"))
    pair.pump()
    [closed] = [e for e in pair.client_events if isinstance(e, ChannelClosed)]
    assert (closed.reply_code, closed.reply_text) == (
        403,
        "ACCESS_REFUSED - access to queue 'secret-q' in vhost '/' refused for user 'guest'",
    )
    assert ("secret-q", "configure") in guard.asked
    pair.channel(2)
    pair.client.send_method(2, m.QueueDeclare(queue="open-q"))
    pair.client.send_method(2, m.QueueBind(queue="open-q", exchange="amq.direct", routing_key="k"))
    pair.client.send_content(2, m.BasicPublish(exchange="amq.direct", routing_key="k"), m.BasicProperties(), b"x")
    pair.client.send_method(2, m.BasicGet(queue="open-q", no_ack=True))
    pair.pump()
    assert {("open-q", "configure"), ("open-q", "write"), ("amq.direct", "read"), ("amq.direct", "write"), ("open-q", "read")} <= set(guard.asked)


def test_permissions_given_while_connected_decide_the_next_publish() -> None:
    """Without permissions a publish is not asked about; permissions the broker gets while
    a connection is open decide its next publish (nothing was remembered per connection)."""
    pair = InMemory()
    pair.channel(1)
    pair.client.send_method(1, m.ExchangeDeclare(exchange="secret-x", type="fanout"))
    pair.client.send_content(1, m.BasicPublish(exchange="secret-x"), m.BasicProperties(), b"x")
    pair.pump()
    assert pair.client.channels[1] is ChannelState.OPEN
    guard = Guarded()
    pair.broker.permissions = guard
    pair.client.send_content(1, m.BasicPublish(exchange="secret-x"), m.BasicProperties(), b"x")
    pair.pump()
    [closed] = [e for e in pair.client_events if isinstance(e, ChannelClosed)]
    assert (closed.reply_code, closed.reply_text) == (
        403,
        "ACCESS_REFUSED - access to exchange 'secret-x' in vhost '/' refused for user 'guest'",
    )
    assert guard.asked == [("secret-x", "write")]


def test_a_broker_without_a_users_file_is_not_asked_about_each_publish() -> None:
    """The service's broker without a users file has a checker that allows everything
    (``PermissionChecker.allow_all``): a publish does not ask it (a call per message that is
    not compiled); permissions given to the broker later are asked again."""
    from amqp10.broker.permissions import PermissionChecker

    pair = InMemory(Broker(BrokerConfig(), permissions=PermissionChecker.allow_all()))
    asked: list[str] = []
    denial = pair.broker.denial

    def counted(*args: Any, **kwargs: Any) -> str | None:
        asked.append(args[2])
        return denial(*args, **kwargs)

    pair.broker.denial = counted  # type: ignore[method-assign]
    pair.channel(1)
    pair.client.send_method(1, m.ExchangeDeclare(exchange="secret-x", type="fanout"))
    pair.pump()
    for _ in range(3):
        pair.client.send_content(1, m.BasicPublish(exchange="secret-x"), m.BasicProperties(), b"x")
    pair.pump()
    assert pair.client.channels[1] is ChannelState.OPEN and asked == []
    guard = Guarded()
    pair.broker.permissions = guard
    pair.client.send_content(1, m.BasicPublish(exchange="secret-x"), m.BasicProperties(), b"x")
    pair.pump()
    assert guard.asked == [("secret-x", "write")]
