"""Broker configuration: a TOML file validated with pydantic.

Everything a person writes is checked here, so a bad value stops the broker with
one line naming the field and the problem (see :func:`load_config`).
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from .config_model import StrictModel as _Model
from .config_oauth2 import OAuth2Config
from .config_servicebus import (
    ServiceBusConfig,
    ServiceBusQueue,
    ServiceBusRule,
    ServiceBusSubscription,
    ServiceBusTopic,
    SharedAccessKey,
)
from .core.arguments import ArgumentError, check_declared, is_known, policy_with_arguments
from .core.queue_policy import QueuePolicy

__all__ = [
    "VhostConfig",
    "QueueConfig",
    "ExchangeConfig",
    "BindingConfig",
    "AddressRule",
    "BrokerConfig",
    "ConfigError",
    "HttpConfig",
    "Limits",
    "ManagementConfig",
    "OAuth2Config",
    "Listener",
    "QueuePolicy",
    "SaslConfig",
    "ServiceBusConfig",
    "ServiceBusQueue",
    "ServiceBusRule",
    "ServiceBusSubscription",
    "ServiceBusTopic",
    "SharedAccessKey",
    "StoreConfig",
    "load_config",
    "one_line_error",
]

NodeKind = Literal["queue", "topic", "stream"]




class Listener(_Model):
    """A socket the broker accepts connections on."""

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(
        default=5672, ge=0, le=65535, description="port to listen on (0: any free port)"
    )
    tls_cert: Path | None = Field(
        default=None,
        description="server certificate (PEM); set with tls_key, it makes this a TLS listener",
    )
    tls_key: Path | None = Field(default=None, description="private key of tls_cert (PEM)")
    tls_ca: Path | None = Field(
        default=None, description="CA file for verifying client certificates"
    )
    require_client_cert: bool = Field(
        default=False, description="refuse TLS clients without a certificate that tls_ca verifies"
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> Listener:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.require_client_cert and self.tls_ca is None:
            raise ValueError("require_client_cert needs tls_ca")
        return self


# -- [http] (issue 18): the HTTP listener: AMQP over WebSockets, health endpoints -------------
DEFAULT_HTTP_PORT = 8672
"""Beside AMQP's 5672, and clear of RabbitMQ's management port (15672) on the same machine."""


class HttpConfig(_Model):
    """The HTTP listener: AMQP over WebSockets (``ws://HOST:PORT/$amqp``), health endpoints,
    Prometheus metrics and the web console."""

    enabled: bool = Field(
        default=True, description="serve HTTP (WebSockets, /healthz, /readyz, /metrics, the console)"
    )
    metrics: bool = Field(
        default=True,
        description="serve Prometheus metrics at /metrics (read from the broker's counters when "
        "scraped; false: no /metrics)",
    )
    console: bool = Field(
        default=True,
        description="serve the web console at /console (users of the users file with one of "
        "[management] admin_tags log in; without a users file, on a broker that allows "
        "anonymous connections, a browser on a loopback address gets in without a login)",
    )
    rabbitmq_api: bool = Field(
        default=True,
        description="serve RabbitMQ's HTTP API at /api/ (rabbitmqadmin, monitoring agents): "
        "basic authentication against the users file; without one, loopback clients only",
    )
    rabbitmq_api_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="also serve the console and RabbitMQ's HTTP API on this port of host "
        "(15672: where RabbitMQ's tools look; unset: only on port)",
    )
    rabbitmq_api_statistics_interval: float = Field(
        default=0.0,
        ge=0,
        description="seconds after its open that RabbitMQ's HTTP API first lists a connection (and "
        "closes it by name): RabbitMQ's collect_statistics_interval, whose collector makes its "
        "tools wait up to 5 s, what its clients' suites allow for; 0: at once",
    )
    console_session_minutes: float = Field(
        default=30.0,
        gt=0,
        description="minutes a console login lasts without being used",
    )
    host: str = Field(default="127.0.0.1", description="address the HTTP listener binds")
    port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description=f"port of the HTTP listener (unset: {DEFAULT_HTTP_PORT}, or any free port "
        "when every AMQP listener asks for port 0; 0: any free port)",
    )
    tls_cert: Path | None = Field(
        default=None,
        description="server certificate (PEM); set with tls_key, it serves https and wss",
    )
    tls_key: Path | None = Field(default=None, description="private key of tls_cert (PEM)")
    max_ws_message_size: int = Field(
        default=16 * 1024 * 1024,
        ge=65536,
        description="bytes one WebSocket message may carry; a bigger one closes that "
        "connection (close code 1009). At least 64 KiB: clients cut their bytes into "
        "messages of about one frame",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> HttpConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        return self


# -- end of [http] ----------------------------------------------------------------------------


class SaslConfig(_Model):
    """Which SASL mechanisms the broker offers, and where its users are."""

    mechanisms: list[str] = Field(
        default=["ANONYMOUS", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-1", "SCRAM-SHA-512"],
        description="mechanisms offered, in this order; PLAIN and SCRAM need users_file, "
        "EXTERNAL a verified TLS client certificate",
    )
    users_file: Path | None = Field(
        default=None,
        description="TOML file of users and their SCRAM credentials (`amqp10 users add`)",
    )
    allow_anonymous: bool = Field(
        default=True, description="offer ANONYMOUS; false: every connection must log in"
    )
    anonymous_user: str | None = Field(
        default=None,
        description="the users-file user whose tags and permissions anonymous connections get "
        "(default: full access to the virtual host '/', nothing else)",
    )

    @model_validator(mode="after")
    def _anonymous_user_needs_users(self) -> SaslConfig:
        if self.anonymous_user is not None and self.users_file is None:
            raise ValueError("anonymous_user needs users_file (the user is one of its users)")
        return self

    @field_validator("mechanisms")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        known = {"ANONYMOUS", "PLAIN", "EXTERNAL", "SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        bad = [m for m in v if m.upper() not in known]
        if bad:
            raise ValueError(
                f"unknown mechanism(s) {', '.join(bad)}; known: {', '.join(sorted(known))}"
            )
        return [m.upper() for m in v]


class AddressRule(_Model):
    """What kind of node an address pattern creates, with what policy (fnmatch patterns: ``orders.*``).

    ``arguments`` are RabbitMQ queue arguments (``x-max-length = 1000``): the same
    settings as ``policy`` under their RabbitMQ names, applied on top of it.
    """

    pattern: str = Field(description="fnmatch pattern of the addresses this rule covers")
    kind: NodeKind = Field(
        default="queue", description="the kind of node an auto-created address gets"
    )
    policy: QueuePolicy = Field(
        default=QueuePolicy(), description="policy of the nodes this rule covers"
    )
    arguments: dict[str, str | int | float | bool] = Field(
        default={},
        description="RabbitMQ queue arguments applied on top of policy (x-message-ttl, x-max-length, ...)",
    )

    @model_validator(mode="after")
    def _apply_arguments(self) -> AddressRule:
        if self.arguments:
            try:
                object.__setattr__(
                    self, "policy", policy_with_arguments(self.policy, self.arguments)
                )
            except ArgumentError as exc:
                raise ValueError(str(exc)) from None
        return self

    def matches(self, address: str) -> bool:
        return fnmatch.fnmatchcase(address, self.pattern)


class ExchangeConfig(_Model):
    """An exchange declared at start (RabbitMQ's exchange properties)."""

    name: str = Field(
        description="the exchange's name (not starting with 'amq.', which is reserved)"
    )
    type: Literal["direct", "fanout", "topic", "headers", "x-local-random"] = Field(
        default="direct", description="how it routes (x-local-random: one bound queue at random)"
    )
    durable: bool = Field(default=True, description="kept in the store across restarts")
    auto_delete: bool = Field(default=False, description="deleted when its last binding is removed")
    internal: bool = Field(
        default=False, description="publishers cannot publish to it, only other exchanges"
    )
    alternate_exchange: str | None = Field(
        default=None, description="where messages that match none of its bindings go"
    )
    arguments: dict[str, str | int | float | bool] = Field(
        default={}, description="extra arguments, as RabbitMQ's"
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if not v or v.startswith("amq."):
            raise ValueError("exchange names must be non-empty and not start with 'amq.'")
        return v


class BindingConfig(_Model):
    """A binding declared at start: from an exchange to a queue or another exchange."""

    source: str = Field(
        description="the exchange messages come from ('amq.topic', or one declared here)"
    )
    destination: str = Field(description="the queue (or exchange) they go to")
    destination_type: Literal["queue", "exchange"] = Field(
        default="queue", description="what destination names"
    )
    routing_key: str = Field(
        default="", description="binding key (topic: '*' one word, '#' zero or more)"
    )
    arguments: dict[str, str | int | float | bool | None] = Field(
        default={},
        description="binding arguments (headers exchanges: the headers to match and x-match)",
    )


class QueueConfig(_Model):
    """A queue declared at start, with RabbitMQ queue arguments."""

    name: str = Field(description="the queue's name")
    durable: bool = Field(
        default=True, description="kept (with its durable messages) across restarts"
    )
    arguments: dict[str, str | int | float | bool] = Field(
        default={},
        description="x-message-ttl, x-max-length, x-queue-type = 'stream', ... (RabbitMQ's names)",
    )

    @field_validator("arguments")
    @classmethod
    def _check_arguments(cls, v: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        # RabbitMQ's checks at declaration, here when the file is read (named by its field); a
        # declaration keeps an argument no table names, but one in a file under RabbitMQ's or
        # Qpid's prefix is a typo there (x-max-lenght), refused, as the address rules refuse it
        for name in v:
            if name.startswith(("x-", "qpid.")) and not is_known(name):
                raise ValueError(f"unknown queue argument {name!r}")
        try:
            check_declared(v)
        except ArgumentError as exc:
            raise ValueError(str(exc)) from None
        return v


class VhostConfig(_Model):
    """A virtual host: an isolated name space of queues, exchanges and bindings."""

    name: str = Field(
        description="its name; 1.0 clients choose it with the open frame's hostname 'vhost:NAME'"
    )
    hostnames: list[str] = Field(
        default=[], description="open-frame host names that also choose this virtual host"
    )
    exchanges: list[ExchangeConfig] = Field(default=[], description="exchanges declared at start")
    queues: list[str | QueueConfig] = Field(
        default=[],
        description="queues declared at start: a name (durable, no arguments) or a table",
    )
    bindings: list[BindingConfig] = Field(default=[], description="bindings declared at start")


class StoreConfig(_Model):
    """The durable store: an embedded SQLite file, or a PostgreSQL database that an active
    and a standby broker share (failover: the broker holding the database lock serves)."""

    backend: Literal["sqlite", "postgresql"] = Field(
        default="sqlite",
        description="sqlite: a local file (path); postgresql: a database (dsn) that two brokers may "
        "share, the one holding its lock active, the other waiting to take over",
    )
    path: Path = Field(default=Path("data/amqp10.sqlite3"), description="the SQLite database file")
    dsn: str | None = Field(
        default=None,
        description="postgresql: the libpq connection string ('host=H port=P dbname=D user=U' or a "
        "postgresql:// URI; a password is better kept in PGPASSFILE or ~/.pgpass); one broker pair per database",
    )
    lock_retry_seconds: float = Field(
        default=1.0, gt=0, allow_inf_nan=False, description="postgresql: how often a standby broker tries the lock"
    )
    lock_session_timeout_seconds: float = Field(
        default=10.0,
        ge=1,
        allow_inf_nan=False,
        description="postgresql: the database ends a lock session silent this long, so a standby takes "
        "over in bounded time from an active broker cut off from the database; the active broker "
        "checks its lock four times as often and stops serving when it is lost",
    )
    commit_interval_ms: float = Field(
        default=2.0, ge=0, description="how long a group commit waits for company"
    )
    max_batch: int = Field(
        default=2048, ge=1, description="operations that make a group commit at once"
    )

    @model_validator(mode="after")
    def _dsn_for_postgresql(self) -> StoreConfig:
        if self.backend != "postgresql":
            if self.dsn is not None:
                raise ValueError(f"dsn is for backend = 'postgresql' (backend is {self.backend!r})")
            return self
        if not self.dsn:
            raise ValueError("dsn is required when backend = 'postgresql'")
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise ValueError("backend = 'postgresql' needs psycopg: pip install 'amqp10[postgres]'") from None
        try:
            conninfo_to_dict(self.dsn)
        except Exception as exc:
            raise ValueError(f"dsn: {str(exc).strip()}") from None
        return self


class Limits(_Model):
    """Limits that protect the broker from clients."""

    max_connections: int = Field(
        default=1000, ge=1, description="connections at once; more are refused"
    )
    max_sessions_per_connection: int = Field(
        default=64, ge=1, le=65536, description="sessions per connection (sets channel-max)"
    )
    max_links_per_session: int = Field(default=1024, ge=1, description="links per session")
    max_frame_size: int = Field(
        default=65536, ge=512, description="max-frame-size the broker offers in open"
    )
    max_message_size: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="max-message-size of the broker's receiving links",
    )
    handshake_timeout: float = Field(
        default=10.0, gt=0, description="seconds for TLS, SASL and open before the broker hangs up"
    )
    idle_timeout: float | None = Field(
        default=60.0,
        gt=0,
        description="seconds without a frame from the peer after which a connection is closed",
    )
    memory_limit_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024,
        description="bytes of queued messages held in memory (not paged out) above which publishers "
        "get no credit",
    )
    queue_memory_budget_bytes: int | None = Field(
        default=8 * 1024 * 1024,
        ge=0,
        description="bytes each queue keeps in memory (message bodies, plus about 320 bytes a message); "
        "later messages are paged out, their bodies kept in the store only (non-durable ones in a "
        "table a restart discards), and read back in order as consumers reach them. "
        "0: every message paged out; None (from Python; in TOML, a very large number): none",
    )
    memory_high_watermark: float = Field(
        default=0.4,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="the memory alarm: the fraction of the machine's memory the broker process may use "
        "(resident size) before publishers are blocked (1.0: no credit; 0-9-1: connection.blocked) "
        "until it is back under",
    )
    memory_high_watermark_bytes: int | None = Field(
        default=None,
        ge=1,
        description="the memory alarm in bytes of resident size (overrides memory_high_watermark)",
    )
    disk_free_limit_bytes: int | None = Field(
        default=None,
        ge=0,
        description="the disk alarm: free bytes on the SQLite store's filesystem below which publishers "
        "are blocked until there is more. None: 1% of that filesystem, at least 50 MiB and at most "
        "1 GiB; 0: no disk alarm",
    )
    credit_window: int = Field(
        default=1000, ge=1, le=100_000, description="credit a publisher's link is kept topped up to"
    )
    max_suspended_links: int = Field(
        default=10_000,
        ge=0,
        description="links kept for recovery at once (the oldest expire first)",
    )


class SecurityConfig(_Model):
    """Login and connection hygiene (``[security]``): back-off for failed logins, limits per
    source address and per user. 0 turns a limit off."""

    login_delay_base: float = Field(
        default=0.1,
        ge=0,
        allow_inf_nan=False,
        description="seconds a failed login's answer is held back after the first failure "
        "from an address or for a user; doubles with each further failure",
    )
    login_delay_max: float = Field(
        default=5.0, ge=0, allow_inf_nan=False, description="the longest a login's answer is held back (seconds)"
    )
    login_failures_forget: float = Field(
        default=60.0,
        gt=0,
        allow_inf_nan=False,
        description="seconds without a failed login after which an address's or user's failures are forgotten",
    )
    max_connections_per_address: int = Field(
        default=0,
        ge=0,
        description="connections open at once from one source address (0: only limits.max_connections); "
        "more are refused with amqp:resource-limit-exceeded (0-9-1: 530 NOT_ALLOWED)",
    )
    max_connections_per_user: int = Field(
        default=0,
        ge=0,
        description="connections open at once per authenticated user (0: no limit); "
        "more are refused with amqp:resource-limit-exceeded (0-9-1: 530 NOT_ALLOWED)",
    )
    connection_rate_per_address: float = Field(
        default=100.0,
        ge=0,
        allow_inf_nan=False,
        description="new connections a second from one source address, on average (0: no limit); "
        "beyond it (and the burst) a connection is closed at once",
    )
    connection_burst_per_address: int = Field(
        default=500, ge=1, description="new connections from one address accepted in a burst above the rate"
    )
    refusal_log_interval: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="seconds between log lines about refusals and failed logins from one address "
        "(the next line counts what was left out)",
    )


class ManagementConfig(_Model):
    """Who may use the management operations (``$management``, ``amqp10 admin``, the web
    console), by the user tags of the users file (RabbitMQ's tags). A broker without a
    users file lets everyone do everything."""

    read_tags: list[str] = Field(
        default=["administrator", "management", "monitoring", "policymaker"],
        description="tags that may list and read entities (QUERY, READ, PEEK, GET-*), "
        "in the virtual hosts the user may use",
    )
    write_tags: list[str] = Field(
        default=["administrator", "management", "policymaker"],
        description="tags that may CREATE, UPDATE, DELETE and PURGE entities, each also subject "
        "to the user's configure (create, delete) or read (purge) permission on the resource",
    )
    monitor_tags: list[str] = Field(
        default=["administrator", "monitoring"],
        description="tags that see every user's connections and every virtual host "
        "(others see their own connections and the hosts they may use)",
    )
    admin_tags: list[str] = Field(
        default=["administrator"],
        description="tags that may close any connection and create virtual hosts "
        "(others may close only their own connections)",
    )
    policy_tags: list[str] = Field(
        default=["administrator", "policymaker"],
        description="tags that may create, update and delete runtime policies",
    )
    max_query_count: int = Field(
        default=1000, ge=1, description="the largest page a QUERY may ask for (a larger count is a 400)"
    )
    max_peek: int = Field(default=100, ge=1, description="the most messages one PEEK may return")


class BrokerConfig(_Model):
    """The whole broker configuration."""

    container_id: str = Field(
        default="amqp10-broker", description="the broker's container-id in open"
    )
    listeners: list[Listener] = Field(
        default=[Listener()], description="sockets to accept connections on"
    )
    sasl: SaslConfig = Field(default=SaslConfig(), description="authentication")
    oauth2: OAuth2Config = Field(
        default=OAuth2Config(), description="OAuth 2 tokens (JWT) as SASL PLAIN passwords, scopes as permissions"
    )
    auto_create: bool = Field(
        default=True, description="attaching to an unknown address creates a node (per addresses)"
    )
    default_policy: QueuePolicy = Field(
        default=QueuePolicy(), description="policy of nodes that no addresses rule matches"
    )
    addresses: list[AddressRule] = Field(
        default=[], description="rules by address pattern, first match wins"
    )
    queues: list[str] = Field(default=[], description="queues created at start")
    topics: list[str] = Field(default=[], description="topics created at start")
    vhosts: list[VhostConfig] = Field(
        default=[],
        description="virtual hosts besides the default '/' (list '/' to declare exchanges and bindings in it); "
        "the top-level queues and topics are in '/'",
    )
    store: StoreConfig = Field(default=StoreConfig(), description="the durable store")
    definitions_file: Path | None = Field(
        default=None,
        description="a definitions file (RabbitMQ's JSON, as `rabbitmqctl export_definitions` writes "
        "it; RabbitMQ's load_definitions) imported at every start, after recovery: vhosts, exchanges, "
        "queues, bindings and policies into the broker, users and permissions into sasl.users_file",
    )
    limits: Limits = Field(default=Limits(), description="limits that protect the broker")
    security: SecurityConfig = Field(
        default=SecurityConfig(), description="login back-off and connection limits per address and per user"
    )
    http: HttpConfig = Field(
        default=HttpConfig(),
        description="the HTTP listener (AMQP over WebSockets, health endpoints)",
    )
    servicebus: ServiceBusConfig = Field(
        default=ServiceBusConfig(),
        description="Azure Service Bus conventions ($cbs tokens, entities), for azure-servicebus clients",
    )
    management: ManagementConfig = Field(
        default=ManagementConfig(),
        description="who may use the management operations, by user tag; paging and peek limits",
    )
    link_recovery_seconds: float = Field(
        default=60.0,
        ge=0,
        allow_inf_nan=False,
        description="how long a link lost with its connection (or detached without closing) "
        "keeps its unsettled deliveries for a resuming attach (Part 2 §2.6.13); 0: no recovery",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="least severe log lines written to stderr"
    )
    workers: int | Literal["auto"] = Field(
        default=1,
        description="broker processes behind the same ports ('auto': one per core); 1: one process, "
        "no supervisor. More than 1: a store per worker (a SQLite file, or a schema of the PostgreSQL database)",
    )
    pin_workers: bool = Field(
        default=False,
        description="workers > 1: bind each worker process, every thread of it (its store's writes too), "
        "to one CPU (worker i to the i-th of the CPUs the broker may use, round again past the last: "
        "with more workers than CPUs some share one, logged), as RabbitMQ binds its schedulers: a worker "
        "keeps its core's caches and the kernel does not put two workers on one core while another is "
        "free; for a host that runs little but the broker",
    )
    worker_down_hold: float = Field(
        default=15.0,
        ge=0,
        allow_inf_nan=False,
        description="workers > 1: how long (seconds) a worker holds the messages for the nodes of "
        "another worker that went down (the parent restarts it in about a second), their publishers "
        "unanswered, before it refuses them (1.0 released, 0-9-1 basic.nack, 0-10 an execution "
        "exception); 0: refused at once",
    )
    worker_link_idle_timeout: float = Field(
        default=30.0,
        gt=0,
        allow_inf_nan=False,
        description="workers > 1: the idle timeout (seconds) of the internal links between workers: "
        "a worker that sends nothing for that long (stopped, hung; a live one sends empty frames "
        "every quarter of it) is taken as down, as a dead one is (its messages held for it, within "
        "worker_down_hold), until it answers again",
    )
    worker_down_hold_messages: int = Field(
        default=100_000,
        ge=0,
        description="workers > 1: the most messages a worker holds for another that is down; "
        "beyond it a publish that reaches that worker's nodes is refused at once",
    )
    worker_down_hold_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="workers > 1: the most bytes of messages a worker holds for another that is down; "
        "beyond it a publish that reaches that worker's nodes is refused at once",
    )

    move_connections: bool = Field(
        default=False,
        description="workers > 1: a plain-TCP AMQP 1.0 connection whose first link names a queue "
        "another worker owns, or an AMQP 0-9-1 (0-9, 0-8) connection whose first method past the handshake, "
        "channel.open, basic.qos, confirm.select and tx.select names one (queue.declare, queue.bind, "
        "queue.purge, queue.delete, basic.consume, basic.get, or basic.publish to the default exchange), "
        "or an AMQP 0-10 connection whose first command (of any session) names one (queue.declare, "
        "queue.delete, queue.purge, queue.query, exchange.bind, message.subscribe, or message.transfer "
        "to the default exchange) "
        "is moved to that worker (its socket handed over), so its messages do not cross between workers; "
        "false: every connection stays on the worker the kernel gave it",
    )
    publishers_apart: bool = Field(
        default=False,
        description="with move_connections: a plain-TCP AMQP 1.0 connection whose first link publishes "
        "to a queue, or an AMQP 0-9-1 (0-9, 0-8) one whose first publish or queue method after its "
        "declarations publishes to one (through the default exchange), is served by the worker after the "
        "queue's owner instead of the owner (moved there, away from the owner too), while one whose first "
        "link or method consumes from the queue still goes to the owner, so one busy queue's work is split "
        "over two workers: its publishes taken in and forwarded on one, the queue and its deliveries on "
        "the other. Each published message then crosses between workers once (more CPU a message than a "
        "local one, bench/RESULTS.md; a publishing connection's own later consumers cross too) for a "
        "second core on one queue; for many busy queues leave it off. 0-9-1: a declaration (named, not "
        "exclusive, not no-wait) no longer decides a move by itself; the connection's next queue method "
        "or publish does (a method that names no queue, or another exchange, keeps it where it was "
        "accepted)",
    )

    @field_validator("publishers_apart")
    @classmethod
    def _apart_needs_moves(cls, value: bool, info: ValidationInfo) -> bool:
        # (a field validator, so the error names the field; move_connections is declared first)
        if value and not info.data.get("move_connections"):
            raise ValueError("needs move_connections = true (it says where a moved connection goes)")
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: object) -> object:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        if isinstance(value, str) and value.isdigit() and int(value) >= 1:
            return int(value)
        raise ValueError(f"a number of processes (1 or more) or 'auto', not {value!r}")

    def worker_count(self) -> int:
        """How many broker processes ``workers`` asks for (``auto``: the cores this process may use)."""
        if self.workers != "auto":
            return self.workers
        if hasattr(os, "sched_getaffinity"):
            return max(len(os.sched_getaffinity(0)), 1)
        return os.cpu_count() or 1  # pragma: no cover - not Linux

    @property
    def http_port(self) -> int:
        """The port the HTTP listener asks for (``http.port``, or its default as documented)."""
        if self.http.port is not None:
            return self.http.port
        if self.listeners and all(lst.port == 0 for lst in self.listeners):
            return 0  # embedded or under test: no fixed port either
        return DEFAULT_HTTP_PORT

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


def one_line_error(exc: ValidationError) -> str:
    """A pydantic error as one line: the first problem's location and message."""
    errors = exc.errors()
    # a table where a name or a table may be (a queue): the table's problem, not "not a string"
    tables = [e for e in errors if not (e["type"] == "string_type" and e["loc"][-1:] == ("str",))]
    first = (tables or errors)[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {len(tables or errors) - 1} more)" if len(tables or errors) > 1 else ""
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
        raise ConfigError(f"{where}{one_line_error(exc)}") from None
