"""The AMQP 0-9-1 front end (0-9 and 0-8 as dialects) as the service sees it: which
headers it takes, its login choices, and one connection served from its header to its end.

With ``move_connections`` (workers > 1) a plain-TCP connection is moved to the worker
that owns its queue (:mod:`..workers.handover`), decided at its first method a replay
on that worker would not reproduce as it was (:func:`decides_move`): everything before
it is the handshake, ``channel.open`` and the methods of :data:`REPLAYABLE` (answered
at once, nothing in the core). That method is moved for if it names a queue of another
worker (:func:`queue_named`): ``queue.declare`` (not server-named), ``queue.bind``,
``queue.purge``, ``queue.delete``, ``basic.consume``, ``basic.get``, or a
``basic.publish`` to the default exchange with that queue's name as its routing key.
Any other (an exchange's method, a publish to another exchange, a local queue, a
server-named one, a name of ``amq.``) leaves the connection where it is, unrecorded.

With ``publishers_apart`` a declaration that names a queue and does not make it
exclusive does not decide (most clients declare the queue they then use): the publish or
consume after it does, so a publisher goes to the worker after the owner. The worker
that takes such a connection answers the replayed declaration from its copy of the
metadata (:meth:`.queue.QueueMethods.declare`), compared without the counts
(:func:`as_compared`) and not sent; the connection stays if its declaration's answer was
not written yet when the deciding method came (in the same read, or still waiting for a
commit or the owner).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Final

from anyio.abc import ByteStream

from ...amqp091 import (
    CAPABILITIES,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionOpened,
    ConnectionTuned,
    ContentReceived,
    LoginRequested,
    MethodReceived,
    ReplyCode,
    VirtualHostRequested,
)
from ...amqp091 import methods as m
from ...amqp091.dialects import AMQP_0_9_1, Dialect, dialect_for_header
from ...amqp091.framing import FRAME_HEARTBEAT, FRAME_METHOD, split_frames
from ...io.streams import tls_identity
from ..config import BrokerConfig
from ..core import Broker
from ..frontend import ServeContext, ServedConnection, driver_for, header_then_frames
from ..guard import HeldOutput
from ..workers.handover import Handover, Mover, Watched
from .connection import BrokerConnection
from .handler import Amqp091Handler
from .queue import replayed_from_metadata

__all__ = ["REPLAYABLE", "WORKER_PROPERTY", "Amqp091FrontEnd", "answered_first", "as_compared", "decides_move", "frames", "login_mechanisms", "queue_named", "replay_failed"]

WORKER_PROPERTY: Final = "amqp10:worker"
"""In ``connection.start``'s server properties (``workers`` > 1): the worker serving the
connection, as 1.0's open says it."""

log = logging.getLogger("amqp10.broker")

_BEFORE: Final = frozenset(
    {LoginRequested, ConnectionTuned, VirtualHostRequested, ConnectionOpened, ChannelOpened, ChannelFlowChanged}
)
"""The events of a connection's handshake and channels that a replay reproduces."""
REPLAYABLE: Final = frozenset({m.BasicQos, m.ConfirmSelect, m.TxSelect})
"""The channel methods before which a connection may still move: a replay answers them
the same way (at once, with the same bytes), and they leave nothing in the core."""
_NAMES_QUEUE: Final = frozenset({m.QueueDeclare, m.QueueBind, m.QueuePurge, m.QueueDelete, m.BasicConsume, m.BasicGet})


def decides_move(e: Any, apart: bool = False) -> bool:
    """Whether a movable connection's move is decided at event ``e``: its first that is
    not part of the handshake, a channel's opening or a method of :data:`REPLAYABLE`.
    With ``apart`` (``publishers_apart``) not at a ``queue.declare`` a replay answers
    from the metadata either (:func:`.queue.replayed_from_metadata`: most clients declare
    the queue they then publish to or consume from): at the publish or consume that
    follows, which says whether the connection publishes."""
    t = type(e)
    if t is MethodReceived:
        method = e.method
        if apart and type(method) is m.QueueDeclare:
            return not replayed_from_metadata(method)
        return type(method) not in REPLAYABLE
    return t not in _BEFORE


