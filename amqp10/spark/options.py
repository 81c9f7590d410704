"""The ``amqp10`` data source's options, parsed once and checked with a message a person can act on.

Spark hands a data source its options as a case-insensitive ``str -> str`` map.
:class:`SourceOptions` is the parsed form: a frozen dataclass, so it pickles to
the executors unchanged. Nothing here opens a connection or builds an
``ssl.SSLContext`` (neither pickles): :meth:`SourceOptions.connect_kwargs` is
called in the process that connects.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict
from urllib.parse import quote

from ..client.url import parse_url

if TYPE_CHECKING:
    import ssl

__all__ = [
    "OPTIONS",
    "ConnectKwargs",
    "Ends",
    "Option",
    "OptionError",
    "SourceOptions",
    "StartSpec",
    "Starts",
]

Mode = Literal["stream", "queue"]
MapValues = Literal["string", "variant"]
StartSpec = str | int
"""``"first"``, ``"last"``, ``"next"`` or an offset."""
Starts = StartSpec | dict[int, StartSpec]
"""``startingOffsets``: one :data:`StartSpec` for every partition, or one per partition number."""
Ends = int | dict[int, int | None]
"""``endingOffsets``: one end offset for every partition, or one per partition (None: latest)."""

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ConnectKwargs(TypedDict, total=False):
    """The keyword arguments of :func:`amqp10.client.connect` that the data source sets."""

    timeout: float
    ssl: ssl.SSLContext
    max_buffered: int


class OptionError(ValueError):
    """An option of the ``amqp10`` data source is missing or malformed."""


@dataclass(frozen=True, slots=True)
class Option:
    """One option as a person writes it in ``.option(name, value)``, for the docs."""

    name: str
    default: str
    """The default, in words."""
    meaning: str
    aliases: tuple[str, ...] = ()
    """Other names accepted for it."""


OPTIONS: tuple[Option, ...] = (
    Option(
        "url",
        "`amqp://127.0.0.1`",
        "the broker, `amqp[s]://[user:pass@]host[:port]`; `amqps://` for TLS",
    ),
    Option(
        "address",
        "(required)",
        "the node to read or write (or `load(address)` / `save(address)`)",
        ("path",),
    ),
    Option("user", "none", "SASL user name (instead of putting it in the url)", ("username",)),
    Option("password", "none", "SASL password (instead of putting it in the url)"),
    Option(
        "mode",
        "ask the broker",
        "`stream` or `queue`. Reads send a `stream-info` request to `$management` "
        "and fall back to `queue`; `stream` on a write (or a read of a new address) asks the broker to "
        "create a stream",
    ),
    Option(
        "startingOffsets",
        "`earliest` (batch), `latest` (streaming)",
        "streams: where to start. `earliest` (= `first`), `latest` (= `next`: only new messages), "
        "`last` (the newest message), an offset (a stream of one partition), or Kafka's JSON "
        'form, an offset per partition, `{"<address>":{"0":N,"1":M}}` (-2 earliest, -1 latest; '
        "a partition left out starts at the default)",
        ("startingOffset",),
    ),
    Option(
        "startingTimestamp",
        "none",
        "streams: start at the first message the broker stored at or after this time "
        "(milliseconds since the epoch); wins over `startingOffsets`",
    ),
    Option(
        "endingOffsets",
        "`latest`",
        "batch reads of streams: exclusive end, `latest` (the end when the query is planned), an "
        'offset (one partition), or per partition `{"<address>":{"0":N,"1":M}}` (-1 latest; '
        "a partition left out reads to its end)",
        ("endingOffset",),
    ),
    Option(
        "maxOffsetsPerTrigger",
        "no limit",
        "the streaming read limit per micro-batch "
        "(`trigger(availableNow=True)` still reads everything, in batches of this size)",
        ("maxMessagesPerBatch",),
    ),
    Option(
        "failOnDataLoss",
        "`true`",
        "streams: when retention removed offsets a query still needs, fail the batch (`true`) "
        "or skip them with a warning in the executor's log (`false`)",
    ),
    Option(
        "columns",
        "all of the schema's",
        "comma-separated columns to read, e.g. `offset,timestamp,body`; sections no chosen "
        "column needs are not decoded. A schema given with `.schema(...)` chooses the same way",
    ),
    Option(
        "legacySchema",
        "`false`",
        "`true`: the first version's schema (no `address`/`partition`/`timestamp`; "
        "`properties` a `map<string,string>` by spec name)",
    ),
    Option(
        "mapValues",
        "`string`",
        "the value type of the `application_properties` and `message_annotations` maps: `string` "
        "(values as text) or `variant` (values keep their type, as Spark's VARIANT)",
    ),
    Option(
        "exactlyOnce",
        "`false`",
        "reads: `true` promises exactly-once into an idempotent sink, which only a stream can "
        "give; reading a queue is then refused (queues are at least once)",
    ),
    Option(
        "messagesPerPartition",
        "10000",
        "a stream range (or a queue batch) is split into Spark partitions of this size",
    ),
    Option(
        "minPartitions",
        "one Spark partition per stream partition (and per `messagesPerPartition`)",
        "streams: split the offset ranges of a batch into at least this many Spark partitions, "
        "in proportion to their sizes",
    ),
    Option("timeout", "30", "seconds any single wait (connect, attach, receive, outcome) may take"),
    Option("ca", "the system's CAs", "TLS: CA file to verify the broker with"),
    Option("cert", "none", "TLS: client certificate file"),
    Option("key", "none", "TLS: the client certificate's key file"),
    Option("verify", "`true`", "TLS: `false` skips verifying the broker (tests only)"),
    Option(
        "stateDir",
        "a temp directory per url and address",
        "queue streaming: where the driver records "
        "taken-but-unacknowledged batches. Give each query on a queue its own (e.g. next to the checkpoint)",
    ),
    Option(
        "writeId",
        "a new UUID per `save()`",
        "batch writes: prefix of the message-ids; run a failed write "
        "again with the same `writeId` and the broker's duplicate detection stores each message once",
    ),
    Option(
        "durable", "`true`", "writes: `header.durable` unless a `durable` column says otherwise"
    ),
)
"""Every option :meth:`SourceOptions.parse` reads; it reads none that is not here."""

_BY_NAME = {o.name: o for o in OPTIONS}


def _get(opts: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` (or the first of its aliases that is set) in lower-cased ``opts``."""
    option = _BY_NAME[name]  # a KeyError here: an option missing from OPTIONS
    value = opts.get(name.lower())
    for alias in option.aliases:
        value = value or opts.get(alias.lower())
    return value


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise OptionError(f"option {name!r} must be true or false, not {value!r}")


