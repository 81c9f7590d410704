"""The server-role 0-9-1 engine with what the broker's network driver asks of it.

:class:`BrokerConnection` is :class:`amqp10.amqp091.Connection` plus the broker's
habits: it lingers after the client's ``connection.close`` (RabbitMQ's manner),
and it calls the front end back on every tick (:attr:`~BrokerConnection.recheck`,
:attr:`~BrokerConnection.before_send`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ...amqp091 import Connection, ConnectionState, Event

__all__ = ["LINGER_SECONDS", "BrokerConnection"]

LINGER_SECONDS: Final = 5.0


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
