"""What goes into the handshake's methods: properties, credentials, tuning.

Pure functions of the connection's settings and the peer's methods; the
connection's state machine decides when they run.
"""

from __future__ import annotations

from typing import Any, Final

from .auth import amqplain_response, plain_response
from .dialects import Dialect
from .errors import ConnectionException
from .methods import (
    FRAME_MIN_SIZE,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ReplyCode,
)

__all__ = [
    "CAPABILITIES",
    "CLIENT_CAPABILITIES",
    "check_tune_ok",
    "client_start_ok",
    "client_tune_ok",
    "negotiate",
    "server_start",
]

CAPABILITIES: Final = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
"""The server capabilities table clients look for (RabbitMQ's names)."""
CLIENT_CAPABILITIES: Final = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
}
"""What the client role announces (pika's set)."""


def _properties(given: dict[str, Any] | None, capabilities: dict[str, bool]) -> dict[str, Any]:
    props = dict(given or {})
    props.setdefault("product", "amqp10")
    props.setdefault("platform", "Python")
    props.setdefault("capabilities", dict(capabilities))
    return props


def negotiate(ours: int, theirs: int) -> int:
    """0-9-1's limit negotiation: 0 means no limit, else the lower one wins."""
    if not ours or not theirs:
        return ours or theirs
    return min(ours, theirs)


def server_start(
    dialect: Dialect,
    server_properties: dict[str, Any] | None,
    mechanisms: tuple[str, ...],
    locales: tuple[str, ...],
) -> ConnectionStart:
    """The server's ``connection.start``: its version, properties with the capability table."""
    return ConnectionStart(
        version_major=dialect.version[0],
        version_minor=dialect.version[1],
        server_properties=_properties(server_properties, CAPABILITIES),
        mechanisms=" ".join(mechanisms).encode(),
        locales=" ".join(locales).encode(),
    )


def client_start_ok(
    start: ConnectionStart,
    mechanism: str,
    username: str,
    password: str,
    client_properties: dict[str, Any] | None,
) -> ConnectionStartOk:
    """The client's answer to ``start``: its properties and the mechanism's response."""
    if mechanism == "AMQPLAIN":
        response = amqplain_response(username, password)
    elif mechanism == "PLAIN":
        response = plain_response(username, password)
    else:  # EXTERNAL: the identity is the TLS client certificate
        response = b""
    locale = (start.locales.decode(errors="replace").split() or ["en_US"])[0]
    return ConnectionStartOk(
        client_properties=_properties(client_properties, CLIENT_CAPABILITIES),
        mechanism=mechanism,
        response=response,
        locale=locale,
    )


def client_tune_ok(
    tune: ConnectionTune, channel_max: int, frame_max: int, heartbeat: int | None
) -> ConnectionTuneOk:
    """The client's limits: the lower of each, the server's heartbeat unless we asked for one."""
    beat = tune.heartbeat if heartbeat is None else heartbeat
    if tune.heartbeat and beat:
        beat = min(beat, tune.heartbeat)
    return ConnectionTuneOk(
        channel_max=negotiate(channel_max, tune.channel_max),
        frame_max=negotiate(frame_max, tune.frame_max),
        heartbeat=beat,
    )


def check_tune_ok(
    tune_ok: ConnectionTuneOk, channel_max: int, frame_max: int
) -> tuple[int, int, int]:
    """Server: the client's limits, if within what we offered; else NOT_ALLOWED (RabbitMQ's texts)."""

    def refuse(text: str) -> ConnectionException:
        return ConnectionException(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - {text}", 10, 31)

    if channel_max and tune_ok.channel_max > channel_max:
        raise refuse(f"channel_max={tune_ok.channel_max} > {channel_max} max")
    if frame_max and tune_ok.frame_max > frame_max:
        raise refuse(f"frame_max={tune_ok.frame_max} > {frame_max} max size")
    if tune_ok.frame_max and tune_ok.frame_max < FRAME_MIN_SIZE:
        raise refuse(f"frame_max={tune_ok.frame_max} < {FRAME_MIN_SIZE} min size")
    return tune_ok.channel_max or channel_max, tune_ok.frame_max or frame_max, tune_ok.heartbeat