def _positive_int(
    name: str, value: str | None, default: int | None, *, least: int = 1
) -> int | None:
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise OptionError(f"option {name!r} must be a whole number, not {value!r}") from None
    if n < least:
        rule = "positive" if least == 1 else f"at least {least}"
        raise OptionError(f"option {name!r} must be {rule}, not {n}")
    return n


def _positive_float(name: str, value: str | None, default: float) -> float:
    if value is None or value == "":
        return default
    try:
        x = float(value)
    except ValueError:
        raise OptionError(f"option {name!r} must be a number of seconds, not {value!r}") from None
    if x <= 0:
        raise OptionError(f"option {name!r} must be positive, not {value!r}")
    return x


def _mode(value: str | None) -> Mode | None:
    if value is None or value == "":
        return None
    v = value.strip().lower()
    if v == "stream":
        return "stream"
    if v == "queue":
        return "queue"
    raise OptionError(f"option 'mode' must be stream or queue, not {value!r}")


def _partition_offsets(name: str, value: str, address: str) -> dict[int, int]:
    """Kafka's JSON form ``{"<address>": {"0": N, "1": M}}``: offsets by partition number."""
    try:
        spec = json.loads(value)
    except ValueError:
        spec = None
    if not (
        isinstance(spec, dict) and len(spec) == 1 and isinstance(next(iter(spec.values())), dict)
    ):
        raise OptionError(
            f'option {name!r} must be {{"{address}": {{"0": N, ...}}}} in its JSON form, '
            f"not {value!r}"
        )
    ((node, partitions),) = spec.items()
    if node != address:
        raise OptionError(f"option {name!r} names {node!r}, but the address is {address!r}")
    out: dict[int, int] = {}
    for k, n in partitions.items():
        if (
            not (isinstance(k, str) and k.isdigit())
            or not isinstance(n, int)
            or isinstance(n, bool)
        ):
            raise OptionError(
                f'option {name!r}: partitions are numbers from "0", each with an integer '
                f"offset, not {k!r}: {n!r}"
            )
        out[int(k)] = n
    if not out:
        raise OptionError(f"option {name!r} names no partition: {value!r}")
    return out


