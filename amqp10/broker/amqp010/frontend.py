"""The AMQP 0-10 front end as the service sees it: the header it takes, its login choices,
and one connection served from its header to its end.

With ``move_connections`` (workers > 1) a plain-TCP connection is moved to the worker
that owns its queue (:mod:`..workers.handover`), as 0-9-1's is, decided at its first
event a replay on that worker would not reproduce as it was (:func:`decides_move`):
everything before it is the handshake, a session's (fresh) ``attach`` and what the engine
answers itself (``session.command-point``, ``request-timeout``, ``flush``, ``completed``
with nothing in it, ``execution.sync``, heartbeats). That event is moved for if it is a
command that names a queue of another worker (:func:`queue_named`): ``queue.declare``,
``queue.delete``, ``queue.purge``, ``queue.query``, ``exchange.bind`` (its queue),
``message.subscribe``, or a ``message.transfer`` to the default exchange with that
queue's name as its routing key. Any other (an exchange's command, a transfer to another
exchange, a local queue, a name of ``amq.``, a resumed session, a session's detach)
leaves the connection where it is, unrecorded. A connection with several sessions is
decided at the first such command of any of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from anyio.abc import ByteStream

from ...amqp010 import (
    CLOSE_CODES,
    HEADER,
    CommandReceived,
    Connection,
    ConnectionOpened,
    LoginRequested,
    OpenRequested,
    SessionAttached,
    op,
)
from ...amqp010.framing import encode_op, split_frames
from ...io.streams import tls_identity
from ..config import BrokerConfig
from ..core import Broker
from ..frontend import HEADER_SIZE, ServeContext, ServedConnection, driver_for, header_then_frames
from ..guard import HeldOutput
from ..workers.handover import Handover, Mover, Watched
from .dtx import Branches
from .handler import Amqp010Handler

__all__ = [
    "WORKER_PROPERTY",
    "Amqp010FrontEnd",
    "decides_move",
    "frames",
    "login_mechanisms",
    "queue_named",
    "replay_failed",
    "replay_handler",
    "without_heartbeats",
]

WORKER_PROPERTY: Final = "amqp10:worker"
"""In ``connection.start``'s server properties (``workers`` > 1): the worker serving the
connection (as 0-9-1's and 1.0's)."""

log = logging.getLogger("amqp10.broker")

_BEFORE: Final = frozenset({LoginRequested, OpenRequested, ConnectionOpened, SessionAttached})
"""The events of a connection's handshake and sessions that a replay reproduces (a
session's attach unless it resumed a kept one: those are this worker's)."""
_NAMES_QUEUE: Final = frozenset(
    {"queue.declare", "queue.delete", "queue.purge", "queue.query", "exchange.bind", "message.subscribe"}
)


def _heartbeat() -> bytes:
    out = bytearray()
    encode_op(out, 0, op("connection.heartbeat"), 0xFFFF)
    return bytes(out)


_HEARTBEAT: Final = _heartbeat()
"""The frame of a heartbeat this side sends (its engine's tick, once tuned)."""


def decides_move(e: Any) -> bool:
    """Whether a movable connection's move is decided at event ``e``: its first that is
    not part of the handshake or a session's fresh attach (every command is: the engine
    answers the session controls and ``execution.sync`` itself, with no event)."""
    t = type(e)
    if t is SessionAttached:
        return bool(e.resumed)
    return t not in _BEFORE


def queue_named(e: Any) -> str | None:
    """The queue a deciding event names (None: none, or one of the ``amq.`` names, the
    broker's own)."""
    if type(e) is not CommandReceived:
        return None
    c = e.command
    if c.name in _NAMES_QUEUE:
        name: str = c.get("queue", "")
    elif c.name == "message.transfer" and not c.get("destination", ""):
        dp = c.header("delivery-properties")
        name = "" if dp is None else dp.get("routing_key", "")
    else:
        return None
    return name if name and not name.startswith("amq.") else None


frames: Final = partial(header_then_frames, split_frames)
"""A connection's input from its start as its replay feeds it: the protocol header, then
one frame at a time."""


def without_heartbeats(data: bytes) -> bytes:
    """What a connection's server wrote (the protocol header, then frames) without its
    heartbeats: the accepting worker's clock sent them, a replay does not (it compares
    the rest)."""
    if _HEARTBEAT not in data:
        return data
    return data[:HEADER_SIZE] + b"".join(f for f in split_frames(data[HEADER_SIZE:]) if f != _HEARTBEAT)


def replay_handler(handler: Amqp010Handler, resuming: Callable[[], None]) -> Callable[[list[Any]], None]:
    """``handler.handle`` for a replay (:meth:`.ServeContext.replayed`'s ``handle``): from the
    deciding event on (handled once the replay is taken: this worker serves the connection)
    ``resuming()`` first, so that a later ``session.attach`` may resume a session kept here."""

    def handle(events: list[Any]) -> None:
        if events and decides_move(events[0]):
            resuming()
        handler.handle(events)

    return handle


def replay_failed(handler: Amqp010Handler, why: str) -> None:
    """Close a connection moved here whose replay raised once it was taken
    (:func:`~.workers.handover.replay`'s ``fail``): ``connection.close`` with
    ``connection-forced`` (0-10's close codes have no internal error), ``why`` its text."""
    handler.close(CLOSE_CODES["connection-forced"], why[:255])


def _owner(handover: Handover, handler: Amqp010Handler, e: Any) -> int | None:
    """The worker that owns the queue event ``e`` names, if another one."""
    name = queue_named(e)
    return None if name is None else handover.worker_for(handler.vhost.name, name)


def login_mechanisms(config: BrokerConfig, *, tls_identity: str | None) -> tuple[str, ...]:
    """The mechanisms ``connection.start`` offers: the ``[sasl]`` mechanisms apply to 0-10
    too (EXTERNAL only with a client certificate)."""
    sasl = config.sasl
    return (
        (("PLAIN",) if "PLAIN" in sasl.mechanisms else ())
        + (("ANONYMOUS",) if sasl.allow_anonymous else ())
        + (("EXTERNAL",) if tls_identity is not None and "EXTERNAL" in sasl.mechanisms else ())
    )


class Amqp010FrontEnd:
    """AMQP 0-10 (``AMQP\\x01\\x01\\x00\\x0a``)."""

    name = "AMQP 0-10"

    def accepts(self, header: bytes) -> bool:
        return header == HEADER

    def counter_offer(self, header: bytes) -> bytes | None:
        return None  # (0-9-1's front end answers the family's other versions)

    def prepare(self, broker: Broker, config: BrokerConfig) -> None:
        # the AMQ model is the core's own; the dtx branches prepared before a restart are
        # taken now (with several workers, another worker's client may name one first)
        Branches.of(broker)

    async def serve(self, stream: ByteStream, ctx: ServeContext) -> None:
        cfg = ctx.config
        peer = ctx.peer
        identity = tls_identity(stream)
        mechanisms = login_mechanisms(cfg, tls_identity=identity)
        if not mechanisms:
            await ctx.refuse(stream, "0-10", "no [sasl] mechanism it can use")
            return
        conn = Connection(
            mechanisms=mechanisms,
            server_properties={
                "product": "amqp10",
                "cluster_name": cfg.container_id,
                **({} if ctx.worker is None else {WORKER_PROPERTY: ctx.shown_worker}),
            },
            handshake_timeout=cfg.limits.handshake_timeout,
            max_session_timeout=int(cfg.link_recovery_seconds),
        )
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        recording = ctx.recording(stream, held)  # movable: recorded until its deciding command
        engine = held if recording is None else recording
        on_events = Watched()  # (the mover first while it watches, then the handler)
        with ctx.logging_in(held) as login:
            # the driver first (its events reach the handler a batch at a time), so the
            # handler's wake, called per message, is the driver's own method
            driver = driver_for(stream, engine, on_events, peer=peer)
            handler = Amqp010Handler(
                ctx.broker,
                conn,
                users=ctx.users if "PLAIN" in cfg.sasl.mechanisms else None,
                allow_anonymous=cfg.sasl.allow_anonymous,
                tls_identity=identity,
                tokens=ctx.tokens,
                wake=driver.flush_soon,
            )
            handler.refusal = ctx.refusal
            handler.login_hook = login
            on_events.handle = handler.handle
            if recording is not None and ctx.handover is not None:
                worker_of = partial(_owner, ctx.handover, handler)
                on_events.mover = Mover(ctx.handover, peer, recording, decides_move, worker_of, handler.handle, handler.moved_away)
            rest = b""
            if ctx.moved is not None:  # all the other worker read (a plain socket): served here if it answers the same
                with handler.attaching_fresh() as resuming:  # as they did there (a resumed one decides: not moved)
                    replayed = ctx.replayed(
                        held, replay_handler(handler, resuming), decides_move, handler.replay_refused, frames,
                        without_heartbeats, fail=partial(replay_failed, handler),
                    )
                if replayed is None:
                    return
                rest = replayed
            else:
                on_events(engine.receive_data(ctx.header))  # the header, read before the driver

            def force_close(reason: str | None) -> None:
                handler.close(
                    CLOSE_CODES["connection-forced"],
                    (reason or "broker forced connection closure")[:255],
                )

            log.debug("0-10 connection from %s", peer)
            served = ServedConnection(driver, handler, self.name, peer, force_close, tick=handler.tick)
            await ctx.run(served, mover=on_events.mover, rest=rest)
