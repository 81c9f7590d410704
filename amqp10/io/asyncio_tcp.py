"""The one place that reaches past anyio into asyncio's transport of a plain TCP stream
(and into asyncio's selector loop, for :class:`Poller`).

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
is never taken to be idle. :class:`Poller` reads that loop's timers, wake-up socket and
selector, for :meth:`~amqp10.io.direct.DirectDriver.read_here` (which also sets the loop
as the thread's running one with ``asyncio.events._set_running_loop`` while it feeds
what it read): a loop without them is always run instead.

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
    heap ``_scheduled``, wake-up socket ``_ssock`` and its selector's ``_fd_to_key`` are
    what :meth:`wait` reads) or the platform has no ``poll``."""

    __slots__ = ("_fd", "_files", "_loop", "_poll")

    def __init__(self, loop: Any, fd: int, wake_fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._files: dict[int, Any] = loop._selector._fd_to_key  # (what the loop waits on, live)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(wake_fd, select.POLLIN)

    @classmethod
    def make(cls, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport) -> Poller | None:
        sock = transport.get_extra_info("socket")
        wake = getattr(loop, "_ssock", None)
        usable = (
            type(getattr(loop, "_scheduled", None)) is list
            and wake is not None
            and type(getattr(getattr(loop, "_selector", None), "_fd_to_key", None)) is dict
            and sock is not None
            and hasattr(select, "poll")
        )
        if not usable:
            return None
        assert wake is not None
        return cls(loop, sock.fileno(), wake.fileno())

    def wait(self, limit: float) -> bool:
        """True once the socket is readable, within ``limit`` seconds and before the loop's
        next timer is due; False at once where the loop waits on another file too (a
        second connection, a user's HTTP request on it) or its next timer is a cancelled
        one (the loop drops it in its turn); False too if the time ran out, a timer came
        due or the loop was woken. On False the caller runs the loop."""
        files = self._files
        fd = self._fd
        if len(files) != 2 or fd not in files:  # (this socket and the wake-up socket only)
            return False
        loop = self._loop
        scheduled = loop._scheduled  # (afresh: the loop replaces the list as it prunes it)
        if scheduled:
            first = scheduled[0]
            if first.cancelled():
                return False
            limit = min(limit, first.when() - loop.time())
        if limit <= 0:
            return False
        ready = self._poll.poll(None if math.isinf(limit) else math.ceil(min(limit, 86_400.0) * 1000))
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