def answered_first(e: Any) -> bool:
    """An event whose answer a replay takes as the accepting worker wrote it
    (:class:`~..workers.handover.Mover`'s ``answered_first``): a declaration that does not
    decide with ``publishers_apart``."""
    return type(e) is MethodReceived and type(e.method) is m.QueueDeclare


def queue_named(e: Any) -> str | None:
    """The queue a deciding event names (None: none, a server-named one, or one of the
    ``amq.`` names, the broker's own: direct reply-to)."""
    method: Any = getattr(e, "method", None)
    if type(e) is MethodReceived and type(method) in _NAMES_QUEUE:
        name: str = method.queue
    elif type(e) is ContentReceived and type(method) is m.BasicPublish and method.exchange == "":
        name = method.routing_key
    else:
        return None
    return name if name and not name.startswith("amq.") else None


frames: Final = partial(header_then_frames, split_frames)
"""A connection's input from its start as its replay feeds it: the protocol header, then
one frame at a time."""


_DECLARE_OK: Final = b"\x00\x32\x00\x0b"
"""``queue.declare-ok``'s class and method ids, as a method frame's payload begins."""
_COUNTS: Final = 9
"""The bytes a ``queue.declare-ok`` frame ends with: its message and consumer counts (a
long each), then the frame's end octet."""


def as_compared(output: bytes) -> bytes:
    """A connection's output as its replay must reproduce it (:func:`replay`'s
    ``compared``): its frames but heartbeats, and ``queue.declare-ok``'s counts as zero.
    A heartbeat is written on the engine's own timer (a client with a short interval, or a
    slow one, gets one between ``tune-ok`` and its first queue method): the worker that
    takes the connection writes its own on its own timer, not the first worker's again.
    A declaration answered before the move (``publishers_apart``) counted the queue's
    messages and consumers then; its replay answers from the metadata
    (:func:`.queue.replayed_from_metadata`), and that answer is not sent."""
    kept = []
    for f in split_frames(output):
        kind = f[0]
        if kind == FRAME_HEARTBEAT:
            continue
        if kind == FRAME_METHOD and f[7:11] == _DECLARE_OK and len(f) > 11 + _COUNTS:
            f = f[:-_COUNTS] + bytes(_COUNTS - 1) + f[-1:]
        kept.append(f)
    return b"".join(kept)


def replay_failed(handler: Amqp091Handler, why: str) -> None:
    """Close a connection moved here whose replay raised once it was taken
    (:func:`replay`'s ``fail``): ``connection.close`` 541, ``why`` its text."""
    handler.close(ReplyCode.INTERNAL_ERROR, f"INTERNAL_ERROR - {why}"[:255])


def _owner(handover: Handover, handler: Amqp091Handler, e: Any) -> int | None:
    """The worker that owns the queue event ``e`` names, if another one."""
    name = queue_named(e)
    if name is None or handler.answer_waits():  # (a declaration's answer not out yet: it stays)
        return None
    return handover.worker_for(handler.vhost.name, name, publishes=type(e) is ContentReceived)


def login_mechanisms(config: BrokerConfig, *, tls_identity: str | None) -> tuple[str, ...]:
    """The mechanisms ``connection.start`` offers: the ``[sasl]`` mechanisms apply to
    0-9-1 too. AMQPLAIN is 0-9-1's PLAIN, and guest/guest (over either) is its anonymous
    login; EXTERNAL with a client certificate."""
    sasl = config.sasl
    passwords = "PLAIN" in sasl.mechanisms
    external = tls_identity is not None and "EXTERNAL" in sasl.mechanisms
    return (("PLAIN", "AMQPLAIN") if passwords or sasl.allow_anonymous else ()) + (("EXTERNAL",) if external else ())


