"""What a 0-9-1 connection gives the handlers of its channels' methods.

:class:`Amqp091Context` is one connection as the per-concern handlers
(:mod:`.exchange`, :mod:`.queue`, :mod:`.basic`, :mod:`.publish`, :mod:`.confirm`,
:mod:`.tx`) see it: its virtual host and user, the permission check, sending and
answering, and waking the network driver. A handler fails its channel by raising
:class:`ChannelError` (or a core :class:`~amqp10.broker.core.ModelError`) and the
whole connection by raising :class:`HardError`; the router (:mod:`.handler`)
closes what they name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ...amqp091 import IllegalStateError, Method, ReplyCode, reply_text
from ...amqp091 import methods as m
from ..core import (
    Action,
    Answered,
    Broker,
    NodeElsewhere,
    NotFound,
    Queue,
    ResourceKind,
    ResourceLocked,
    Stream,
    VirtualHost,
)
from ..core.equivalence import locked_text
from .connection import BrokerConnection

if TYPE_CHECKING:
    from ..oauth import TokenGrant

__all__ = ["Amqp091Context", "ChannelError", "Encoded", "HardError", "locked_text"]

Encoded = tuple[type[Method], bytes]
"""A content method as its class and its arguments already encoded (``send_encoded_content``)."""


class ChannelError(Exception):
    """A channel exception (soft error): the channel closes with this code and text."""

    def __init__(self, code: int, explanation: str) -> None:
        super().__init__(explanation)
        self.code = code
        self.text = reply_text(code, explanation)


class HardError(ChannelError):
    """A connection exception: the whole connection closes."""


def _not_replaying() -> bool:
    return False


class Amqp091Context:
    """One 0-9-1 connection, as the handlers of its methods see it.

    ``answer_after_commit(channel, reply, then)`` is the router's: it sends ``reply``
    (and after it the methods ``then``) once the store has committed what came before,
    and holds the connection's further methods until then. ``answer_later(ask, then)``,
    the router's too, does the same for a question to a node that answers later
    (:meth:`later`). The context is also the owner of the connection's exclusive
    queues.
    """

    def __init__(
        self,
        broker: Broker,
        conn: BrokerConnection,
        *,
        wake: Callable[[], None],
        answer_after_commit: Callable[[int, Method, list[tuple[int, Method]]], None],
        answer_later: Callable[[Callable[[Answered[Any]], None], Callable[[Callable[[], Any]], None]], None],
    ) -> None:
        self.broker = broker
        self.conn = conn
        self.wake = wake
        """Tell the network driver there is output (cheap; a flag while it is handling events)."""
        self.vhost: VirtualHost = broker.default
        """The virtual host ``connection.open`` chose."""
        self.user: str | None = None
        """Who logged in (None: anonymous)."""
        self.grant: TokenGrant | None = None
        """What the OAuth 2 token it logged in with allows (None: no token; the users file decides)."""
        self.origin = object()
        """What its publishes are marked with (``QueuedMessage.mark_origin``: no-local queues)."""
        self.encoded_deliver = conn.dialect.plain_ids(m.BasicDeliver) is not None
        """Deliveries go out with their stored exchange and routing key as they are
        (``send_encoded_content``): this version lays ``basic.deliver`` out as 0-9-1 does."""
        self._answer_after_commit = answer_after_commit
        self.later = answer_later
        """``later(ask, then)``: ``ask(answered)`` puts a question to a node that answers
        later (:class:`~amqp10.broker.core.NodeElsewhere`); ``then(answer)`` finishes the
        method once it answered (``answer()`` returns the answer or raises the node's
        refusal), the connection's further methods waiting until then. A node that
        answers at once runs ``then`` inside the method."""
        self._allowing: object = None
        """The broker's permissions, once seen to allow everything (``allows_all``: no users
        file) to a connection without a token: :meth:`authorize` asks them nothing more."""
        self._held: list[tuple[int, Method]] | None = None
        """While a method's reply must go out first (:meth:`reply_first`): the notices it caused."""
        self.replaying: Callable[[], bool] = _not_replaying
        """Whether the connection's methods are being replayed here, another worker having
        answered them (a connection moved here, until its move is decided:
        :meth:`~..workers.handover.MovedIn.replaying`)."""

    # -- permissions and lookups ----------------------------------------------------------------
    def authorize(self, resource: str, action: Action, kind: ResourceKind) -> None:
        """Raise ACCESS_REFUSED unless the user may do ``action`` on ``resource``."""
        if self.grant is None:
            permissions = self.broker.permissions
            if permissions is None or permissions is self._allowing:
                return  # (Broker.authorize's first answer, without its call per publish: it is not compiled)
            if getattr(permissions, "allows_all", False):  # (a broker without a users file: the service's)
                self._allowing = permissions
                return
        if not self.broker.authorize(self.vhost, self.user, resource, action, kind, grant=self.grant):
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"access to {kind} '{resource}' in vhost '{self.vhost.name}' refused for user '{self.user or 'guest'}'",
            )

    def queue(self, name: str) -> Queue | Stream:
        """The queue or stream ``name`` in the virtual host, if this connection may use it
        (not another connection's exclusive queue)."""
        q = self.vhost.queue(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.vhost.name}'")
        if isinstance(q, Queue) and q.owner is not None and q.owner is not self:
            raise ResourceLocked(locked_text(name, self.vhost.name))
        return q

    def elsewhere(self, name: str) -> NodeElsewhere | None:
        """The stand-in for queue ``name`` if another worker owns it (its answers come later:
        :meth:`later`); None for a queue of this worker's, or none (:meth:`VirtualHost.elsewhere`)."""
        return self.vhost.elsewhere(name)

    def queue_to_read(self, name: str) -> Queue | Stream:
        """:meth:`queue`, once the user may read from it (consume, get, purge)."""
        q = self.queue(name)
        self.authorize(q.name, "read", "queue")
        return q

    # -- output ---------------------------------------------------------------------------------
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
        self.wake()

    def notify(self, channel: int, method: Method) -> None:
        """Send a notice the client did not ask for (a server's ``basic.cancel``); while a
        method's reply must go first (:meth:`reply_first`), after that reply."""
        if self._held is not None:
            self._held.append((channel, method))
            return
        self.send_method(channel, method)
        self.wake()

    @contextmanager
    def reply_first(self) -> Iterator[list[tuple[int, Method]]]:
        """Hold the notices the block causes (:meth:`notify`): the list it yields, for
        :meth:`ok_committed`'s ``then``. RabbitMQ answers ``queue.delete`` before the
        ``basic.cancel`` it sends each of the queue's consumers; a client (amqplib, kombu)
        that sees the cancel first takes the reply for someone else's."""
        held: list[tuple[int, Method]] = []
        self._held = held
        try:
            yield held
        finally:
            self._held = None

    def ok(self, channel: int, no_wait: bool, reply: Method) -> None:
        """Answer a method at once (unless the client asked for no answer)."""
        if not no_wait:
            self.send_method(channel, reply)

    def ok_committed(
        self, channel: int, no_wait: bool, reply: Method, then: list[tuple[int, Method]] | None = None
    ) -> None:
        """Answer a method that changed the broker's definitions (a declaration, binding,
        deletion, purge, tx.commit) once the change is committed to the store, as RabbitMQ
        answers declare-ok once the durable record is written; the connection's further
        methods wait for that answer. With ``no_wait`` nothing is confirmed: what follows
        is committed after it anyway. ``then``: methods that go out right after the
        reply (or at once, with ``no_wait``)."""
        if not no_wait:
            self._answer_after_commit(channel, reply, then or [])
            return
        for number, method in then or ():
            self.notify(number, method)
