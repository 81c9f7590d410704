"""Dialling a peer: the options a connection is made (and re-made) from.

:class:`ConnectOptions` holds what :func:`~amqp10.client.connect` was given
for one URL; :func:`dial` makes a fresh engine (behind SASL unless told not
to) and a connected byte stream from them, for the first connect and for each
reconnect attempt alike.
"""

from __future__ import annotations

import ssl as _ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anyio.abc import ByteStream

from .. import errors
from ..io.driver import EngineProtocol
from ..io.net import connect_stream, peer_name
from ..io.tls import client_context
from ..sasl import SaslClient, SaslConnection
from ..transport import Connection as Engine
from ..transport import Event
from ._common import DEFAULT_TIMEOUT
from .url import URL

__all__ = ["ConnectOptions", "ProtocolFactory", "client_protocol", "dial", "ssl_context"]


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """Everything needed to (re-)make a connection: what :func:`connect` was given."""

    url: URL
    container_id: str
    hostname: str | None = None
    idle_timeout: float | None = None
    ssl_context: _ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_frame_size: int = 65536
    channel_max: int = 65535
    properties: dict[Any, Any] | None = None
    max_buffered: int = 1000
    sasl: bool = True


def ssl_context(ssl: _ssl.SSLContext | bool | None, url: URL) -> _ssl.SSLContext | None:
    """The TLS context ``connect(ssl=...)`` asks for (``None``: as the URL's scheme says)."""
    if ssl is None:
        ssl = url.tls
    if ssl is True:
        return client_context()
    if ssl is False:
        if url.tls:
            raise ValueError(
                "amqps:// needs TLS: pass ssl=True or an ssl.SSLContext, not ssl=False"
            )
        return None
    if isinstance(ssl, _ssl.SSLContext):
        return ssl
    raise TypeError(f"ssl must be an ssl.SSLContext or a bool, not {type(ssl).__name__}")


ProtocolFactory = Callable[[Engine, ConnectOptions], EngineProtocol[Event]]


def client_protocol(engine: Engine, options: ConnectOptions) -> EngineProtocol[Event]:
    """The engine, behind a SASL client unless ``sasl=False``.

    ANONYMOUS without credentials; with a user name and password from the URL
    the strongest of SCRAM-SHA-512/256/1 and PLAIN the server offers (or the
    first of ``sasl_mechanisms`` it offers).
    """
    if not options.sasl:
        url = options.url
        if url.username is not None or options.sasl_mechanisms:
            raise ValueError("credentials and sasl_mechanisms need SASL (sasl=True)")
        return engine
    url = options.url
    try:
        client = SaslClient(
            username=url.username,
            password=url.password,
            mechanisms=options.sasl_mechanisms,
            hostname=options.hostname,
            handshake_timeout=options.timeout,
        )
    except ValueError as exc:  # e.g. an unknown mechanism named
        raise errors.AuthenticationError(
            f"cannot log in to {peer_name(url.host, url.port)}: {exc}"
        ) from None
    return SaslConnection(client, engine)


async def dial(
    options: ConnectOptions, factory: ProtocolFactory, limit: float
) -> tuple[Engine, EngineProtocol[Event], ByteStream]:
    """A new engine (behind its protocol layers) and a connected stream for ``options``."""
    u = options.url
    engine = Engine(
        options.container_id,
        hostname=options.hostname,
        max_frame_size=options.max_frame_size,
        channel_max=options.channel_max,
        idle_timeout=options.idle_timeout,
        properties=options.properties,
    )
    protocol = factory(engine, options)
    stream = await connect_stream(
        u.host,
        u.port,
        ssl_context=options.ssl_context,
        server_hostname=u.host,
        timeout=limit,
    )
    return engine, protocol, stream
