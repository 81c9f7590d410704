"""Azure connection strings: ``Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=...``.

The form the Azure portal, the Service Bus and Event Hubs SDKs and their emulators
use: ``;``-separated ``Key=Value`` pairs (keys in any case). ``connect()`` takes one
in place of a URL; :func:`parse_connection_string` reads it into a
:class:`ConnectionString`, which says where to connect
(:meth:`ConnectionString.url`) and how to authorize (SAS tokens on ``$cbs``).

- ``Endpoint`` (required): ``sb://HOST[:PORT][/]``.
- ``SharedAccessKeyName`` and ``SharedAccessKey``: the key SAS tokens are signed
  with; or ``SharedAccessSignature``: a ready-made token (used as it is, until it
  expires).
- ``EntityPath``: the queue, topic or event hub the string is for (optional).
- ``UseDevelopmentEmulator=true``: the local emulator: plain AMQP (no TLS) on the
  endpoint's port (5672 unless given).

Anything else is an error naming the key, as is a missing or malformed field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..cbs import CbsError, parse_sas_token
from .url import AMQP_PORT, AMQPS_PORT, WSS_PORT

__all__ = ["WEBSOCKET_PATH", "ConnectionString", "is_connection_string", "parse_connection_string"]

WEBSOCKET_PATH = "/$servicebus/websocket"
"""The HTTP resource of Service Bus's and Event Hubs' AMQP-over-WebSocket endpoint."""

_KEYS = {
    "endpoint": "Endpoint",
    "sharedaccesskeyname": "SharedAccessKeyName",
    "sharedaccesskey": "SharedAccessKey",
    "sharedaccesssignature": "SharedAccessSignature",
    "entitypath": "EntityPath",
    "usedevelopmentemulator": "UseDevelopmentEmulator",
}


@dataclass(frozen=True)
class ConnectionString:
    """A parsed Azure connection string."""

    host: str
    port: int | None = None
    key_name: str | None = None
    key: str | None = field(default=None, repr=False)
    signature: str | None = field(default=None, repr=False)
    """A ready-made SAS token (``SharedAccessSignature=``)."""
    entity_path: str | None = None
    emulator: bool = False

    @property
    def resource(self) -> str:
        """The base of the token audiences: ``sb://HOST`` (with the port, if given)."""
        return f"sb://{self.host}" + (f":{self.port}" if self.port is not None else "")

    def url(self, *, websocket: bool = False) -> str:
        """Where to connect: ``amqps://HOST:5671``; ``wss://HOST:443/$servicebus/websocket``
        over WebSockets; ``amqp://HOST:PORT`` (5672 by default) for the emulator."""
        if self.emulator:
            if websocket:
                raise ValueError("the emulator takes plain AMQP, not WebSockets")
            return f"amqp://{self.host}:{self.port or AMQP_PORT}"
        if websocket:
            return f"wss://{self.host}:{self.port or WSS_PORT}{WEBSOCKET_PATH}"
        return f"amqps://{self.host}:{self.port or AMQPS_PORT}"


def is_connection_string(text: str) -> bool:
    """Whether ``text`` is an Azure connection string rather than a URL."""
    return text.lstrip().lower().startswith("endpoint=")


def parse_connection_string(text: str) -> ConnectionString:
    """Read an Azure connection string; ``ValueError`` names the field that is wrong."""
    fields: dict[str, str] = {}
    for part in text.strip().split(";"):
        if not part.strip():
            continue
        given, sep, value = part.partition("=")
        name = _KEYS.get(given.strip().lower())
        if name is None:
            raise ValueError(
                f"Azure connection string: unknown field {given.strip()!r} (known: {', '.join(_KEYS.values())})"
            )
        if not sep or not value.strip():
            raise ValueError(f"Azure connection string: {name} has no value")
        if name in fields:
            raise ValueError(f"Azure connection string: {name} is given twice")
        fields[name] = value.strip()
    endpoint = fields.get("Endpoint")
    if endpoint is None:
        raise ValueError(
            "Azure connection string: Endpoint is missing (Endpoint=sb://NAMESPACE.servicebus.windows.net/)"
        )
    parts = urlsplit(endpoint)
    if parts.scheme.lower() != "sb":
        raise ValueError(
            f"Azure connection string: Endpoint must be an sb:// URL, not {endpoint!r}"
        )
    try:
        port = parts.port
    except ValueError:
        raise ValueError(
            f"Azure connection string: Endpoint has a bad port ({endpoint!r})"
        ) from None
    host = parts.hostname
    if not host:
        raise ValueError(f"Azure connection string: Endpoint has no host ({endpoint!r})")
    key_name, key = fields.get("SharedAccessKeyName"), fields.get("SharedAccessKey")
    signature = fields.get("SharedAccessSignature")
    if (key_name is None) != (key is None):
        missing = "SharedAccessKey" if key is None else "SharedAccessKeyName"
        raise ValueError(
            f"Azure connection string: {missing} is missing (a key needs both its name and its value)"
        )
    if signature is not None and key is not None:
        raise ValueError(
            "Azure connection string: SharedAccessSignature and SharedAccessKey exclude each other"
        )
    if signature is not None:
        try:
            parse_sas_token(signature)
        except CbsError as exc:
            raise ValueError(
                f"Azure connection string: SharedAccessSignature is not a SAS token: {exc}"
            ) from None
    if signature is None and key is None:
        raise ValueError(
            "Azure connection string: SharedAccessKeyName and SharedAccessKey (or SharedAccessSignature) are missing"
        )
    emulator_text = fields.get("UseDevelopmentEmulator", "false").lower()
    if emulator_text not in ("true", "false"):
        raise ValueError(
            f"Azure connection string: UseDevelopmentEmulator is true or false, not {emulator_text!r}"
        )
    entity = fields.get("EntityPath")
    return ConnectionString(
        host=host,
        port=port,
        key_name=key_name,
        key=key,
        signature=signature,
        entity_path=entity.strip("/") if entity else None,
        emulator=emulator_text == "true",
    )
