"""0-10 sessions kept after their transport ended (0-10 §3.8), for a later connection
that attaches the same name to resume.

A session is kept when it was granted a timeout (``session.request-timeout``, at most the
broker's ``link_recovery_seconds``) and ended without an exception; it keeps what it held
(its subscriptions, stopped; the messages it was sent and not yet settled, still acquired;
its transaction) for that long, under the broker's ``limits.max_suspended_links`` (the
oldest goes first). A session not resumed in time ends as any session ends: what it held
goes back to its queues and its exclusive queues go. Names are scoped, as 0-10 scopes
them, by the virtual host and the user who attached them.
"""

from __future__ import annotations

from collections import OrderedDict

from ..core import Broker, Lease
from .session import Amqp010Session

__all__ = ["KeptSessions"]

Key = tuple[str, str | None, bytes]
"""(virtual host, user, session name)."""


class KeptSessions:
    """The detached 0-10 sessions of one broker, by name (:meth:`of`: the broker's own)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.limit = broker.config.limits.max_suspended_links
        self.sessions: OrderedDict[Key, tuple[Amqp010Session, Lease]] = OrderedDict()

    @classmethod
    def of(cls, broker: Broker) -> KeptSessions:
        return broker.shared("amqp010.kept-sessions", lambda: cls(broker))

    @staticmethod
    def key(s: Amqp010Session) -> Key:
        return (s.ctx.vhost.name, s.ctx.user, s.name)

    def keep(self, s: Amqp010Session, timeout: float) -> None:
        """Keep ``s`` (detached) for ``timeout`` seconds."""
        key = self.key(s)
        self._end(key)
        lease = self.broker.leases.take(timeout, lambda: self._expired(key, s))
        self.sessions[key] = (s, lease)
        while len(self.sessions) > self.limit:
            self._end(next(iter(self.sessions)))

    def take(self, key: Key) -> Amqp010Session | None:
        """The session kept under ``key``, no longer kept (None: there is none)."""
        kept = self.sessions.pop(key, None)
        if kept is None:
            return None
        s, lease = kept
        self.broker.leases.drop(lease)
        return s

    def _end(self, key: Key) -> None:
        s = self.take(key)
        if s is not None:
            s.close()

    def _expired(self, key: Key, s: Amqp010Session) -> None:
        kept = self.sessions.get(key)
        if kept is not None and kept[0] is s:
            del self.sessions[key]
            s.close()
