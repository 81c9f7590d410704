"""The AMQP 0-9-1 front end (0-9 and 0-8 as dialects) as the service sees it: which
headers it takes, its login choices, and one connection served from its header to its end."""

from __future__ import annotations

import logging
from typing import Final

from anyio.abc import ByteStream

from ...amqp091 import CAPABILITIES, ReplyCode
from ...amqp091.dialects import AMQP_0_9_1, Dialect, dialect_for_header
from ...io.streams import tls_identity
from ..config import BrokerConfig
from ..core import Broker
from ..frontend import ServeContext, ServedConnection, driver_for
from ..guard import HeldOutput
from .connection import BrokerConnection
from .handler import Amqp091Handler

__all__ = ["WORKER_PROPERTY", "Amqp091FrontEnd", "login_mechanisms"]

WORKER_PROPERTY: Final = "amqp10:worker"
"""In ``connection.start``'s server properties (``workers`` > 1): the worker serving the
connection, as 1.0's open says it."""

log = logging.getLogger("amqp10.broker")


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
                **({} if ctx.worker is None else {WORKER_PROPERTY: ctx.worker}),
            },
        )
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        with ctx.logging_in(held, conn.extend_handshake) as login:
            # the driver first (its events reach the handler a batch at a time), so the
            # handler's wake, called per message, is the driver's own method; while paused
            # (publishing blocked) it still reads now and then: heartbeats
            driver = driver_for(stream, held, lambda events: handler.handle(events), peer=peer, pause_limit=5.0)
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
            handler.handle(conn.receive_data(ctx.header))  # the header, read before the driver

            def force_close(reason: str | None) -> None:
                text = reason or "broker forced connection closure"
                handler.close(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {text}"[:255])

            log.debug("0-9-1 (%s) connection from %s", dialect.name, peer)
            await ctx.run(ServedConnection(driver, handler, f"AMQP {dialect.name}", peer, force_close, tick=handler.tick))
