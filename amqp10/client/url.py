"""Connection URLs: ``amqp[s]://[user[:password]@]host[:port][/vhost]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = ["AMQP_PORT", "AMQPS_PORT", "URL", "parse_url"]

AMQP_PORT = 5672
AMQPS_PORT = 5671


@dataclass(frozen=True, slots=True)
class URL:
    """A parsed connection URL (credentials percent-decoded)."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    vhost: str | None = None
    """The path without its leading slash: sent as the open's ``hostname`` when given."""

    @property
    def tls(self) -> bool:
        return self.scheme == "amqps"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.username}@" if self.username else ""
        path = f"/{self.vhost}" if self.vhost else ""
        return f"{self.scheme}://{user}{host}:{self.port}{path}"


def parse_url(url: str) -> URL:
    """Parse ``amqp://`` and ``amqps://`` URLs; a bare ``host[:port]`` means ``amqp://``."""
    if "://" not in url:
        url = "amqp://" + url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("amqp", "amqps"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} (use amqp:// or amqps://)")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in URL {url!r}: {exc}") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in URL {url!r}")
    if port is None:
        port = AMQPS_PORT if scheme == "amqps" else AMQP_PORT
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else None
    return URL(
        scheme=scheme,
        host=host,
        port=port,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        vhost=vhost,
    )
