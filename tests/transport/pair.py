"""The pair harness: two engines pumping bytes to each other in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from amqp10.transport import Connection, Event


class Pair:
    """A client and a server ``Connection`` wired back to back.

    ``pump()`` moves bytes both ways until neither side has anything to send,
    collecting the events each side produced. ``chunk`` feeds bytes in pieces
    of that size (1 = byte by byte) to exercise partial-frame parsing.
    """

    def __init__(self, client: Connection | None = None, server: Connection | None = None, chunk: int | None = None) -> None:
        self.client = client or Connection("client")
        self.server = server or Connection("server")
        self.chunk = chunk
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []
        self.wire: list[tuple[str, bytes]] = []

    def _feed(self, conn: Connection, data: bytes) -> list[Event]:
        if self.chunk is None:
            return conn.receive_data(data)
        events: list[Event] = []
        for i in range(0, len(data), self.chunk):
            events += conn.receive_data(data[i : i + self.chunk])
        return events

    def pump(self, max_rounds: int = 1000) -> tuple[list[Event], list[Event]]:
        """Exchange bytes until quiet; return (client events, server events) of this pump."""
        ce: list[Event] = []
        se: list[Event] = []
        for _ in range(max_rounds):
            a = self.client.data_to_send()
            b = self.server.data_to_send()
            if not a and not b:
                break
            if a:
                self.wire.append(("c>s", a))
                se += self._feed(self.server, a)
            if b:
                self.wire.append(("s>c", b))
                ce += self._feed(self.client, b)
        else:  # pragma: no cover - a livelock is a bug
            raise AssertionError("pump did not quiesce")
        self.client_events += ce
        self.server_events += se
        return ce, se


def of_type(events: list[Event], tp: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, tp)]


def iter_types(events: list[Event]) -> Iterator[str]:
    return (type(e).__name__ for e in events)