def _start_of(n: int) -> StartSpec:
    """A start offset given as a number: -2 earliest, -1 latest (Kafka's JSON), else itself."""
    if n in (-2, -1):
        return "first" if n == -2 else "next"
    if n < 0:
        raise OptionError(f"option 'startingOffsets' must not be negative, not {n}")
    return n


def _start(value: str | None, address: str) -> Starts | None:
    if value is None or value == "":
        return None
    v = value.strip().lower()
    if v in ("first", "last", "next"):
        return v
    if v in ("earliest", "latest"):  # Kafka's words
        return "first" if v == "earliest" else "next"
    if v.startswith("{"):
        return {
            k: _start_of(n)
            for k, n in _partition_offsets("startingOffsets", value, address).items()
        }
    try:
        n = int(v)
    except ValueError:
        raise OptionError(
            "option 'startingOffsets' must be earliest, latest, first, last, next, an offset "
            f"or JSON, not {value!r}"
        ) from None
    if n < 0:
        raise OptionError(f"option 'startingOffsets' must not be negative, not {n}")
    return n


def _end_of(n: int) -> int | None:
    if n == -1:
        return None
    if n < 0:
        raise OptionError(f"option 'endingOffsets' must not be negative (or -1 in JSON), not {n}")
    return n


def _end(value: str | None, address: str) -> Ends | None:
    if value is None or value.strip().lower() in ("", "latest", "next"):
        return None
    v = value.strip()
    if v.startswith("{"):
        return {k: _end_of(n) for k, n in _partition_offsets("endingOffsets", v, address).items()}
    try:
        n = int(v)
    except ValueError:
        raise OptionError(
            f"option 'endingOffsets' must be latest, an offset or JSON, not {value!r}"
        ) from None
    if n < 0:
        raise OptionError(f"option 'endingOffsets' must not be negative (or -1 in JSON), not {n}")
    return n


def _columns(value: str | None) -> tuple[str, ...] | None:
    if value is None or not value.strip():
        return None
    names = tuple(c.strip() for c in value.split(",") if c.strip())
    if len(set(names)) != len(names):
        raise OptionError(f"option 'columns' names a column twice: {value!r}")
    return names