class Amqp091FrontEnd:
    """AMQP 0-9-1, 0-9 and 0-8; it answers any header no other front end's family
    claims with 0-9-1's (0-9-1 §4.2.2)."""

    name = "AMQP 0-9-1"

    def accepts(self, header: bytes) -> bool:
        return dialect_for_header(header) is not None

    def counter_offer(self, header: bytes) -> bytes | None:
        return AMQP_0_9_1.header

    def prepare(self, broker: Broker, config: BrokerConfig) -> None:
        pass  # the AMQ model is the core's own

    async def serve(self, stream: ByteStream, ctx: ServeContext) -> None:
        dialect = dialect_for_header(ctx.header)
        assert dialect is not None  # accepts() said so
        await self._serve(stream, ctx, dialect)

    async def _serve(self, stream: ByteStream, ctx: ServeContext, dialect: Dialect) -> None:
        cfg = ctx.config
        peer = ctx.peer
        identity = tls_identity(stream)
        mechanisms = login_mechanisms(cfg, tls_identity=identity)
        if not mechanisms:
            await ctx.refuse(stream, "0-9-1", "no [sasl] mechanism it can use")
            return
        conn = BrokerConnection(
            "server",
            dialect=dialect,
            mechanisms=mechanisms,
            handshake_timeout=cfg.limits.handshake_timeout,
            server_properties={
                "product": "amqp10",
                "cluster_name": cfg.container_id,
                "capabilities": CAPABILITIES,
                **({} if ctx.worker is None else {WORKER_PROPERTY: ctx.shown_worker}),
            },
        )
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        decides = partial(decides_move, apart=cfg.publishers_apart)
        recording = ctx.recording(stream, held)  # movable: recorded until its deciding method
        engine = held if recording is None else recording
        on_events = Watched()  # (the mover first while it watches, then the handler)
        with ctx.logging_in(held, conn.extend_handshake) as login:
            # the driver first (its events reach the handler a batch at a time), so the
            # handler's wake, called per message, is the driver's own method; while paused
            # (publishing blocked) it still reads now and then: heartbeats
            driver = driver_for(stream, engine, on_events, peer=peer, pause_limit=5.0)
            handler = Amqp091Handler(
                ctx.broker,
                conn,
                users=ctx.users if "PLAIN" in cfg.sasl.mechanisms else None,
                allow_anonymous=cfg.sasl.allow_anonymous,
                tls_identity=identity,
                tokens=ctx.tokens,
                wake=driver.flush_soon,
                pause=driver.pause_reading,
                resume=driver.resume_reading,
            )
            handler.refusal = ctx.refusal
            handler.login_hook = login
            on_events.handle = handler.handle
            if recording is not None and ctx.handover is not None:
                worker_of = partial(_owner, ctx.handover, handler)
                on_events.mover = Mover(
                    ctx.handover, peer, recording, decides, worker_of, handler.handle, answered_first=answered_first
                )
            rest = b""
            if ctx.moved is not None:  # all the other worker read (a plain socket): served here if it answers the same
                handler.ctx.replaying = ctx.moved.replaying
                replayed = ctx.replayed(
                    held, handler.handle, decides, handler.cleanup, frames, as_compared,
                    fail=partial(replay_failed, handler),
                )
                if replayed is None:
                    return
                rest = replayed
            else:
                on_events(engine.receive_data(ctx.header))  # the header, read before the driver

            def force_close(reason: str | None) -> None:
                text = reason or "broker forced connection closure"
                handler.close(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {text}"[:255])

            log.debug("0-9-1 (%s) connection from %s", dialect.name, peer)
            served = ServedConnection(driver, handler, f"AMQP {dialect.name}", peer, force_close, tick=handler.tick)
            await ctx.run(served, mover=on_events.mover, rest=rest)
