"""`SaslConnection`: a SASL layer in front of the AMQP engine, behind one sans-IO object.

Bytes from the peer go to the SASL layer until its exchange is over, then (the rest of
that same chunk included) to the `amqp10.transport.Connection`. Our output is the SASL
layer's, then, once authentication has succeeded, the engine's: the engine may be used
at once (``open()``, ``session()`` ...), but nothing it writes leaves before the
sasl-outcome, and after a failed exchange nothing of it ever does.
"""

from __future__ import annotations

from typing import Any

from ..transport import Connection, ConnectionState
from ..transport.events import Event
from .layer import SaslClient, SaslServer

__all__ = ["SaslConnection"]


class SaslConnection:
    """A `SaslClient` or `SaslServer` plus the `Connection` it guards.

    Same interface as the engine: `receive_data`, `data_to_send`, `tick`, `poll_events`,
    `is_closed`; `receive_data` returns SASL events (`SaslCompleted`, `SaslSkipped`,
    `SaslFailed`) and engine events in the order they happened. Any other attribute
    (``open``, ``session``, ``close``, ``state`` ...) is the inner connection's.

    The client's connection must already have its AMQP header queued (the default,
    ``send_header=True``): it goes out right after the outcome. The server's must be
    created with ``send_header=False``: it answers the client's AMQP header.
    `SaslConnection.client` and `SaslConnection.server` build them that way.
    """

    def __init__(self, sasl: SaslClient | SaslServer, connection: Connection) -> None:
        if isinstance(sasl, SaslServer):
            if connection.state is not ConnectionState.START:
                raise ValueError(
                    "a server's Connection must be created with send_header=False"
                    " (it answers the client's AMQP header after SASL)"
                )
        elif connection.state is ConnectionState.START:
            raise ValueError(
                "a client's Connection must have queued its AMQP header (send_header=True):"
                " it follows the sasl-outcome"
            )
        self.sasl = sasl
        self.connection = connection
        # SASL succeeded and its last bytes and events were taken: from then on every call
        # goes straight to the engine (set once; a terminal SASL state never changes)
        self._through = False

    @classmethod
    def client(cls, sasl: SaslClient, container_id: str, **kwargs: Any) -> SaslConnection:
        """A client: ``Connection(container_id, **kwargs)`` behind `sasl`."""
        return cls(sasl, Connection(container_id, send_header=True, **kwargs))

    @classmethod
    def server(cls, sasl: SaslServer, container_id: str, **kwargs: Any) -> SaslConnection:
        """A server: ``Connection(container_id, send_header=False, **kwargs)`` behind `sasl`."""
        return cls(sasl, Connection(container_id, send_header=False, **kwargs))

    def __repr__(self) -> str:
        return f"SaslConnection({self.sasl!r}, {self.connection!r})"

    def __getattr__(self, name: str) -> Any:
        # only reached for names this class does not define: the engine's verbs and state
        if name in ("sasl", "connection", "_through"):  # not set yet (e.g. copy): do not recurse
            raise AttributeError(name)
        return getattr(self.connection, name)

    def bypass(self) -> Connection | None:
        """The engine, once every call goes straight to it (SASL succeeded and its last
        bytes and events were taken): a driver may then call it without this layer."""
        return self.connection if self._through else None

    @property
    def _amqp(self) -> bool:
        """SASL is over and did not fail: the stream is the engine's now."""
        return self.sasl.done and not self.sasl.failed

    @property
    def is_closed(self) -> bool:
        """The stream should end: SASL failed, or the AMQP connection is closed."""
        if self._through:
            return self.connection.is_closed
        if self.sasl.failed:
            return True
        return self._amqp and self.connection.is_closed

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes read from the peer (``b""`` at the end of the stream)."""
        if self._through:
            return self.connection.receive_data(data)
        sasl = self.sasl
        if self._amqp:
            return self.connection.receive_data(data)
        if sasl.done:  # failed: the stream is over
            return []
        events: list[Event] = list(sasl.receive_data(data))
        if self._amqp:
            rest = sasl.take_remaining()
            if rest:
                events += self.connection.receive_data(rest)
        return events

    def data_to_send(self) -> bytes:
        """The SASL layer's bytes, then (after success) the engine's."""
        if self._through:
            return self.connection.data_to_send()
        out = self.sasl.data_to_send()
        if self._amqp:
            more = self.connection.data_to_send()
            if more:
                out += more
            self._through = self.sasl.drained
        return out

    def tick(self, now: float) -> float | None:
        """The SASL handshake timer until SASL is done, the engine's timers after."""
        if self._through or self._amqp:
            return self.connection.tick(now)
        return self.sasl.tick(now)

    def poll_events(self) -> list[Event]:
        """Events raised outside `receive_data` (by `tick`) in either layer."""
        if self._through:
            return self.connection.poll_events()
        events: list[Event] = list(self.sasl.poll_events())
        if self._amqp:
            events += self.connection.poll_events()
            self._through = self.sasl.drained
        return events