def _map_values(value: str | None) -> MapValues:
    v = (value or "string").strip().lower()
    if v == "string":
        return "string"
    if v == "variant":
        return "variant"
    raise OptionError(f"option 'mapValues' must be string or variant, not {value!r}")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The options of one ``spark.read``/``readStream``/``write`` on ``format("amqp10")``.

    See ``examples/README.md`` for the user-facing table.
    """

    url: str
    """The broker, ``amqp[s]://[user:pass@]host[:port]``; user/password options are folded in."""
    address: str
    mode: Mode | None = None
    """``stream`` or ``queue``; None: ask the broker (stream-info) and fall back to queue."""
    starting_offset: Starts | None = None
    """Where a stream read starts (per partition, from JSON); None: ``first`` for batch reads,
    ``next`` for streaming."""
    starting_timestamp: int | None = None
    """Start at the first message stored at or after this time (ms since the epoch)."""
    ending_offset: Ends | None = None
    """Exclusive end offset of a batch read of a stream (per partition, from JSON); None: the
    stream's end when planned."""
    max_messages_per_batch: int | None = None
    """The default read limit of a streaming query (``ReadMaxRows``); None: no limit."""
    fail_on_data_loss: bool = True
    """Offsets retention removed before they were read: fail (True) or skip and log."""
    columns: tuple[str, ...] | None = None
    """The columns to read; None: all of the schema's."""
    legacy_schema: bool = False
    """Read the first version's schema (``properties`` as a text map)."""
    map_values: MapValues = "string"
    """The value type of the annotation and application-property maps."""
    exactly_once: bool = False
    """Reads promise exactly-once: a queue (at least once) is refused."""
    messages_per_partition: int = 10_000
    min_partitions: int | None = None
    """Split the offset ranges into at least this many Spark partitions (Kafka's ``minPartitions``)."""
    timeout: float = 30.0
    """Seconds any single wait (connect, attach, receive, outcome) may take."""
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True
    state_dir: str | None = None
    """Queue streaming: where received-but-uncommitted batches are recorded (driver side)."""
    write_id: str | None = None
    """Batch writes: the message-id prefix (default: a fresh UUID per ``save()``)."""
    durable: bool = True
    """Writes: header.durable of published messages unless a ``durable`` column says otherwise."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's options (keys are case-insensitive)."""
        opts = {k.lower(): v for k, v in options.items()}
        address = _get(opts, "address")
        if not address:
            raise OptionError(
                'the amqp10 data source needs an address: .option("address", "orders")'
            )
        url = _get(opts, "url") or "amqp://127.0.0.1"
        try:
            u = parse_url(url)
        except ValueError as exc:
            raise OptionError(f"option 'url': {exc}") from None
        user = _get(opts, "user")
        password = _get(opts, "password")
        if user or password:
            if u.username and user and u.username != user:
                raise OptionError(
                    "the user is given twice (in the url and as an option), differently"
                )
            url = _with_credentials(
                url, user or u.username or "", password if password is not None else u.password
            )
        mode = _mode(_get(opts, "mode"))
        return cls(
            url=url,
            address=address,
            mode=mode,
            starting_offset=_start(_get(opts, "startingOffsets"), address),
            starting_timestamp=_positive_int(
                "startingTimestamp", _get(opts, "startingTimestamp"), None, least=0
            ),
            ending_offset=_end(_get(opts, "endingOffsets"), address),
            max_messages_per_batch=_positive_int(
                "maxOffsetsPerTrigger", _get(opts, "maxOffsetsPerTrigger"), None
            ),
            fail_on_data_loss=_bool("failOnDataLoss", _get(opts, "failOnDataLoss"), True),
            columns=_columns(_get(opts, "columns")),
            legacy_schema=_bool("legacySchema", _get(opts, "legacySchema"), False),
            map_values=_map_values(_get(opts, "mapValues")),
            exactly_once=_bool("exactlyOnce", _get(opts, "exactlyOnce"), False),
            messages_per_partition=_positive_int(
                "messagesPerPartition", _get(opts, "messagesPerPartition"), 10_000
            )
            or 10_000,
            min_partitions=_positive_int("minPartitions", _get(opts, "minPartitions"), None),
            timeout=_positive_float("timeout", _get(opts, "timeout"), 30.0),
            ca=_get(opts, "ca") or None,
            cert=_get(opts, "cert") or None,
            key=_get(opts, "key") or None,
            verify=_bool("verify", _get(opts, "verify"), True),
            state_dir=_get(opts, "stateDir") or None,
            write_id=_get(opts, "writeId") or None,
            durable=_bool("durable", _get(opts, "durable"), True),
        )

    @property
    def tls(self) -> bool:
        return self.url.lower().startswith("amqps://") or any((self.ca, self.cert, self.key))

    def connect_kwargs(self) -> ConnectKwargs:
        """Keyword arguments for :func:`amqp10.client.connect` (builds the TLS context)."""
        kwargs: ConnectKwargs = {"timeout": self.timeout}
        if self.tls:
            from ..io.tls import client_context

            kwargs["ssl"] = client_context(
                cafile=self.ca, certfile=self.cert, keyfile=self.key, verify=self.verify
            )
        return kwargs

    @property
    def safe_url(self) -> str:
        """The url without its password, for messages and file names."""
        return str(parse_url(self.url))

    def queue_state_dir(self) -> str:
        """The directory of queue-streaming state (``stateDir``, else one per url and address)."""
        if self.state_dir:
            return self.state_dir
        digest = hashlib.sha256(f"{self.safe_url}\0{self.address}".encode()).hexdigest()[:16]
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.address)[:40]
        return os.path.join(tempfile.gettempdir(), "amqp10-spark", f"{name}-{digest}")


def _with_credentials(url: str, user: str, password: str | None) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "amqp", url
    hostpart = rest.rpartition("@")[2]
    cred = quote(user, safe="")
    if password is not None:
        cred += ":" + quote(password, safe="")
    return f"{scheme}://{cred}@{hostpart}"
