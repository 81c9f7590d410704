"""The AMQP 0-10 front end's router: one engine connection's events, each to its handler.

Nothing here does I/O. :class:`Amqp010Handler` answers the handshake (``start-ok`` checked
against the users file, as :meth:`Amqp010Handler.check_login` says; ``open`` against the
broker's virtual hosts), keeps the connection's sessions (:class:`.session.Amqp010Session`)
and passes each command through one table (:attr:`Amqp010Handler.commands`) to the handler
of its concern:

- ``exchange.declare/delete/query/bind/unbind/bound``: :class:`.model.ExchangeCommands`
- ``queue.declare/delete/purge/query``: :class:`.model.QueueCommands`
- ``message.transfer/subscribe/cancel/accept/reject/release/acquire/resume/set-flow-mode/
  flow/flush/stop``: :class:`.messages.MessageCommands`
- ``tx.select/commit/rollback``: :class:`.messages.TxCommands`
- ``dtx.*`` (XA branches): :class:`.dtx.DtxCommands`

A command completes when its handler returns (with its result, if it has one), except
``message.transfer``, which completes once the message is stored, and ``dtx.prepare``,
``commit``, ``rollback`` and ``forget``, once what they wrote is, and a command on a queue
another worker owns, once the owner answered (:meth:`Amqp010Handler._answer_later`: the
connection's further commands wait for that answer, in order). A handler's
:class:`.context.CommandError` (or a core :class:`~amqp10.broker.core.ModelError`) fails
the command with ``execution.exception``, which ends the session.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, Final

from ...amqp010 import (
    CLOSE_CODES,
    CommandReceived,
    Compound,
    Connection,
    ConnectionEnded,
    Event,
    LoginRequested,
    OpenRequested,
    SecureResponse,
    SessionAttached,
    SessionDetached,
    TransfersCompleted,
)
from ...amqp010.connection import Session
from ...sasl.credentials import CredentialStore, InMemoryCredentialStore
from ...sasl.mechanisms import PlainServer, ServerOutcome
from ...types import SaslCode
from ..core import Answered, Broker, ModelError, nothing
from ..frontend import ContextHandler
from ..oauth import TokenLogin, TokenValidator
from .context import Amqp010Context, CommandError, error_of
from .dtx import DtxCommands
from .kept import KeptSessions
from .messages import MessageCommands, TxCommands
from .model import ExchangeCommands, QueueCommands
from .session import Amqp010Session, Pending

__all__ = ["Amqp010Handler"]

log = logging.getLogger("amqp10.broker")

_COMPLETES_ITSELF: Final = frozenset(
    {"message.transfer", "dtx.prepare", "dtx.commit", "dtx.rollback", "dtx.forget"}
)
"""Commands whose handler completes them once what they did is stored."""
DEFINES: Final = frozenset(
    {"exchange.declare", "exchange.delete", "exchange.bind", "exchange.unbind", "queue.declare", "queue.delete"}
)
"""Commands that change the broker's definitions: one completes once the change is stored
and, with several workers, in the metadata's one order and applied by every worker, as
0-9-1's declare-ok, bind-ok and delete-ok are sent (:meth:`Broker.after_commit
<amqp10.broker.core.Broker.after_commit>`), so a client that goes on to another worker
finds it there."""


def _not_kept(channel: int, name: bytes) -> Session | None:
    return None


def _consumer_timeout(p: Pending) -> float | None:
    """The consumer timeout of an unaccepted transfer (seconds; None: none): its
    subscription's ``x-consumer-timeout``, else its queue's (as RabbitMQ ranks them)."""
    if p.sub is not None and p.sub.timeout is not None:
        return p.sub.timeout
    return p.node.policy.consumer_timeout


class Amqp010Handler(ContextHandler):
    """Drives one 0-10 engine connection on behalf of the broker.

    ``users`` checks PLAIN logins (None: no users file), ``tokens`` PLAIN's OAuth 2
    tokens as passwords (None: ``[oauth2]`` is not set); ``allow_anonymous``: ANONYMOUS
    logs in as the anonymous user; ``tls_identity`` (a verified client certificate's
    subject) is what EXTERNAL logs in as.
    """

    ctx: Amqp010Context

    def __init__(
        self,
        broker: Broker,
        conn: Connection,
        *,
        users: CredentialStore | None = None,
        allow_anonymous: bool = True,
        tls_identity: str | None = None,
        tokens: TokenValidator | None = None,
        wake: Callable[[], None] = nothing,
    ) -> None:
        self.broker = broker
        self.conn = conn
        self.ctx = Amqp010Context(broker, conn, wake, self._answer_later, self._failed_later)
        self.users = users
        self.allow_anonymous = allow_anonymous
        self.tls_identity = tls_identity
        self.tokens = tokens
        self._token_login = None if tokens is None else TokenLogin(tokens)
        self.sessions: dict[int, Amqp010Session] = {}
        self.kept = KeptSessions.of(broker)
        conn.resumable = self._resumable
        self.closed = False
        self._waiting: list[Event] | None = None
        """While a command waits for the answer of a queue another worker owns
        (:meth:`_answer_later`): the events that came meanwhile, handled in order once it
        is answered; None otherwise."""
        self._current: tuple[Amqp010Session, Compound] | None = None
        """The session and command being handled (what a late answer completes)."""
        self._later = False
        """The command being handled completes with a late answer, not when it returns."""
        exchange, queue = ExchangeCommands(self.ctx), QueueCommands(self.ctx)
        message, tx, dtx = MessageCommands(self.ctx), TxCommands(self.ctx), DtxCommands(self.ctx)
        self.commands: dict[str, Callable[[Amqp010Session, Compound], Compound | None]] = {
            "exchange.declare": exchange.declare,
            "exchange.delete": exchange.delete,
            "exchange.query": exchange.query,
            "exchange.bind": exchange.bind,
            "exchange.unbind": exchange.unbind,
            "exchange.bound": exchange.bound,
            "queue.declare": queue.declare,
            "queue.delete": queue.delete,
            "queue.purge": queue.purge,
            "queue.query": queue.query,
            "message.transfer": message.transfer,
            "message.subscribe": message.subscribe,
            "message.cancel": message.cancel,
            "message.accept": message.accept,
            "message.reject": message.reject,
            "message.release": message.release,
            "message.acquire": message.acquire,
            "message.resume": message.resume,
            "message.set-flow-mode": message.set_flow_mode,
            "message.flow": message.flow,
            "message.flush": message.flush,
            "message.stop": message.stop,
            "tx.select": tx.select,
            "tx.commit": tx.commit,
            "tx.rollback": tx.rollback,
            "dtx.select": dtx.select,
            "dtx.start": dtx.start,
            "dtx.end": dtx.end,
            "dtx.prepare": dtx.prepare,
            "dtx.commit": dtx.commit,
            "dtx.rollback": dtx.rollback,
            "dtx.recover": dtx.recover,
            "dtx.forget": dtx.forget,
            "dtx.get-timeout": dtx.get_timeout,
            "dtx.set-timeout": dtx.set_timeout,
        }
        """Each command's handler (``execution.sync`` the engine completes itself)."""
        self._events: dict[type[Event], Callable[[Any], None]] = {
            CommandReceived: self._on_command,
            TransfersCompleted: self._on_completed,
            SessionAttached: self._on_attached,
            SessionDetached: self._on_detached,
            LoginRequested: self._on_login,
            SecureResponse: self._on_secure,
            OpenRequested: self._on_open,
            ConnectionEnded: self._on_end,
        }
        broker.connections.add(self)

    # -- what the service sees (and ``user``, ``vhost``: ContextHandler's) ---------------------
    def resource_counts(self) -> tuple[int, int]:
        return len(self.sessions), sum(len(s.subscriptions) for s in self.sessions.values())

    def consumer_details(self) -> list[dict[str, Any]]:
        return []  # (0-10 subscriptions are not listed)

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm: while it is raised, transfers are taken but not
        completed (:meth:`.context.Amqp010Context.complete_transfer`); cleared, they are."""
        if not raised:
            self.ctx.release_withheld()
            self.ctx.wake()

    def handle(self, events: list[Event]) -> None:
        if self._waiting is not None:
            self._wait_with(events)
            return
        rest = iter(events)
        for e in rest:
            run = self._events.get(type(e))
            if run is not None:
                run(e)
            if self._waiting is not None:  # a command waits for an owner's answer: so does the rest
                self._wait_with(list(rest))
                break

    def _wait_with(self, events: list[Event]) -> None:
        """Keep ``events`` until the answer a command waits for came; the end of the
        connection is handled at once."""
        assert self._waiting is not None
        for e in events:
            if type(e) is ConnectionEnded:
                self._waiting = None
                self.cleanup()
                return
            self._waiting.append(e)

    # -- the handshake --------------------------------------------------------------------------
    def check_login(self, mechanism: str, response: bytes) -> tuple[bool, str | None, str | None]:
        """(ok, user, the name it tried): PLAIN against the users file, ANONYMOUS if allowed
        (the anonymous user: None), EXTERNAL as the TLS client certificate; with
        ``tokens``, PLAIN's password may be an OAuth 2 token."""
        if mechanism == "EXTERNAL":
            return self.tls_identity is not None, self.tls_identity, self.tls_identity
        if mechanism == "ANONYMOUS":
            return self.allow_anonymous, None, None
        if mechanism == "PLAIN" and (self.users is not None or self._token_login is not None):
            parts = response.split(b"\x00")
            name = parts[1].decode(errors="replace") if len(parts) == 3 else None
            store = self.users if self.users is not None else InMemoryCredentialStore()
            try:
                outcome = PlainServer(store, password_check=self._token_login).step(response)
            except Exception:  # a malformed response: refused like a wrong password
                return False, None, name
            if isinstance(outcome, ServerOutcome) and outcome.code == SaslCode.OK:
                return True, outcome.identity, name
            return False, None, name
        return False, None, None

    def _on_login(self, e: LoginRequested) -> None:
        ok, user, name = self.check_login(e.mechanism, e.response)
        if not ok:
            self.login_refused("0-10", e.mechanism, name)
            self.conn.reject_login(f"authentication failed ({e.mechanism})")
            return
        self.logged_in(user, None if self._token_login is None else self._token_login.grant)
        self.conn.accept_login()

    def _on_secure(self, e: SecureResponse) -> None:
        self.conn.reject_login("no mechanism offered takes a challenge")

    def _on_open(self, e: OpenRequested) -> None:
        forced = CLOSE_CODES["connection-forced"]
        if self.refusal is not None:
            self.conn.refuse_open(forced, self.refusal)
            return
        vhost = self.broker.vhost(e.virtual_host or "/")
        if vhost is None:
            self.conn.refuse_open(
                CLOSE_CODES["invalid-path"], f"no virtual host '{e.virtual_host}'"
            )
            return
        if self.broker.vhost_denial(vhost, self.ctx.user, grant=self.ctx.grant) is not None:
            self.conn.refuse_open(
                forced,
                f"access to virtual host '{vhost.name}' refused for user '{self.ctx.user or 'anonymous'}'",
            )
            return
        self.ctx.vhost = vhost
        self.conn.accept_open()

    # -- sessions and commands ------------------------------------------------------------------
    def _on_attached(self, e: SessionAttached) -> None:
        if e.resumed:
            s = self.sessions.get(e.channel)
            if s is not None:
                s.restart()
            return
        self.sessions[e.channel] = Amqp010Session(
            self.ctx, e.channel, e.name, state=self.conn.sessions.get(e.channel)
        )

    def _resumable(self, channel: int, name: bytes) -> Session | None:
        """The engine asks for a kept session named ``name`` (see :mod:`.kept`)."""
        s = self.kept.take((self.ctx.vhost.name, self.ctx.user, name))
        if s is None:
            return None
        if s.state is None:
            s.close()
            return None
        s.resumed(self.ctx, channel)
        self.sessions[channel] = s
        log.debug("0-10 session %r resumed on channel %d", name, channel)
        return s.state

    def _on_detached(self, e: SessionDetached) -> None:
        s = self.sessions.pop(e.channel, None)
        if s is not None:
            self._detached(s)

    def _detached(self, s: Amqp010Session) -> None:
        """``s`` lost its transport: kept for its timeout (if it was granted one and did not
        fail), else ended."""
        state = s.state
        if state is None or state.timeout <= 0 or state.failed or s.closed:
            s.close()
            return
        s.attached = False
        if self.conn.sessions.get(s.channel) is state:
            del self.conn.sessions[s.channel]
        self.kept.keep(s, state.timeout)

    def _on_completed(self, e: TransfersCompleted) -> None:
        s = self.sessions.get(e.channel)
        if s is not None:
            s.transfers_completed(e.commands)

    def _on_command(self, e: CommandReceived) -> None:
        s = self.sessions.get(e.channel)
        if s is None:
            return
        c = e.command
        self._current = (s, c)
        try:
            run = self.commands.get(c.name)
            if run is None:
                raise CommandError("not-implemented", f"{c.name} is not implemented")
            result = run(s, c)
        except CommandError as exc:
            self._fail(s, c, exc.error, str(exc))
            return
        except ModelError as exc:
            self._fail(s, c, error_of(exc), str(exc))
            return
        if self._later:  # (completed by the owner's answer)
            self._later = False
            return
        if c.name in _COMPLETES_ITSELF:
            return
        if c.name in DEFINES:  # (once stored, and with several workers once every worker has it)
            self.ctx.after_order(lambda _: result)
            self._later = False
            return
        self.conn.complete(s.channel, c, result)

    def _answer_later(
        self, ask: Callable[[Answered[Any]], None], then: Callable[[Callable[[], Any]], Compound | None]
    ) -> None:
        """Put a question to a queue another worker owns and complete the command being
        handled with ``then(answer)``'s result once it answers (a refusal ``then`` raises
        fails it, as if raised by the command itself); the connection's further commands
        wait for that, in order. ``then`` runs even if the session or connection went
        meanwhile (to give back what it was given)."""
        assert self._current is not None
        s, c = self._current
        self._later = True
        asked = False
        done = False

        def answered(answer: Callable[[], Any]) -> None:
            nonlocal done
            done = True
            waiting = None
            if asked:
                waiting, self._waiting = self._waiting, None
            try:
                result = then(answer)
            except CommandError as exc:
                self._failed_later(s, c, exc.error, str(exc))
            except ModelError as exc:
                self._failed_later(s, c, error_of(exc), str(exc))
            else:
                if not self.closed and not s.closed:
                    s.complete(c, result)
            if asked and not self.closed:
                if waiting:
                    self.handle(waiting)
                self.ctx.wake()

        ask(answered)
        asked = True
        if not done:
            self._waiting = []

    def _failed_later(self, s: Amqp010Session, c: Compound, error: str, text: str) -> None:
        """Command ``c`` fails after its handler returned (unless its session went meanwhile)."""
        if not self.closed and not s.closed and self.sessions.get(s.channel) is s:
            self._fail(s, c, error, text)

    def _fail(self, s: Amqp010Session, c: Compound | None, error: str, text: str) -> None:
        log.debug("0-10 %s failed: %s: %s", "session" if c is None else c.name, error, text)
        self.conn.exception(s.channel, c, error, text)
        self.sessions.pop(s.channel, None)
        s.close()

    # -- the end --------------------------------------------------------------------------------
    def _on_end(self, e: ConnectionEnded) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in list(self.sessions.values()):
            self._detached(s)
        self.sessions.clear()
        held, self.ctx.withheld = self.ctx.withheld, []
        for s, c in held:  # recorded for a kept session's resume (no one waits here now)
            s.complete(c)
        self.broker.connections.discard(self)

    @contextlib.contextmanager
    def attaching_fresh(self) -> Iterator[Callable[[], None]]:
        """Meanwhile, until the function it gives is called, a session's attach makes a new
        session, none kept here resumed (a moved connection's replay: its sessions attached
        fresh on the worker it came from; once the replay is taken, from its deciding event
        on, this worker serves the connection and a later attach may resume one)."""
        self.conn.resumable = _not_kept
        try:
            yield self._resuming
        finally:
            self._resuming()

    def _resuming(self) -> None:
        self.conn.resumable = self._resumable

    def moved_away(self) -> None:
        """Another worker serves the connection now (``move_connections``): its sessions
        end here, none kept for a resume (that worker has them)."""
        for s in list(self.sessions.values()):
            s.close()
        self.sessions.clear()

    def replay_refused(self) -> None:
        """The replay of a connection moved here was not taken (the worker it came from
        serves it on): the sessions the replay attached end, none kept here (their
        ``request-timeout`` was replayed too), then as :meth:`cleanup`."""
        self.moved_away()
        self.cleanup()

    def close(self, code: int, text: str) -> None:
        """Close the connection (the broker shutting down, management)."""
        self.conn.close(code, text)
        for s in list(self.sessions.values()):
            s.close()
        self.sessions.clear()
        self.ctx.wake()

    def tick(self) -> None:
        """Called once a second: a connection whose OAuth 2 token expired is closed
        (connection-forced, as RabbitMQ closes a 0-9-1 one); transfers withheld for
        memory are completed once it allows."""
        if not self.closed and self.conn.state == "opened":
            expired = self.token_expired(self.broker.now())
            if expired is not None:
                self.close(CLOSE_CODES["connection-forced"], expired)
                return
        if self.ctx.withheld:
            self.ctx.release_withheld()
            self.ctx.wake()
        now = self.broker.now()
        for s in list(self.sessions.values()):
            if s.unacked and s.attached and not s.closed:
                late = s.unsettled_clock.overdue(s.unacked, _consumer_timeout, now)
                if late is not None:
                    self._time_out(s, late[1])

    def _time_out(self, s: Amqp010Session, timeout: float) -> None:
        """``s`` held a transfer unaccepted past its consumer timeout: the session ends with
        ``precondition-failed`` (as a 0-9-1 channel is closed with PRECONDITION_FAILED);
        what it held goes back."""
        text = (
            f"delivery on session {s.name.decode(errors='replace')!r} not accepted within "
            f"the consumer timeout of {round(timeout * 1000)} ms"
        )
        log.info("ending a 0-10 session: %s", text)
        self._fail(s, None, "precondition-failed", text)
        self.ctx.wake()
