"""The AMQP 0-9-1 front end: one engine connection's events turned into core operations.

Nothing here does I/O. :class:`Amqp091Handler` answers the handshake
(``start-ok`` checked against the broker's users, ``open`` against its
virtual hosts), then carries out each channel's methods on the
protocol-neutral core (:mod:`amqp10.broker.core`): ``exchange.*`` and
``queue.*`` on the virtual host, ``basic.publish`` through
:meth:`VirtualHost.route`, ``basic.consume`` as a core
:class:`~amqp10.broker.core.Consumer` whose credit is its prefetch room,
``ack``/``nack``/``reject`` as the node's ``ack``/``release``/``reject``.
What is 0-9-1's alone lives here: delivery tags, prefetch, publisher
confirms, ``tx.*``, ``mandatory`` returns, and RabbitMQ's reply texts.

A channel's state and consumers are in :mod:`.channel`; the ``exchange.*`` and
``queue.*`` methods in :mod:`.declare` (bound here as methods).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Final

from ...amqp091 import (
    BasicProperties,
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionLost,
    ConnectionState,
    ContentReceived,
    Event,
    IllegalStateError,
    LoginRequested,
    Method,
    MethodReceived,
    ReplyCode,
    SecretUpdateRequested,
    VirtualHostRequested,
    reply_text,
)
from ...amqp091 import methods as m
from ...amqp091.auth import plain_response
from ...sasl.credentials import CredentialStore
from ...sasl.mechanisms import PlainServer, ServerOutcome
from ...types import SaslCode, timestamp
from ..core import (
    AccessRefused,
    Action,
    Broker,
    Exchange,
    ModelError,
    NotFound,
    PreconditionFailed,
    Queue,
    QueuedMessage,
    ResourceKind,
    ResourceLocked,
    Stream,
    VirtualHost,
)
from ..guard import LoginHook
from . import declare
from .channel import (
    REPLY_TO,
    BasicConsumer,
    ChannelContext,
    ChannelError,
    Encoded,
    HardError,
    _replies,
    _token,
)
from .message import Content, from_publish, unpack

__all__ = ["Amqp091Handler", "BasicConsumer", "BrokerConnection"]

log = logging.getLogger("amqp10.broker")

NO_ROUTE: Final = 312
LINGER_SECONDS: Final = 5.0
_REPLY_PREFIX: Final = REPLY_TO + "."
_ERROR_CODES: Final[dict[type[ModelError], int]] = {
    NotFound: ReplyCode.NOT_FOUND,
    AccessRefused: ReplyCode.ACCESS_REFUSED,
    ResourceLocked: ReplyCode.RESOURCE_LOCKED,
    PreconditionFailed: ReplyCode.PRECONDITION_FAILED,
}


class BrokerConnection(Connection):
    """The server-role engine with what the network driver asks of an engine.

    After answering a client's ``connection.close`` the broker keeps reading (and
    discarding) until the client closes the socket, for at most ``linger`` seconds,
    as RabbitMQ does: a client may still be writing frames it queued before its
    close (amqplib interleaves channels), and closing under it breaks its pipe.
    """

    linger = LINGER_SECONDS

    _linger_until: float | None = None
    _peer_gone = False

    @property
    def is_closed(self) -> bool:
        if self.state is not ConnectionState.CLOSED:
            return False
        if self.close_received is None or self.close_sent is not None or self._peer_gone:
            return True  # not closed by the client (or it has gone): nothing to wait for
        return self._linger_until is not None and self._linger_until <= 0

    def receive_data(self, data: bytes) -> list[Event]:
        if not data:
            self._peer_gone = True
        return super().receive_data(data)

    recheck: Callable[[], bool] | None = None
    """Called on every tick while set, at least once a second while it returns True
    (the front end waits for the broker's memory to drop below its limit)."""
    before_send: Callable[[], None] | None = None
    """Called on every tick: the driver ticks just before it takes the bytes to write,
    so what the front end queued since (store commits' confirms) goes out together."""

    def tick(self, now: float) -> float | None:
        if self.before_send is not None:
            self.before_send()
        deadline = super().tick(now)
        if self.state is ConnectionState.CLOSED and self.close_received is not None and self.close_sent is None:
            if self._linger_until is None:
                self._linger_until = now + self.linger
            elif now >= self._linger_until:
                self._linger_until = 0.0
                return None
            return self._linger_until
        if self.recheck is not None and self.recheck():
            return now + 1.0 if deadline is None else min(deadline, now + 1.0)
        return deadline


class Amqp091Handler:
    """Drives one 0-9-1 engine connection on behalf of the broker.

    ``users`` checks PLAIN/AMQPLAIN logins (None: no users file). With
    ``allow_anonymous``, ``guest``/``guest`` logs in as the anonymous user
    (RabbitMQ's default user), unless the users file has a ``guest`` of its own.
    ``tls_identity`` (a verified client certificate's subject) is what
    EXTERNAL logs in as.
    """

    # exchange.* and queue.* (see declare.py)
    _exchange_declare = declare.exchange_declare
    _exchange_delete = declare.exchange_delete
    _exchange_bind = declare.exchange_bind
    _exchange_unbind = declare.exchange_unbind
    _check_source = declare.check_source
    _check_destination = declare.check_destination
    _check_binding = declare.check_binding
    _bind = declare.bind
    _unbind = declare.unbind
    _queue_name = declare.queue_name
    _queue_node = declare.queue_node
    _queue_declare = declare.queue_declare
    _check_equivalent = declare.check_equivalent
    _queue_bind = declare.queue_bind
    _queue_unbind = declare.queue_unbind
    _queue_purge = declare.queue_purge
    _queue_delete = declare.queue_delete

    def __init__(
        self,
        broker: Broker,
        conn: Connection,
        *,
        users: CredentialStore | None = None,
        allow_anonymous: bool = True,
        tls_identity: str | None = None,
        wake: Callable[[], None] = lambda: None,
        pause: Callable[[], None] = lambda: None,
        resume: Callable[[], None] = lambda: None,
    ) -> None:
        self.broker = broker
        self.conn = conn
        self.pause = pause
        """Stop reading from the client (publishing blocked: the broker is out of memory)."""
        self.resume = resume
        self.memory_blocked = False
        self._published = False  # a publish in this batch of events
        self._dropping = False  # dropping publishes (no confirms) while the store has no room
        self.users = users
        self.allow_anonymous = allow_anonymous
        self.tls_identity = tls_identity
        self.wake = wake
        self.user: str | None = None
        self.login_hook: LoginHook | None = None
        """The service's [security] guard for this connection's login (None: none)."""
        self.refusal: str | None = None
        """Set by the service or the hook: refuse the open with this text (a [security] limit)."""
        self.vhost: VirtualHost = broker.default
        self.channels: dict[int, ChannelContext] = {}
        self.closed = False
        self._handling = False
        self._waiting: list[Event] | None = None
        """While an answer waits for the store's commit (:meth:`_ok_committed`): the events
        that came meanwhile, handled in order once it has gone out; None otherwise."""
        self._confirming: set[int] = set()  # channels with acks to send after this batch
        self.encoded_deliver = conn.dialect.plain_ids(m.BasicDeliver) is not None
        """Deliveries go out with their stored exchange and routing key as they are
        (``send_encoded_content``): this version lays ``basic.deliver`` out as 0-9-1 does."""
        if isinstance(conn, BrokerConnection):
            conn.before_send = self._flush_all_confirms
        broker.connections.add(self)
        self._methods: dict[type[Method], Callable[[ChannelContext, Any], None]] = {
            m.ExchangeDeclare: self._exchange_declare,
            m.ExchangeDelete: self._exchange_delete,
            m.ExchangeBind: self._exchange_bind,
            m.ExchangeUnbind: self._exchange_unbind,
            m.QueueDeclare: self._queue_declare,
            m.QueueBind: self._queue_bind,
            m.QueueUnbind: self._queue_unbind,
            m.QueuePurge: self._queue_purge,
            m.QueueDelete: self._queue_delete,
            m.BasicQos: self._basic_qos,
            m.BasicConsume: self._basic_consume,
            m.BasicCancel: self._basic_cancel,
            m.BasicGet: self._basic_get,
            m.BasicAck: self._basic_ack,
            m.BasicNack: self._basic_nack,
            m.BasicReject: self._basic_reject,
            m.BasicRecover: self._basic_recover,
            m.BasicRecoverAsync: self._basic_recover,
            m.ConfirmSelect: self._confirm_select,
            m.TxSelect: self._tx_select,
            m.TxCommit: self._tx_commit,
            m.TxRollback: self._tx_rollback,
        }

    # -- output helpers ------------------------------------------------------------------------
    def send_method(self, channel: int, method: Method) -> None:
        try:
            self.conn.send_method(channel, method)
        except IllegalStateError:
            pass  # the channel or the connection is closing: nothing more goes out

    def send_content(self, channel: int, method: Method | Encoded, properties: bytes, body: bytes) -> None:
        try:
            if isinstance(method, tuple):
                self.conn.send_encoded_content(channel, method[0], method[1], properties, body)
            else:
                self.conn.send_content(channel, method, properties, body)
        except IllegalStateError:
            pass
        self.wake_if_idle()

    def wake_if_idle(self) -> None:
        """Output made outside our own event handling (another connection's publish, a
        store commit) needs the driver told; inside, the driver writes afterwards."""
        if not self._handling:
            self.wake()

    # -- events ---------------------------------------------------------------------------------
    def handle(self, events: list[Event]) -> None:
        if self._waiting is not None:
            self._wait_with(events)
            return
        handling, self._handling = self._handling, True
        try:
            rest = iter(events)
            for e in rest:
                self._handle(e)
                if self._waiting is not None:  # an answer waits for a commit: so does the rest
                    self._wait_with(list(rest))
                    break
        finally:
            self._handling = handling
        if self._published:
            self._published = False
            if not self.memory_blocked and not self.broker.memory_ok():
                self._block_publishers()
        self._flush_all_confirms()

    def _flush_all_confirms(self) -> None:
        if self._confirming:
            confirming, self._confirming = self._confirming, set()
            for number in confirming:
                ch = self.channels.get(number)
                if ch is not None:
                    self.flush_confirms(ch)

    def _handle(self, e: Event) -> None:
        tp = type(e)
        if tp is ContentReceived:
            assert isinstance(e, ContentReceived)
            self._on_method(e.channel, e)
        elif tp is MethodReceived:
            assert isinstance(e, MethodReceived)
            self._on_method(e.channel, e)
        elif tp is ChannelOpened:
            assert isinstance(e, ChannelOpened)
            self.channels[e.channel] = ChannelContext(self, e.channel)
        elif tp is ChannelClosed:
            assert isinstance(e, ChannelClosed)
            ch = self.channels.pop(e.channel, None)
            if ch is not None:
                ch.close()
        elif tp is ChannelFlowChanged:
            assert isinstance(e, ChannelFlowChanged)
            flow_ch = self.channels.get(e.channel)
            if flow_ch is not None:
                flow_ch.flow_active = e.active
                if e.active:
                    for c in list(flow_ch.consumers.values()):
                        c.node.consumer_ready(c)
        elif tp is LoginRequested:
            assert isinstance(e, LoginRequested)
            self._on_login(e)
        elif tp is VirtualHostRequested:
            assert isinstance(e, VirtualHostRequested)
            self._on_open(e)
        elif tp is SecretUpdateRequested:
            self.conn.update_secret_ok()
        elif tp in (ConnectionClosed, ConnectionFailed, ConnectionLost):
            self.cleanup()

    # -- connection -----------------------------------------------------------------------------
    def authenticate(self, mechanism: str, username: str | None, password: str | None) -> tuple[bool, str | None]:
        """(ok, user): the login checked against the users file (None user: anonymous)."""
        if mechanism == "EXTERNAL":
            return self.tls_identity is not None, self.tls_identity
        if username is None or password is None:
            return False, None
        if self.users is not None and username and password:
            try:
                outcome = PlainServer(self.users).step(plain_response(username, password))
            except Exception:  # a malformed name: refused like a wrong password
                outcome = None
            if isinstance(outcome, ServerOutcome) and outcome.code == SaslCode.OK:
                return True, outcome.identity
        if self.allow_anonymous and username == "guest" and password == "guest":
            if self.users is None or not any(
                self.users.lookup("guest", mech) is not None
                for mech in PlainServer._LOOKUP_ORDER
            ):
                return True, None
        return False, None

    def _on_login(self, e: LoginRequested) -> None:
        ok, user = self.authenticate(e.mechanism, e.username, e.password)
        hook = self.login_hook
        if not ok:
            log.info("0-9-1 login refused for %r (%s)", e.username, e.mechanism)
            if hook is not None:
                hook.failed(e.username, f"0-9-1 {e.mechanism} login refused")
            self.conn.reject_login()
            return
        self.user = user
        if hook is not None:
            over = hook.succeeded(user)
            if over is not None and self.refusal is None:
                self.refusal = over
        self.conn.accept_login()

    def _on_open(self, e: VirtualHostRequested) -> None:
        if self.refusal is not None:  # a [security] limit: refused at the open, as RabbitMQ
            self.conn.refuse_open(ReplyCode.NOT_ALLOWED, self.refusal)
            return
        vhost = self.broker.vhost(e.virtual_host or "/")
        if vhost is None:
            self.conn.refuse_open(ReplyCode.NOT_ALLOWED, f"vhost {e.virtual_host} not found")
            return
        if self.broker.vhost_denial(vhost, self.user) is not None:
            self.conn.refuse_open(ReplyCode.ACCESS_REFUSED)
            return
        self.vhost = vhost
        self.conn.accept_open()

    def _block_publishers(self) -> None:
        """Memory above the limit: tell the client (connection.blocked, if it understands)
        and stop reading from it until the broker's queues shrink, as RabbitMQ's alarm does."""
        log.info("0-9-1 publisher blocked: %s", self.broker.alarm or "queued messages exceed the memory limit")
        self.memory_blocked = True
        self.conn.block("low on memory")
        self.pause()
        if isinstance(self.conn, BrokerConnection):
            self.conn.recheck = self._memory_recovered
        self.wake_if_idle()

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm: a connection is blocked at its next publish (as
        RabbitMQ blocks publishing connections only: a consumer's acks must go on), and
        unblocked as soon as the alarm clears (not at the next once-a-second recheck)."""
        if not raised:
            self._memory_recovered()
            self.wake_if_idle()

    def _memory_recovered(self) -> bool:
        """Checked once a second while blocked; False (stop checking) once unblocked."""
        if not self.memory_blocked or self.closed:
            return False
        if not self.broker.memory_ok():
            return True
        self.memory_blocked = False
        if self.conn.state is ConnectionState.OPEN:
            self.conn.unblock()
        if self._waiting is None:  # (else reading resumes when the waiting answer goes out)
            self.resume()
        return False

    def resource_counts(self) -> tuple[int, int]:
        """Channels and consumers this connection holds (see ``Broker.counts``)."""
        return len(self.channels), sum(len(ch.consumers) for ch in self.channels.values())

    def cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        for ch in list(self.channels.values()):
            ch.close()
        self.channels.clear()
        self.vhost.owner_gone(self)  # exclusive queues end with their connection
        self.broker.connections.discard(self)

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Close the connection (a hard error, or the broker shutting down)."""
        if self.conn.state is not ConnectionState.OPEN:
            return
        self.conn.close(code, text, class_id, method_id)
        for ch in list(self.channels.values()):
            ch.close()
        self.channels.clear()
        self.wake_if_idle()

    # -- channel methods ------------------------------------------------------------------------
    def _on_method(self, number: int, e: MethodReceived | ContentReceived) -> None:
        ch = self.channels.get(number)
        if ch is None or ch.closed:
            return
        method = e.method
        try:
            if isinstance(e, ContentReceived):
                if isinstance(method, m.BasicPublish):
                    self._basic_publish(ch, method, e)
                return
            handler = self._methods.get(type(method))
            if handler is None:
                raise HardError(ReplyCode.NOT_IMPLEMENTED, f"{method.NAME} is not implemented")
            handler(ch, method)
        except HardError as exc:
            self.close(exc.code, exc.text, method.CLASS_ID, method.METHOD_ID)
        except ChannelError as exc:
            self._channel_error(ch, exc.code, exc.text, method)
        except ModelError as exc:
            code = _ERROR_CODES.get(type(exc), ReplyCode.PRECONDITION_FAILED)
            self._channel_error(ch, code, reply_text(code, str(exc)), method)

    def _channel_error(self, ch: ChannelContext, code: int, text: str, method: Method) -> None:
        log.debug("closing channel %d: %s", ch.number, text)
        self.channels.pop(ch.number, None)
        ch.close()
        try:
            self.conn.close_channel(ch.number, code, text[:255], method.CLASS_ID, method.METHOD_ID)
        except IllegalStateError:
            pass

    def _authorize(self, resource: str, action: Action, kind: ResourceKind) -> None:
        if not self.broker.authorize(self.vhost, self.user, resource, action, kind):
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"access to {kind} '{resource}' in vhost '{self.vhost.name}' refused for user '{self.user or 'guest'}'",
            )

    def _ok(self, ch: ChannelContext, no_wait: bool, reply: Method) -> None:
        if not no_wait:
            self.send_method(ch.number, reply)

    def _ok_committed(self, ch: ChannelContext, no_wait: bool, reply: Method) -> None:
        """Answer a method that changed the broker's definitions (a declaration, binding,
        deletion, purge, tx.commit) once the change is committed to the store, as RabbitMQ
        answers declare-ok once the durable record is written. The connection's further
        methods wait for that answer, in order (as a RabbitMQ channel does in a synchronous
        method), and reading from the client pauses meanwhile."""
        if no_wait:
            return  # nothing confirmed; what follows is committed after it anyway

        def answer() -> None:
            waiting, self._waiting = self._waiting, None
            if self.closed:
                return
            self.send_method(ch.number, reply)
            if not self.memory_blocked:
                self.resume()
            if waiting:
                self.handle(waiting)
            self.wake_if_idle()

        self._waiting = []
        self.broker.after_commit(answer)
        if self._waiting is not None:  # (without a store it has gone out already)
            self.pause()

    def _wait_with(self, events: list[Event]) -> None:
        """Keep ``events`` until the answer waiting for a commit has gone out; the end of
        the connection is handled at once (what waits is then never answered)."""
        assert self._waiting is not None
        for e in events:
            if isinstance(e, (ConnectionClosed, ConnectionFailed, ConnectionLost)):
                self._waiting.clear()
                self._handle(e)
                return
            self._waiting.append(e)

    # -- consuming
    def _basic_qos(self, ch: ChannelContext, method: m.BasicQos) -> None:
        if method.prefetch_size:
            raise HardError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
        if method.global_:
            ch.global_limit = method.prefetch_count
        else:
            ch.consumer_limit = method.prefetch_count
        self.send_method(ch.number, m.BasicQosOk())
        for c in list(ch.consumers.values()):
            c.node.consumer_ready(c)

    def _basic_consume(self, ch: ChannelContext, method: m.BasicConsume) -> None:
        if method.queue == REPLY_TO:
            self._reply_consume(ch, method)
            return
        q = self._queue_node(self._queue_name(ch, method.queue))
        self._authorize(q.name, "read", "queue")
        tag = method.consumer_tag or "amq.ctag-" + _token()
        if tag in ch.consumers:
            raise HardError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if any(getattr(c, "exclusive", False) for c in q.consumers) or (method.exclusive and q.consumers):
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED, f"queue '{q.name}' in vhost '{self.vhost.name}' in exclusive use"
            )
        start: int | None = None
        if isinstance(q, Stream):
            try:
                start = q.start_offset(_stream_offset(method.arguments.get("x-stream-offset", "next")))
            except ValueError as exc:
                raise PreconditionFailed(str(exc)) from None
        priority = method.arguments.get("x-priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise PreconditionFailed(
                f"invalid arg 'x-priority' for queue '{q.name}' in vhost '{self.vhost.name}': "
                f"{priority!r} is not an integer"
            )
        c = BasicConsumer(
            ch, tag, q, no_ack=method.no_ack, exclusive=method.exclusive, limit=ch.consumer_limit
        )
        c.priority = priority
        ch.consumers[tag] = c
        self._ok(ch, method.no_wait, m.BasicConsumeOk(consumer_tag=tag))
        if isinstance(q, Stream):
            q.add_consumer(c, start)
        else:
            q.add_consumer(c)

    def _reply_consume(self, ch: ChannelContext, method: m.BasicConsume) -> None:
        if not method.no_ack:
            raise PreconditionFailed("reply consumer cannot acknowledge")
        if ch.reply_tag is not None:
            raise PreconditionFailed("reply consumer already set")
        tag = method.consumer_tag or "amq.ctag-" + _token()
        if tag in ch.consumers:
            raise HardError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        ch.reply_tag = tag
        ch.reply_address = _REPLY_PREFIX + _token()
        _replies[ch.reply_address] = ch
        self._ok(ch, method.no_wait, m.BasicConsumeOk(consumer_tag=tag))

    def _basic_cancel(self, ch: ChannelContext, method: m.BasicCancel) -> None:
        if method.consumer_tag == ch.reply_tag:
            ch.stop_replies()
        c = ch.consumers.pop(method.consumer_tag, None)
        if c is not None:
            c.active = False
            c.node.remove_consumer(c)
        self._ok(ch, method.no_wait, m.BasicCancelOk(consumer_tag=method.consumer_tag))

    def _basic_get(self, ch: ChannelContext, method: m.BasicGet) -> None:
        q = self._queue_node(self._queue_name(ch, method.queue))
        self._authorize(q.name, "read", "queue")
        if not isinstance(q, Queue):
            raise PreconditionFailed(f"queue '{q.name}' in vhost '{self.vhost.name}' is a stream: use basic.consume")
        msg = q.get()
        if msg is None:
            self.send_method(ch.number, m.BasicGetEmpty())
            return
        count = q.count

        def get_ok(tag: int, redelivered: bool, content: Content) -> Method:
            return m.BasicGetOk(
                delivery_tag=tag,
                redelivered=redelivered,
                exchange=content.exchange,
                routing_key=content.routing_key,
                message_count=count,
            )

        ch.hand_out(q, msg, None, method.no_ack, get_ok)

    def _settle(self, ch: ChannelContext, tags: list[int], outcome: str) -> None:
        if ch.tx is not None:
            ch.tx.append(lambda: ch.settle(tags, outcome))
        else:
            ch.settle(tags, outcome)

    def _basic_ack(self, ch: ChannelContext, method: m.BasicAck) -> None:
        self._settle(ch, ch.tags_for(method.delivery_tag, method.multiple), "ack")

    def _basic_nack(self, ch: ChannelContext, method: m.BasicNack) -> None:
        tags = ch.tags_for(method.delivery_tag, method.multiple)
        self._settle(ch, tags, "requeue" if method.requeue else "reject")

    def _basic_reject(self, ch: ChannelContext, method: m.BasicReject) -> None:
        tags = ch.tags_for(method.delivery_tag, False)
        self._settle(ch, tags, "requeue" if method.requeue else "reject")

    def _basic_recover(self, ch: ChannelContext, method: m.BasicRecover | m.BasicRecoverAsync) -> None:
        if not method.requeue:
            raise HardError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        ch.settle(list(ch.unacked), "requeue")
        if isinstance(method, m.BasicRecover):
            self.send_method(ch.number, m.BasicRecoverOk())

    # -- publishing
    def _basic_publish(self, ch: ChannelContext, method: m.BasicPublish, e: ContentReceived) -> None:
        if method.immediate:
            raise HardError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        vh = self.vhost
        x = vh.exchange(method.exchange)
        if x is None:
            raise NotFound(f"no exchange '{method.exchange}' in vhost '{vh.name}'")
        if x.internal:
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}' in vhost '{vh.name}'"
            )
        self._authorize(x.name, "write", "exchange")
        props = e.properties
        assert isinstance(props, BasicProperties)
        raw = e.raw_properties
        if props.reply_to == REPLY_TO:
            if ch.reply_tag is None:
                raise PreconditionFailed("fast reply consumer does not exist")
            props.reply_to = ch.reply_address
            buf = bytearray()
            props.encode(buf)
            raw = bytes(buf)
        msg = from_publish(method.exchange, method.routing_key, props, raw, e.body, self.broker.now())
        self._published = True
        seq = 0
        if ch.confirm:
            ch.publish_seq += 1
            seq = ch.publish_seq
            ch.unconfirmed.add(seq)
        if ch.tx is not None:
            ch.tx.append(functools.partial(self._route, ch, x, msg, method, seq))
        else:
            self._route(ch, x, msg, method, seq)

    def _route(self, ch: ChannelContext, x: Exchange, msg: QueuedMessage, method: m.BasicPublish, seq: int) -> None:
        vh = self.vhost
        key = method.routing_key
        if x.name == "" and key.startswith(_REPLY_PREFIX):
            target = _replies.get(key)
            if target is not None and target.handler.vhost is vh and not target.closed:
                target.deliver_reply(msg)
                if seq:
                    self._confirm(ch, seq, True)
                return

        stalled = self.broker.journal.stalled
        if stalled is not None:  # the disk is full: nothing new is taken that cannot be stored
            self._refuse_unstorable(ch, seq, stalled)
            return
        self._dropping = False

        def stored() -> None:
            self._confirm(ch, seq, True)

        if vh.route(x, msg, key, stored if seq else _nothing):
            return
        if vh.destinations(x, msg, key):  # queues took nothing: full, overflow reject-publish
            if seq:
                self._confirm(ch, seq, False)
            return
        if method.mandatory:
            content = unpack(msg.data)
            self.send_content(
                ch.number,
                m.BasicReturn(
                    reply_code=NO_ROUTE, reply_text="NO_ROUTE", exchange=x.name, routing_key=key
                ),
                content.properties,
                content.body,
            )
        if seq:
            self._confirm(ch, seq, True)

    def _refuse_unstorable(self, ch: ChannelContext, seq: int, why: str) -> None:
        """A publish while the store has no room: ``basic.nack`` in confirm mode (RabbitMQ's
        answer to a message it could not persist); without confirms the client cannot be
        told, so it is dropped, and the first drop of each such spell is logged."""
        if seq:
            self._confirm(ch, seq, False)
        elif not self._dropping:
            self._dropping = True
            log.warning("dropping 0-9-1 publishes of %s (no publisher confirms to refuse them with): %s", self.user, why)

    def _confirm(self, ch: ChannelContext, seq: int, ack: bool) -> None:
        if ch.closed or self.channels.get(ch.number) is not ch:
            return
        ch.unconfirmed.discard(seq)
        if not ack:
            self.send_method(ch.number, m.BasicNack(delivery_tag=seq, requeue=False))
        else:
            ch.confirmable.append(seq)
        # sent once the batch of events is done, or (a store commit's callback) when the
        # driver next writes: as few acks as can be
        self._confirming.add(ch.number)
        if not self._handling:
            if not isinstance(self.conn, BrokerConnection):
                self._flush_all_confirms()
            self.wake()

    def flush_confirms(self, ch: ChannelContext) -> None:
        """Acknowledge the ready publishes: every one below the oldest unconfirmed with one
        ``multiple`` ack, the others one by one."""
        ready, ch.confirmable = sorted(ch.confirmable), []
        if not ready:
            return
        oldest = min(ch.unconfirmed) if ch.unconfirmed else ready[-1] + 1
        below = [seq for seq in ready if seq < oldest]
        if below:
            self.send_method(ch.number, m.BasicAck(delivery_tag=below[-1], multiple=len(below) > 1))
        for seq in ready[len(below) :]:
            self.send_method(ch.number, m.BasicAck(delivery_tag=seq))

    # -- confirms and transactions
    def _confirm_select(self, ch: ChannelContext, method: m.ConfirmSelect) -> None:
        if ch.tx is not None:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        ch.confirm = True
        self._ok(ch, method.nowait, m.ConfirmSelectOk())

    def _tx_select(self, ch: ChannelContext, method: m.TxSelect) -> None:
        if ch.confirm:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        if ch.tx is None:
            ch.tx = []
        self.send_method(ch.number, m.TxSelectOk())

    def _tx_commit(self, ch: ChannelContext, method: m.TxCommit) -> None:
        if ch.tx is None:
            raise PreconditionFailed("channel is not transactional")
        work, ch.tx = ch.tx, []
        stalled = self.broker.journal.stalled
        if stalled is not None and any(getattr(w, "func", None) == self._route for w in work):
            # the store has no room for its publishes: the transaction fails as a whole
            raise ChannelError(ReplyCode.RESOURCE_ERROR, f"tx.commit refused: {stalled}")
        for apply in work:
            apply()
        self._ok_committed(ch, False, m.TxCommitOk())

    def _tx_rollback(self, ch: ChannelContext, method: m.TxRollback) -> None:
        if ch.tx is None:
            raise PreconditionFailed("channel is not transactional")
        ch.tx = []
        self.send_method(ch.number, m.TxRollbackOk())


def _nothing() -> None:
    pass


def _stream_offset(v: Any) -> Any:
    """An ``x-stream-offset`` argument as the core's stream takes it (a datetime: a timestamp)."""
    import datetime as _dt

    if isinstance(v, _dt.datetime):
        return timestamp(int(v.timestamp() * 1000))
    if isinstance(v, bytes):
        return v.decode()
    return v
