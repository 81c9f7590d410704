"""Connection URLs: ``amqp[s]://[user[:password]@]host[:port][/vhost]``.

AMQP over WebSockets (OASIS AMQP WebSocket Binding 1.0) uses
``ws[s]://[user[:password]@]host[:port][/path]``: the path is the HTTP
resource the WebSocket upgrade asks for (``/`` when absent), not a vhost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = ["AMQPS_PORT", "AMQP_PORT", "URL", "WSS_PORT", "WS_PORT", "parse_url"]

AMQP_PORT = 5672
AMQPS_PORT = 5671
WS_PORT = 80
WSS_PORT = 443

_DEFAULT_PORTS = {"amqp": AMQP_PORT, "amqps": AMQPS_PORT, "ws": WS_PORT, "wss": WSS_PORT}
_TLS_SCHEMES = frozenset({"amqps", "wss"})
_WEBSOCKET_SCHEMES = frozenset({"ws", "wss"})


@dataclass(frozen=True, slots=True)
class URL:
    """A parsed connection URL (credentials percent-decoded)."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    vhost: str | None = None
    """The path without its leading slash: sent as the open's ``hostname`` when given
    (``amqp[s]://`` only)."""
    path: str | None = None
    """The HTTP resource of a WebSocket URL (``ws[s]://``), as sent in the upgrade request."""

    @property
    def tls(self) -> bool:
        return self.scheme in _TLS_SCHEMES

    @property
    def websocket(self) -> bool:
        """True for ``ws://`` and ``wss://``: AMQP over a WebSocket."""
        return self.scheme in _WEBSOCKET_SCHEMES

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.username}@" if self.username else ""
        if self.websocket:
            path = self.path or "/"
        else:
            path = f"/{self.vhost}" if self.vhost else ""
        return f"{self.scheme}://{user}{host}:{self.port}{path}"


def parse_url(url: str) -> URL:
    """Parse ``amqp[s]://`` and ``ws[s]://`` URLs; a bare ``host[:port]`` means ``amqp://``."""
    if "://" not in url:
        url = "amqp://" + url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(
            f"unsupported URL scheme {parts.scheme!r} (use amqp://, amqps://, ws:// or wss://)"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in URL {url!r}: {exc}") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in URL {url!r}")
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    vhost = path = None
    if scheme in _WEBSOCKET_SCHEMES:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    elif len(parts.path) > 1:
        vhost = unquote(parts.path[1:])
    return URL(
        scheme=scheme,
        host=host,
        port=port,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        vhost=vhost,
        path=path,
    )
