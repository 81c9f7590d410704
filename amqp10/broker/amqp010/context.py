"""What every 0-10 command handler shares: the connection's engine, virtual host and user,
permission checks, and the error a failed command raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ...amqp010 import Compound, Connection
from ..core import (
    AccessRefused,
    Answered,
    Broker,
    ModelError,
    NodeElsewhere,
    NotFound,
    PreconditionFailed,
    Queue,
    ResourceLocked,
    Stream,
    VirtualHost,
    nothing,
)
from ..core.broker import Action, ResourceKind

if TYPE_CHECKING:
    from ..oauth import TokenGrant
    from .session import Amqp010Session

__all__ = ["ERRORS", "Amqp010Context", "CommandError", "Later", "error_of"]

Later = Callable[[Callable[[Answered[Any]], None], Callable[[Callable[[], Any]], "Compound | None"]], None]
"""``later(ask, then)``: see :attr:`Amqp010Context.later`."""


class CommandError(Exception):
    """A command that fails: ``execution.exception`` with ``error`` (the spec's error-code
    name), and the session ends."""

    def __init__(self, error: str, text: str) -> None:
        super().__init__(text)
        self.error = error


ERRORS: Final[dict[type[ModelError], str]] = {
    NotFound: "not-found",
    AccessRefused: "unauthorized-access",
    ResourceLocked: "resource-locked",
    PreconditionFailed: "precondition-failed",
}
"""The core's refusals as 0-10 error codes."""


def error_of(exc: ModelError) -> str:
    for cls in type(exc).__mro__:
        name = ERRORS.get(cls)
        if name is not None:
            return name
    return "internal-error"


class Amqp010Context:
    """One 0-10 connection as its command handlers see it."""

    def __init__(
        self,
        broker: Broker,
        conn: Connection,
        wake: Callable[[], None],
        later: Later,
        fail: Callable[[Amqp010Session, Compound, str, str], None],
    ) -> None:
        self.broker = broker
        self.conn = conn
        self.wake = wake
        self.fail = fail
        """``fail(session, command, error, text)``: a command that completed its handler fails
        after all (a queue another worker owns refused a transfer): ``execution.exception``,
        and the session ends (if it is still there)."""
        self.later = later
        """``later(ask, then)``: ``ask(answered)`` puts a question to a queue another worker
        owns (:class:`~amqp10.broker.core.NodeElsewhere`); the command being handled
        completes with ``then(answer)``'s result once it answered (``answer()`` returns
        the answer or raises the owner's refusal, which fails the command), the
        connection's further commands waiting until then, in order. Only where
        :meth:`elsewhere` found such a queue: with one worker, never."""
        self.vhost: VirtualHost = broker.default
        self.user: str | None = None
        self.grant: TokenGrant | None = None
        """What the OAuth 2 token it logged in with allows (None: no token; the users file decides)."""
        self.origin = object()
        """What its messages are marked with (``QueuedMessage.mark_origin``: no-local queues)."""
        self.withheld: list[tuple[Amqp010Session, Compound]] = []
        """Transfers whose completion waits for the broker's memory (flow control)."""

    def complete_transfer(self, s: Amqp010Session, c: Compound) -> None:
        """A transfer is routed (and stored): complete it, unless the broker is short of
        memory (a resource alarm, or queued bodies over the memory limit). Then, as Qpid's
        broker does, its completion waits: a 0-10 sender stops when the transfers it has
        outstanding reach its capacity, and goes on once :meth:`release_withheld` runs."""
        if self.withheld or not self.broker.memory_ok():
            self.withheld.append((s, c))
            return
        s.complete(c)

    def release_withheld(self) -> None:
        """Complete the withheld transfers, in order, if memory allows now."""
        if not self.withheld or not self.broker.memory_ok():
            return
        held, self.withheld = self.withheld, []
        for s, c in held:
            s.complete(c)

    def after_order(self, then: Callable[[Callable[[], None]], Compound | None]) -> None:
        """Complete the command being handled with ``then(answer)``'s result once the
        changes made here are stored and, with several workers, in the metadata's one order
        and applied by every worker (:meth:`Broker.after_commit
        <amqp10.broker.core.Broker.after_commit>`, what 0-9-1's declare-ok waits for),
        through :attr:`later`: the connection's further commands wait too."""
        broker = self.broker
        self.later(lambda answered: broker.after_commit(lambda: answered(nothing)), then)

    def authorize(self, resource: str, action: Action, kind: ResourceKind) -> None:
        if not self.broker.authorize(self.vhost, self.user, resource, action, kind, grant=self.grant):
            raise CommandError(
                "unauthorized-access",
                f"access to {kind} '{resource}' in vhost '{self.vhost.name}' refused for user '{self.user or 'anonymous'}'",
            )

    def queue(self, name: str, owner: object) -> Queue | Stream:
        """Queue ``name``, unless another session holds it exclusively."""
        if not name:
            raise CommandError("illegal-argument", "a queue name is required")
        q = self.vhost.queue(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.vhost.name}'")
        if isinstance(q, Queue) and q.owner is not None and q.owner is not owner:
            raise ResourceLocked(
                f"queue '{name}' in vhost '{self.vhost.name}' is exclusive to another session"
            )
        return q

    def elsewhere(self, name: str) -> NodeElsewhere | None:
        """The stand-in for queue ``name`` if another worker owns it (its answers come
        through :attr:`later`); None for a queue of this worker's, or none."""
        return self.vhost.elsewhere(name) if name else None

    def send(self, channel: int, command: Compound) -> int:
        """Send a command (a delivery) on the session on ``channel``; return its id."""
        cid = self.conn.send_command(channel, command)
        self.wake()
        return cid
