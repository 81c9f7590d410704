"""The AMQP 0-10 front end as the service sees it: the header it takes, its login choices,
and one connection served from its header to its end."""

from __future__ import annotations

import logging
from typing import Final

from anyio.abc import ByteStream

from ...amqp010 import CLOSE_CODES, HEADER, Connection
from ...io.streams import tls_identity
from ..config import BrokerConfig
from ..core import Broker
from ..frontend import ServeContext, ServedConnection, driver_for
from ..guard import HeldOutput
from .dtx import Branches
from .handler import Amqp010Handler

__all__ = ["WORKER_PROPERTY", "Amqp010FrontEnd", "login_mechanisms"]

WORKER_PROPERTY: Final = "amqp10:worker"
"""In ``connection.start``'s server properties (``workers`` > 1): the worker serving the
connection (as 0-9-1's and 1.0's)."""

log = logging.getLogger("amqp10.broker")


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
                **({} if ctx.worker is None else {WORKER_PROPERTY: ctx.worker}),
            },
            handshake_timeout=cfg.limits.handshake_timeout,
            max_session_timeout=int(cfg.link_recovery_seconds),
        )
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        with ctx.logging_in(held) as login:
            # the driver first (its events reach the handler a batch at a time), so the
            # handler's wake, called per message, is the driver's own method
            driver = driver_for(stream, held, lambda events: handler.handle(events), peer=peer)
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
            handler.handle(conn.receive_data(ctx.header))  # the header, read before the driver

            def force_close(reason: str | None) -> None:
                handler.close(
                    CLOSE_CODES["connection-forced"],
                    (reason or "broker forced connection closure")[:255],
                )

            log.debug("0-10 connection from %s", peer)
            await ctx.run(ServedConnection(driver, handler, self.name, peer, force_close, tick=handler.tick))
