"""Broker configuration: a TOML file validated with pydantic.

Everything a person writes is checked here, so a bad value stops the broker with
one line naming the field and the problem (see :func:`load_config`).
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "AddressRule",
    "BindingConfig",
    "BrokerConfig",
    "ConfigError",
    "ExchangeConfig",
    "Limits",
    "Listener",
    "QueuePolicy",
    "SaslConfig",
    "StoreConfig",
    "VhostConfig",
    "load_config",
]

NodeKind = Literal["queue", "topic", "stream"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Listener(_Model):
    """A socket the broker accepts connections on."""

    host: str = "127.0.0.1"
    port: int = Field(default=5672, ge=0, le=65535)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = Field(default=None, description="CA file for verifying client certificates")
    require_client_cert: bool = False

    @model_validator(mode="after")
    def _tls_pair(self) -> Listener:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.require_client_cert and self.tls_ca is None:
            raise ValueError("require_client_cert needs tls_ca")
        return self


class SaslConfig(_Model):
    """Which SASL mechanisms the broker offers, and where its users are."""

    mechanisms: list[str] = ["ANONYMOUS", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-1", "SCRAM-SHA-512"]
    users_file: Path | None = None
    allow_anonymous: bool = True

    @field_validator("mechanisms")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        known = {"ANONYMOUS", "PLAIN", "EXTERNAL", "SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        bad = [m for m in v if m.upper() not in known]
        if bad:
            raise ValueError(f"unknown mechanism(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
        return [m.upper() for m in v]


class QueuePolicy(_Model):
    """Limits and policies of a node (queue, topic subscription or stream)."""

    durable: bool = Field(default=False, description="store every message, not only header.durable ones (those always are)")
    max_length: int | None = Field(default=None, ge=1)
    max_bytes: int | None = Field(default=None, ge=1)
    overflow: Literal["block", "drop-oldest", "reject"] = "block"
    dead_letter_address: str | None = None
    delivery_limit: int | None = Field(default=None, ge=1)
    max_age_seconds: float | None = Field(default=None, gt=0, description="stream retention by age")
    retention_bytes: int | None = Field(default=None, ge=1, description="stream retention by size")
    deliver_after_commit: bool | None = Field(
        default=None,
        description="queues: hand a stored (durable) message to consumers only once its store commit is done, "
        "so no consumer acts on a message a crash then erases; None: on when durable is set",
    )
    duplicate_window: int = Field(default=0, ge=0, description="message-ids remembered for duplicate detection")


class AddressRule(_Model):
    """What kind of node an address pattern creates (fnmatch patterns: ``orders.*``)."""

    pattern: str
    kind: NodeKind = "queue"
    policy: QueuePolicy = QueuePolicy()

    def matches(self, address: str) -> bool:
        return fnmatch.fnmatchcase(address, self.pattern)


class ExchangeConfig(_Model):
    """An exchange declared at start (RabbitMQ's exchange properties)."""

    name: str = Field(description="the exchange's name (not starting with 'amq.', which is reserved)")
    type: Literal["direct", "fanout", "topic", "headers"] = Field(default="direct", description="how it routes")
    durable: bool = Field(default=True, description="kept in the store across restarts")
    auto_delete: bool = Field(default=False, description="deleted when its last binding is removed")
    internal: bool = Field(default=False, description="publishers cannot publish to it, only other exchanges")
    alternate_exchange: str | None = Field(
        default=None, description="where messages that match none of its bindings go"
    )
    arguments: dict[str, str | int | float | bool] = Field(default={}, description="extra arguments, as RabbitMQ's")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if not v or v.startswith("amq."):
            raise ValueError("exchange names must be non-empty and not start with 'amq.'")
        return v


class BindingConfig(_Model):
    """A binding declared at start: from an exchange to a queue or another exchange."""

    source: str = Field(description="the exchange messages come from ('amq.topic', or one declared here)")
    destination: str = Field(description="the queue (or exchange) they go to")
    destination_type: Literal["queue", "exchange"] = Field(default="queue", description="what destination names")
    routing_key: str = Field(default="", description="binding key (topic: '*' one word, '#' zero or more)")
    arguments: dict[str, str | int | float | bool | None] = Field(
        default={}, description="binding arguments (headers exchanges: the headers to match and x-match)"
    )


class VhostConfig(_Model):
    """A virtual host: an isolated name space of queues, exchanges and bindings."""

    name: str = Field(description="its name; 1.0 clients choose it with the open frame's hostname 'vhost:NAME'")
    hostnames: list[str] = Field(default=[], description="open-frame host names that also choose this virtual host")
    exchanges: list[ExchangeConfig] = Field(default=[], description="exchanges declared at start")
    queues: list[str] = Field(default=[], description="durable queues declared at start")
    bindings: list[BindingConfig] = Field(default=[], description="bindings declared at start")


class StoreConfig(_Model):
    """The embedded SQLite store."""

    path: Path = Path("data/amqp10.sqlite3")
    commit_interval_ms: float = Field(default=2.0, ge=0, description="how long a group commit waits for company")
    max_batch: int = Field(default=2048, ge=1)


class Limits(_Model):
    """Limits that protect the broker from clients."""

    max_connections: int = Field(default=1000, ge=1)
    max_sessions_per_connection: int = Field(default=64, ge=1, le=65536)
    max_links_per_session: int = Field(default=1024, ge=1)
    max_frame_size: int = Field(default=65536, ge=512)
    max_message_size: int = Field(default=16 * 1024 * 1024, ge=1)
    handshake_timeout: float = Field(default=10.0, gt=0)
    idle_timeout: float | None = Field(default=60.0, gt=0)
    memory_limit_bytes: int = Field(default=512 * 1024 * 1024, ge=1024)
    credit_window: int = Field(default=1000, ge=1, le=100_000)
    max_suspended_links: int = Field(
        default=10_000, ge=0, description="links kept for recovery at once (the oldest expire first)"
    )


class BrokerConfig(_Model):
    """The whole broker configuration."""

    container_id: str = "amqp10-broker"
    listeners: list[Listener] = [Listener()]
    sasl: SaslConfig = SaslConfig()
    auto_create: bool = True
    default_policy: QueuePolicy = QueuePolicy()
    addresses: list[AddressRule] = []
    queues: list[str] = Field(default=[], description="queues created at start")
    topics: list[str] = Field(default=[], description="topics created at start")
    vhosts: list[VhostConfig] = Field(
        default=[],
        description="virtual hosts besides the default '/' (list '/' to declare exchanges and bindings in it); "
        "the top-level queues and topics are in '/'",
    )
    store: StoreConfig = StoreConfig()
    limits: Limits = Limits()
    link_recovery_seconds: float = Field(
        default=60.0,
        ge=0,
        allow_inf_nan=False,
        description="how long a link lost with its connection (or detached without closing) "
        "keeps its unsettled deliveries for a resuming attach (Part 2 §2.6.13); 0: no recovery",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @model_validator(mode="after")
    def _unique_vhosts(self) -> BrokerConfig:
        names = [v.name for v in self.vhosts]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"virtual host(s) declared twice: {', '.join(sorted(dup))}")
        return self

    def rule_for(self, address: str) -> AddressRule | None:
        for rule in self.addresses:
            if rule.matches(address):
                return rule
        return None


class ConfigError(Exception):
    """A configuration problem, worded for a person (one line)."""


def _one_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {first['msg']}{more}"


def _merge(data: dict[str, object], overrides: dict[str, object]) -> None:
    """Apply ``overrides`` to ``data``; a table overrides only the keys it names
    (``--data-dir`` sets store.path and keeps the file's other [store] settings)."""
    for key, value in overrides.items():
        current = data.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value)
        else:
            data[key] = value


def load_config(path: Path | None = None, **overrides: object) -> BrokerConfig:
    """Read and validate a TOML config file (or the defaults), then apply ``overrides``."""
    data: dict[str, object] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    _merge(data, {k: v for k, v in overrides.items() if v is not None})
    try:
        return BrokerConfig.model_validate(data)
    except ValidationError as exc:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{_one_line(exc)}") from None
