"""The AMQP 0-9-1 front end's router: one engine connection's events, each to its handler.

Nothing here does I/O. :class:`Amqp091Handler` answers the handshake
(``start-ok`` checked by :mod:`.login`, ``open`` against the broker's virtual
hosts), opens and closes channels (a client's ``channel.flow`` with active=false the
engine refuses, as RabbitMQ does), and passes each channel method
through one table (:attr:`Amqp091Handler.methods`) to the handler of its concern:

- ``exchange.declare/delete/bind/unbind``: :class:`.exchange.ExchangeMethods`
- ``queue.declare/bind/unbind/purge/delete``: :class:`.queue.QueueMethods`
- ``basic.qos/consume/cancel/get/ack/nack/reject/recover/recover-async``:
  :class:`.basic.BasicMethods`
- ``basic.publish`` (a method with content): :class:`.publish.Publisher`
- ``confirm.select``: :class:`.confirm.Confirms`
- ``tx.select/commit/rollback``: :class:`.tx.TxMethods`

Each handler holds the connection's :class:`.context.Amqp091Context`, never this
router. A handler's :class:`.context.ChannelError` (or a core
:class:`~amqp10.broker.core.ModelError`) closes its channel with the reply code
it maps to; a :class:`.context.HardError` closes the connection.

What is connection-wide is here too: answers held for the store's commit (and
the client's methods held behind them), and blocking publishers while the
broker is out of memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from ...amqp091 import (
    ChannelClosed,
    ChannelOpened,
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
from ...sasl.credentials import CredentialStore
from ..core import (
    AccessRefused,
    Answered,
    Broker,
    ModelError,
    Node,
    NotFound,
    PreconditionFailed,
    QueuedMessage,
    ResourceLocked,
    nothing,
)
from ..core.consumer_timeout import timeout_text
from ..frontend import ContextHandler
from ..oauth import TokenValidator
from .basic import BasicMethods
from .channel import BasicConsumer, Channel
from .confirm import Confirms
from .connection import BrokerConnection
from .context import Amqp091Context, ChannelError, HardError
from .exchange import ExchangeMethods
from .login import Logins
from .publish import Publisher
from .queue import QueueMethods
from .tx import TxMethods

__all__ = ["Amqp091Handler"]

log = logging.getLogger("amqp10.broker")

_ERROR_CODES: Final[dict[type[ModelError], int]] = {
    NotFound: ReplyCode.NOT_FOUND,
    AccessRefused: ReplyCode.ACCESS_REFUSED,
    ResourceLocked: ReplyCode.RESOURCE_LOCKED,
    PreconditionFailed: ReplyCode.PRECONDITION_FAILED,
}
_ENDS: Final = (ConnectionClosed, ConnectionFailed, ConnectionLost)


def _consumer_timeout(entry: tuple[Node, QueuedMessage, BasicConsumer | None]) -> float | None:
    """The consumer timeout of an unacknowledged delivery (seconds; None: none): its
    consumer's ``x-consumer-timeout``, else its queue's (as RabbitMQ ranks them)."""
    c = entry[2]
    if c is not None and c.timeout is not None:
        return c.timeout
    return entry[0].policy.consumer_timeout


class Amqp091Handler(ContextHandler):
    """Drives one 0-9-1 engine connection on behalf of the broker.

    ``users``, ``allow_anonymous``, ``tls_identity`` and ``tokens`` (OAuth 2 tokens as
    passwords): who may log in (:class:`.login.Logins`). ``wake`` tells the network driver there is output;
    ``pause`` and ``resume`` stop and restart its reading from the client.
    """

    ctx: Amqp091Context

    def __init__(
        self,
        broker: Broker,
        conn: BrokerConnection,
        *,
        users: CredentialStore | None = None,
        allow_anonymous: bool = True,
        tls_identity: str | None = None,
        tokens: TokenValidator | None = None,
        wake: Callable[[], None] = nothing,
        pause: Callable[[], None] = nothing,
        resume: Callable[[], None] = nothing,
    ) -> None:
        self.broker = broker
        self.conn = conn
        self.ctx = Amqp091Context(
            broker, conn, wake=wake, answer_after_commit=self._answer_after_commit, answer_later=self._answer_later
        )
        self.pause = pause
        """Stop reading from the client (publishing blocked, or an answer waits for a commit)."""
        self.resume = resume
        self.logins = Logins(users, allow_anonymous, tls_identity, tokens)
        self.tokens = tokens
        self.channels: dict[int, Channel] = {}
        self.closed = False
        self.memory_blocked = False
        self._waiting: list[Event] | None = None
        """While an answer waits for the store's commit (:meth:`_answer_after_commit`) or a
        node's answer (:meth:`_answer_later`): the events that came meanwhile, handled in
        order once it has gone out; None otherwise."""
        self._current: tuple[Channel, Method] | None = None
        """The channel and method being handled (what a late answer's failure closes)."""
        self.confirms = Confirms(self.ctx)
        self.publisher = Publisher(self.ctx, self.confirms)
        exchange, queue, basic = ExchangeMethods(self.ctx), QueueMethods(self.ctx), BasicMethods(self.ctx)
        tx = TxMethods(self.ctx, self.publisher)
        self.methods: dict[type[Method], Callable[[Channel, Any], None]] = {
            m.ExchangeDeclare: exchange.declare,
            m.ExchangeDelete: exchange.delete,
            m.ExchangeBind: exchange.bind,
            m.ExchangeUnbind: exchange.unbind,
            m.QueueDeclare: queue.declare,
            m.QueueBind: queue.bind,
            m.QueueUnbind: queue.unbind,
            m.QueuePurge: queue.purge,
            m.QueueDelete: queue.delete,
            m.BasicQos: basic.qos,
            m.BasicConsume: basic.consume,
            m.BasicCancel: basic.cancel,
            m.BasicGet: basic.get,
            m.BasicAck: basic.ack,
            m.BasicNack: basic.nack,
            m.BasicReject: basic.reject,
            m.BasicRecover: basic.recover,
            m.BasicRecoverAsync: basic.recover,
            m.ConfirmSelect: self.confirms.select,
            m.TxSelect: tx.select,
            m.TxCommit: tx.commit,
            m.TxRollback: tx.rollback,
        }
        """Each channel method's handler (``basic.publish``, a method with content, is
        :meth:`.publish.Publisher.publish`, from :meth:`_on_content`)."""
        self._events: dict[type[Event], Callable[[Any], None]] = {
            MethodReceived: self._on_method,
            ContentReceived: self._on_content,
            ChannelOpened: self._on_channel_opened,
            ChannelClosed: self._on_channel_closed,
            LoginRequested: self._on_login,
            VirtualHostRequested: self._on_open,
            SecretUpdateRequested: self._on_update_secret,
            ConnectionClosed: self._on_end,
            ConnectionFailed: self._on_end,
            ConnectionLost: self._on_end,
        }
        conn.before_send = self.confirms.flush_all
        broker.connections.add(self)

    # -- what the service sees (and ``user``, ``vhost``: ContextHandler's) ---------------------
    def tick(self) -> None:
        """Called once a second: a connection whose OAuth 2 token expired is closed; a channel that held a delivery unacknowledged past its
        queue's consumer timeout is closed (core/consumer_timeout.py), as RabbitMQ does."""
        if self.closed:
            return
        now = self.broker.now()
        expired = self.token_expired(now) if self.conn.state is ConnectionState.OPEN else None
        if expired is not None:  # as RabbitMQ: the connection ends with its credential
            self.close(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {expired}")
            return
        for ch in list(self.channels.values()):
            if ch.unacked and not ch.closed:
                late = ch.unsettled_clock.overdue(ch.unacked, _consumer_timeout, now)
                if late is not None:
                    self._time_out(ch, late[1])

    def _time_out(self, ch: Channel, timeout: float) -> None:
        """Close ``ch`` (PRECONDITION_FAILED, RabbitMQ's text): what it held goes back."""
        text = timeout_text(ch.number, timeout)
        log.info("closing channel %d: %s", ch.number, text)
        self.channels.pop(ch.number, None)
        ch.close()
        try:
            self.conn.close_channel(ch.number, ReplyCode.PRECONDITION_FAILED, text[:255], 0, 0)
        except IllegalStateError:
            pass
        self.ctx.wake()

    def resource_counts(self) -> tuple[int, int]:
        """Channels and consumers this connection holds (see ``Broker.counts``)."""
        return len(self.channels), sum(len(ch.consumers) for ch in self.channels.values())

    def consumer_details(self) -> list[dict[str, Any]]:
        return [c.details() for ch in self.channels.values() for c in ch.consumers.values()]

    # -- events ---------------------------------------------------------------------------------
    def handle(self, events: list[Event]) -> None:
        waiting = self._waiting  # (a local: a test of ``self._waiting`` would narrow it for
        if waiting is not None:  # the loop below, whose test mypyc would then compile out)
            self._wait_with(events)
            return
        rest = iter(events)
        for e in rest:
            run = self._events.get(type(e))
            if run is not None:
                run(e)
            if self._waiting is not None:  # an answer waits for a commit: so does the rest
                self._wait_with(list(rest))
                break
        if self.publisher.published:
            self.publisher.published = False
            if not self.memory_blocked and not self.broker.memory_ok():
                self._block_publishers()
        self.confirms.flush_all()

    def _on_channel_opened(self, e: ChannelOpened) -> None:
        self.channels[e.channel] = Channel(self.ctx, e.channel)

    def _on_channel_closed(self, e: ChannelClosed) -> None:
        ch = self.channels.pop(e.channel, None)
        if ch is not None:
            ch.close()

    def _on_update_secret(self, e: SecretUpdateRequested) -> None:
        """A new secret: for a connection that logged in with an OAuth 2 token, the renewed
        token (refused: the connection closes, as RabbitMQ closes it); otherwise nothing to
        check (RabbitMQ's internal users accept any)."""
        renewing = self.ctx.grant is not None
        if renewing and self.renew_token(e.new_secret) is not None:
            self.close(ReplyCode.NOT_ALLOWED, "NOT_ALLOWED - New secret was refused by one of the backends")
            return
        self.conn.update_secret_ok()
        if renewing:
            self._recheck_consumers()

    def _recheck_consumers(self) -> None:
        """As RabbitMQ's channels re-check their consumers when the connection's token is
        renewed: a consumer whose queue the new token may not read is cancelled (a
        ``basic.cancel`` to a client that takes them); its channel stays open."""
        ctx = self.ctx
        for ch in list(self.channels.values()):
            for c in list(ch.consumers.values()):
                why = ctx.broker.denial(ctx.vhost, ctx.user, c.node.name, "queue", "read", grant=ctx.grant)
                if why is not None:
                    log.warning("cancelling consumer %r on queue %r: %s", c.tag, c.node.name, why)
                    ch.server_cancel(c)
                    c.node.remove_consumer(c)

    def _on_end(self, e: Event) -> None:
        self.cleanup()

    # -- the handshake --------------------------------------------------------------------------
    def _on_login(self, e: LoginRequested) -> None:
        ok, user = self.logins.check(e.mechanism, e.username, e.password)
        if not ok:
            self.login_refused("0-9-1", e.mechanism, e.username)
            self.conn.reject_login()
            return
        self.logged_in(user, self.logins.grant)
        self.conn.accept_login()

    def _on_open(self, e: VirtualHostRequested) -> None:
        if self.refusal is not None:  # a [security] limit: refused at the open, as RabbitMQ
            self.conn.refuse_open(ReplyCode.NOT_ALLOWED, self.refusal)
            return
        vhost = self.broker.vhost(e.virtual_host or "/")
        if vhost is None:
            self.conn.refuse_open(ReplyCode.NOT_ALLOWED, f"vhost {e.virtual_host} not found")
            return
        if self.broker.vhost_denial(vhost, self.ctx.user, grant=self.ctx.grant) is not None:
            self.conn.refuse_open(ReplyCode.ACCESS_REFUSED)
            return
        self.ctx.vhost = vhost
        self.conn.accept_open()

    # -- channel methods ------------------------------------------------------------------------
    def _on_method(self, e: MethodReceived) -> None:
        ch = self.channels.get(e.channel)
        if ch is None or ch.closed:
            return
        method = e.method
        try:
            run = self.methods.get(type(method))
            if run is None:
                raise HardError(ReplyCode.NOT_IMPLEMENTED, f"{method.NAME} is not implemented")
            self._current = (ch, method)
            run(ch, method)
        except (ChannelError, ModelError) as exc:  # (one name per except: mypyc types it once)
            self._fail(ch, exc, method)

    def _on_content(self, e: ContentReceived) -> None:
        ch = self.channels.get(e.channel)
        method = e.method
        if ch is None or ch.closed or type(method) is not m.BasicPublish:
            return  # (a client sends no other content)
        try:
            self.publisher.publish(ch, method, e)
        except (ChannelError, ModelError) as exc:  # (one name per except: mypyc types it once)
            self._fail(ch, exc, method)

    def _fail(self, ch: Channel, exc: ChannelError | ModelError, method: Method) -> None:
        """A method failed: close the connection (a hard error) or its channel."""
        if isinstance(exc, HardError):
            self.close(exc.code, exc.text, method.CLASS_ID, method.METHOD_ID)
            return
        if isinstance(exc, ChannelError):
            code, text = exc.code, exc.text
        else:
            code = _ERROR_CODES.get(type(exc), ReplyCode.PRECONDITION_FAILED)
            text = reply_text(code, str(exc))
        log.debug("closing channel %d: %s", ch.number, text)
        self.channels.pop(ch.number, None)
        ch.close()
        try:
            self.conn.close_channel(ch.number, code, text[:255], method.CLASS_ID, method.METHOD_ID)
        except IllegalStateError:
            pass

    # -- answers after the store's commit ------------------------------------------------------
    def _answer_after_commit(self, channel: int, reply: Method, then: list[tuple[int, Method]]) -> None:
        """Send ``reply``, then ``then``, once the store has committed what came before (see
        :meth:`.context.Amqp091Context.ok_committed`). The connection's further methods wait
        for that answer, in order (as a RabbitMQ channel does in a synchronous method), and
        reading from the client pauses meanwhile."""

        def answer() -> None:
            waiting, self._waiting = self._waiting, None
            if self.closed:
                return
            self.ctx.send_method(channel, reply)
            for number, method in then:
                self.ctx.send_method(number, method)
            self._go_on(waiting)

        self._waiting = []
        self.broker.after_commit(answer)
        if self.answer_waits():  # (without a store it has gone out already)
            self.pause()

    def answer_waits(self) -> bool:
        """Whether an answer waits for a commit or a node (a method's answer not given yet:
        a connection that may move stays while one waits). Read as a method in
        :meth:`_answer_after_commit`, not after ``self._waiting = []``, where mypy takes it
        for a list and mypyc would check that it is one."""
        return self._waiting is not None

    def _answer_later(self, ask: Callable[[Answered[Any]], None], then: Callable[[Callable[[], Any]], None]) -> None:
        """Put a question to a node that answers later (:class:`~amqp10.broker.core.NodeElsewhere`)
        and finish the method being handled with ``then(answer)`` once it answers; the
        connection's further methods wait for that, in order, as for
        :meth:`_answer_after_commit`. A failure ``then`` raises closes the method's channel
        (or, a hard error, the connection), as if raised by the method itself."""
        assert self._current is not None
        ch, method = self._current
        asked = False
        answered_now = False

        def answered(answer: Callable[[], Any]) -> None:
            nonlocal answered_now
            if not asked:  # at once: as if the method had done it itself
                answered_now = True
                then(answer)
                return
            waiting, self._waiting = self._waiting, None
            try:  # (also once the connection is gone: ``then`` gives back what it was given)
                then(answer)
            except (ChannelError, ModelError) as exc:
                if not self.closed:
                    self._fail(ch, exc, method)
            if not self.closed:
                self._go_on(waiting)

        ask(answered)
        asked = True
        if not answered_now:
            self._waiting = []
            self.pause()

    def _go_on(self, waiting: list[Event] | None) -> None:
        """A waited-for answer has gone out: handle what came meanwhile (after any answer
        the last one in turn waits for)."""
        if self._waiting is not None:  # that answer waits for another (a commit): so does the rest
            self._waiting.extend(waiting or ())
            self.ctx.wake()
            return
        if not self.memory_blocked:
            self.resume()
        if waiting:
            self.handle(waiting)
        self.confirms.flush_all()
        self.ctx.wake()

    def _wait_with(self, events: list[Event]) -> None:
        """Keep ``events`` until the answer waiting for a commit has gone out; the end of
        the connection is handled at once (what waits is then never answered)."""
        assert self._waiting is not None
        for e in events:
            if isinstance(e, _ENDS):
                self._waiting.clear()
                self.cleanup()
                return
            self._waiting.append(e)

    # -- memory alarm ---------------------------------------------------------------------------
    def _block_publishers(self) -> None:
        """Memory above the limit: tell the client (connection.blocked, if it understands)
        and stop reading from it until the broker's queues shrink, as RabbitMQ's alarm does."""
        log.info("0-9-1 publisher blocked: %s", self.broker.alarm or "queued messages exceed the memory limit")
        self.memory_blocked = True
        self.conn.block("low on memory")
        self.pause()
        self.conn.recheck = self._memory_recovered
        self.ctx.wake()

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm: a connection is blocked at its next publish (as
        RabbitMQ blocks publishing connections only: a consumer's acks must go on), and
        unblocked as soon as the alarm clears (not at the next once-a-second recheck)."""
        if not raised:
            self._memory_recovered()
            self.ctx.wake()

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

    # -- the end --------------------------------------------------------------------------------
    def cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        for ch in list(self.channels.values()):
            ch.close()
        self.channels.clear()
        self.ctx.vhost.owner_gone(self.ctx)  # exclusive queues end with their connection
        self.broker.connections.discard(self)

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Close the connection (a hard error, or the broker shutting down)."""
        if self.conn.state is not ConnectionState.OPEN:
            return
        self.conn.close(code, text, class_id, method_id)
        for ch in list(self.channels.values()):
            ch.close()
        self.channels.clear()
        self.ctx.wake()
