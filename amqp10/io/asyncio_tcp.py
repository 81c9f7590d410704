"""The one place that reaches past anyio into asyncio's transport of a plain TCP stream.

anyio's ``send`` and ``receive`` each yield to the event loop (and ``receive`` pauses
and resumes the transport's reading around every read); for connections that trade
small batches those task switches cost more than the frames. Two fast paths therefore
use the transport under anyio's asyncio ``SocketStream`` directly:

- :class:`~amqp10.io.driver.Driver` writes with ``transport.write`` (no await) while
  the transport takes bytes (:meth:`AsyncioTcp.writable`);
- :class:`~amqp10.io.direct.DirectDriver` also puts its own protocol on the transport
  and is fed from its callbacks.

:func:`nothing_ready` reads asyncio's own queue of ready callbacks (its event loop's
``_ready``), for :meth:`~amqp10.io.driver.Driver.batch`: a loop without one (uvloop)
is never taken to be idle.

The first two rest on anyio's private attributes (``_transport``, ``_protocol`` and the
protocol's ``read_queue``, ``is_at_eof``, ``exception``, ``write_event``):
:func:`asyncio_tcp` checks them all, and any stream it does not recognise (TLS,
WebSocket, memory streams, trio, a future anyio that renamed them) gets None, and
with it the plain awaiting path.
"""

from __future__ import annotations

import asyncio
import math
import os
import select
from typing import Any

from anyio.abc import ByteStream

__all__ = ["AsyncioTcp", "Poller", "asyncio_tcp", "nothing_ready"]

_PROTOCOL_ATTRIBUTES = ("read_queue", "is_at_eof", "exception", "write_event")


class AsyncioTcp:
    """The asyncio transport of a plain TCP stream and anyio's protocol on it."""

    __slots__ = ("protocol", "transport")

    def __init__(self, transport: asyncio.Transport, protocol: Any) -> None:
        self.transport = transport
        self.protocol = protocol
        """anyio's protocol (its read queue, EOF and write-pause state)."""

    def writable(self) -> bool:
        """Whether :meth:`write` may be called now: the transport is not paused by its
        peer (flow control: over its high-water mark) nor closing."""
        return self.protocol.write_event.is_set() and not self.transport.is_closing()

    def write(self, data: bytes) -> None:
        """Write or buffer ``data`` without blocking (see :meth:`writable`)."""
        self.transport.write(data)


def asyncio_tcp(stream: ByteStream) -> AsyncioTcp | None:
    """:class:`AsyncioTcp` of ``stream`` if it is anyio's plain TCP stream on asyncio
    (with the attributes the fast paths use); None otherwise."""
    tp = type(stream)
    if tp.__module__ != "anyio._backends._asyncio" or tp.__name__ != "SocketStream":
        return None
    transport = getattr(stream, "_transport", None)
    protocol = getattr(stream, "_protocol", None)
    if not isinstance(transport, asyncio.Transport):
        return None
    if not all(hasattr(protocol, name) for name in _PROTOCOL_ATTRIBUTES):
        return None
    return AsyncioTcp(transport, protocol)


class Poller:
    """Waits, in a thread that holds an asyncio loop without running it, for a plain TCP
    transport's socket to be readable, or for the loop to be woken (another thread's
    ``call_soon_threadsafe``, a signal): see :meth:`~amqp10.io.direct.DirectDriver.read_here`.
    :meth:`make` gives None where the loop is not asyncio's own selector loop (its timer
    heap ``_scheduled`` and wake-up socket ``_ssock`` are what :meth:`wait` reads)."""

    __slots__ = ("_fd", "_poll", "_scheduled")

    def __init__(self, fd: int, wake_fd: int, scheduled: list[Any]) -> None:
        self._fd = fd
        self._scheduled = scheduled
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(wake_fd, select.POLLIN)

    @classmethod
    def make(cls, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport) -> Poller | None:
        scheduled = getattr(loop, "_scheduled", None)
        wake = getattr(loop, "_ssock", None)
        sock = transport.get_extra_info("socket")
        if type(scheduled) is not list or wake is None or sock is None or not hasattr(select, "poll"):
            return None
        return cls(sock.fileno(), wake.fileno(), scheduled)

    def wait(self, loop: asyncio.AbstractEventLoop, limit: float) -> bool:
        """True once the socket is readable, within ``limit`` seconds and before the loop's
        next timer is due; False if the time ran out, a timer came due or the loop was woken
        (the caller runs the loop then)."""
        scheduled = self._scheduled
        if scheduled:
            limit = min(limit, scheduled[0].when() - loop.time())
        if limit <= 0:
            return False
        ms = None if limit > 86_400 else math.ceil(limit * 1000)
        fd = self._fd
        ready = self._poll.poll(ms)
        return len(ready) == 1 and ready[0][0] == fd

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the socket (b"": its end; raises what ``read`` raises)."""
        return os.read(self._fd, size)


def nothing_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` has no callback ready to run before it next polls for I/O: what
    runs now is the last of its turn. False where that cannot be told (a loop that is
    not asyncio's own: uvloop keeps its queue elsewhere)."""
    ready = getattr(loop, "_ready", None)
    return ready is not None and not ready
