"""The message container: a message as it arrived, plus what routing needs, read once.

A :class:`QueuedMessage` keeps the message in the form its publisher's
protocol gave it (``data``: for AMQP 1.0 the encoded sections, untouched) and
the few fields queues need on every message (priority, durability, expiry,
size, message-id), which the front end reads as the message arrives.

The fields only some routing needs (the routing key / ``subject``, ``to``, the
headers a headers exchange matches) are read lazily, once, by the subclass of
the publisher's protocol (:meth:`QueuedMessage._read_routing`,
:meth:`QueuedMessage._read_headers`), so a message
published straight to a queue never pays for them.

A consumer speaking another protocol asks for :meth:`QueuedMessage.form`:
the conversion runs once per target protocol and is cached on the message.
Each protocol's front end registers its subclass with :func:`register_format`
(the store keeps the format's name with each message) and its conversions with
:func:`register_conversion`: the 0-9-1 front end adds its subclass (properties +
body) and the two conversions to and from 1.0. The format names live here
(:data:`AMQP1_FORMAT`, :data:`AMQP091_FORMAT`, :data:`AMQP010_FORMAT`), so a front end that converts to
another's form names it without importing that front end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal

from ..._mypyc import mypyc_attr
from ...message import LazyMessage, Message
from ...types import Header, Properties

__all__ = [
    "AMQP010_FORMAT",
    "AMQP091_FORMAT",
    "AMQP1_FORMAT",
    "DEFAULT_PRIORITY",
    "GROUP_HEADER",
    "FORMATS",
    "PRIORITY_LEVELS",
    "QueuedMessage",
    "UNASKED_PRIORITY_LEVELS",
    "Routing",
    "amqp1_body",
    "amqp1_with_body",
    "format_named",
    "made_as",
    "maker_named",
    "register_conversion",
    "register_format",
]

PRIORITY_LEVELS: Final = 32
"""The most priority levels a queue keeps apart (0-31: RabbitMQ's ``x-max-priority`` up to 31;
a higher one shares the top level)."""
UNASKED_PRIORITY_LEVELS: Final = 10
"""The levels of a queue declared without ``x-max-priority`` (0-9, the 1.0 spec's minimum)."""
DEFAULT_PRIORITY: Final = 4
GROUP_HEADER: Final = "JMSXGroupID"
"""The header (0-10's application header, 0-9-1's ``headers`` entry) that holds a message's
group, 1.0's ``properties.group-id``, as Qpid's and RabbitMQ's JMS clients name it: every
front end maps it (``docs/protocols.md``)."""

AMQP1_FORMAT: Final = "amqp1"
"""The format of AMQP 1.0 messages (``data``: the encoded sections)."""
AMQP091_FORMAT: Final = "amqp091"
"""The format of AMQP 0-9-1 messages (``data``: exchange, routing key, property bytes, body)."""
AMQP010_FORMAT: Final = "amqp010"
"""The format of AMQP 0-10 messages (``data``: the header segment's structs, then the body)."""

_EMPTY: Mapping[str, Any] = {}


class Routing:
    """The routing key and address of a message, read once from its native form
    (the headers a headers exchange matches are read apart: :attr:`QueuedMessage.headers`)."""

    __slots__ = ("subject", "to")

    def __init__(self, subject: str | None = None, to: str | None = None) -> None:
        self.subject = subject
        """The routing key: 1.0 ``properties.subject``; 0-9-1 basic.publish's routing key."""
        self.to = to
        """1.0 ``properties.to`` (an address, for a null-target publisher); None elsewhere."""


_NO_ROUTING = Routing()
_OWN_FIELDS = frozenset({"priority", "durable", "delivery_count"})
_READ_ONCE = ("_routing", "_headers", "_fields", "_published", "_origin", "_due", "_group")
"""The slots a message fills on first use (or as it arrives), carried over by ``copy``."""
_UNSET: Any = object()


@mypyc_attr(allow_interpreted_subclasses=True)
class QueuedMessage:
    """One message in the broker: its native form and what queues need to know.

    The base class is an opaque message with no routing fields (used for
    messages whose protocol is unknown); front ends subclass it.
    """

    __slots__ = (
        "_due",
        "_fields",
        "_forms",
        "_group",
        "_headers",
        "_number",
        "_origin",
        "_published",
        "_routing",
        "arrival",
        "data",
        "delivery_count",
        "durable",
        "excluded",
        "expiry",
        "message_id",
        "priority",
        "seq",
        "size",
    )
    # what forget_fields() deletes: in the compiled build (setup.py) only the attributes
    # named here may be deleted
    __deletable__ = ("_fields", "_forms", "_group", "_headers", "_routing")

    _routing: Routing
    _headers: Mapping[str, Any]
    _fields: Mapping[str, Any]
    _due: float | None
    _group: str | None
    _number: int
    _origin: object
    _forms: dict[str, Any]
    _published: tuple[str, str | None]

    format: ClassVar[str] = "opaque"
    """The name of the protocol form ``data`` is in (the key of :data:`FORMATS`)."""
    has_extra_routing_keys: ClassVar[bool] = False
    """Whether :meth:`extra_routing_keys` may find any (a subclass that overrides it says
    so): routing skips the call per message for a format that has none."""

    def __init__(
        self,
        data: bytes,
        *,
        priority: int = DEFAULT_PRIORITY,
        durable: bool = False,
        expiry: float | None = None,
        message_id: str | None = None,
        delivery_count: int = 0,
        arrival: float = 0.0,
        seq: int = 0,
    ) -> None:
        self.data = data
        self.size = len(data)
        self.priority = priority_level(priority)
        self.durable = durable
        self.expiry = expiry
        self.message_id = message_id
        self.delivery_count = delivery_count
        self.arrival = arrival
        self.seq = seq
        self.excluded: set[int] | None = None  # consumers it is undeliverable to
        # _routing and _forms stay unset until asked for: nothing per message up front

    @property
    def number(self) -> int:
        """Its sequence number for life: the ``seq`` it got when first published to its queue.
        The same as ``seq`` unless it was scheduled (a held message gets a new ``seq`` when it
        is due, :meth:`~amqp10.broker.core.queues.Queue.enqueue_due`, and keeps this one): what
        Service Bus reports as ``x-opt-sequence-number`` and looks messages up by."""
        try:
            return self._number
        except AttributeError:
            return self.seq

    def forget_fields(self) -> None:
        """Its ``data`` was rewritten: what was read from the old bytes is read again when asked."""
        # (the names of __deletable__, which only the compiled class may delete; mypyc takes
        # __deletable__ at build time and the compiled class has no such attribute to read)
        for name in ("_routing", "_headers", "_fields", "_forms", "_group"):
            if hasattr(self, name):
                delattr(self, name)

    def copy(self) -> QueuedMessage:
        """A fresh record of the same message (same class, same routing fields, no queue state)."""
        m = type(self)(
            self.data,
            priority=self.priority,
            durable=self.durable,
            expiry=self.expiry,
            message_id=self.message_id,
            delivery_count=self.delivery_count,
            arrival=self.arrival,
        )
        for name in _READ_ONCE:  # what was read once stays read
            v = getattr(self, name, _UNSET)
            if v is not _UNSET:
                setattr(m, name, v)
        return m

    # -- routing fields, read once ---------------------------------------------------------
    @property
    def routing(self) -> Routing:
        """The message's routing fields (read from ``data`` on first use)."""
        try:
            return self._routing
        except AttributeError:
            r = self._routing = self._read_routing()
            return r

    def _read_routing(self) -> Routing:
        """Read the routing fields from ``data`` (a subclass knows how)."""
        return _NO_ROUTING

    @property
    def headers(self) -> Mapping[str, Any]:
        """What a headers exchange matches (1.0 application-properties; 0-9-1 headers),
        read from ``data`` on first use."""
        try:
            return self._headers
        except AttributeError:
            h = self._headers = self._read_headers()
            return h

    def _read_headers(self) -> Mapping[str, Any]:
        """Read the headers from ``data`` (a subclass knows how)."""
        return _EMPTY

    @property
    def due(self) -> float | None:
        """When a scheduled message may be delivered (seconds since the epoch), read from
        ``data`` on first use (a delay counts from ``arrival``); None: not scheduled."""
        try:
            return self._due
        except AttributeError:
            d = self._due = self._read_due()
            return d

    def _read_due(self) -> float | None:
        """Read the due time from ``data`` (a subclass knows how)."""
        return None

    @property
    def group(self) -> str | None:
        """The message group it belongs to (1.0 ``properties.group-id``), read from ``data``
        on first use (or set by the front end as the message arrives); None: no group."""
        try:
            return self._group
        except AttributeError:
            g = self._group = self._read_group()
            return g

    def _read_group(self) -> str | None:
        """Read the group from ``data`` (a subclass knows how)."""
        return None

    def set_group(self, group: str | None) -> None:
        """Put it in ``group`` (a queue that keys groups by a header of its own:
        core/features.py), whatever its own group-id says."""
        self._group = group

    def with_header(self, name: str, value: Any) -> bytes:
        """``data`` with the application header ``name`` set to ``value`` (a subclass knows
        how; an opaque message: unchanged)."""
        return self.data

    def read_already(self, group: str | None, due: float | None) -> None:
        """Take ``group`` and ``due`` as read: another worker read them from the same ``data``
        (an internal link carries them with the message, broker/workers/link.py)."""
        self._group = group
        self._due = due

    def keep_number(self, number: int) -> None:
        """Keep ``number`` as its :attr:`number` (another worker's queue renumbered it when
        due: an internal link carries the number with the message)."""
        self._number = number

    def field(self, name: str) -> Any:
        """A header or properties field by its 1.0 name, underscored (``correlation_id``,
        ``creation_time``, ``durable``…), or None: what selectors read. The queue's own
        ``priority``, ``durable`` and ``delivery_count`` answer for the header; the rest is
        read from ``data`` once, on first use."""
        if name in _OWN_FIELDS:
            return getattr(self, name)
        try:
            fields = self._fields
        except AttributeError:
            fields = self._fields = self._read_fields()
        return fields.get(name)

    def _read_fields(self) -> Mapping[str, Any]:
        """Read the header and properties fields from ``data`` (a subclass knows how)."""
        return _EMPTY

    def extra_routing_keys(self) -> tuple[str, ...]:
        """Routing keys it is routed by beside its own (1.0: RabbitMQ's ``x-cc``
        annotation), read from ``data`` when an exchange routes it; () if none
        (read only where :attr:`has_extra_routing_keys`)."""
        return ()

    def partition_key(self) -> str | None:
        """What places the message on a partition of a partitioned stream (1.0: the
        ``x-opt-partition-key`` annotation), read from ``data``; None: none (round robin)."""
        return None

    def mark_origin(self, origin: object) -> None:
        """Remember the connection that published it (for no-local subscriptions)."""
        self._origin = origin

    @property
    def origin(self) -> object | None:
        """The connection that published it (None: not known, as after a restart)."""
        try:
            return self._origin
        except AttributeError:
            return None

    def mark_published(self, exchange: str, key: str | None) -> None:
        """Remember the exchange (and explicit routing key) it was published through."""
        self._published = (exchange, key)

    @property
    def published_to(self) -> tuple[str, str]:
        """(exchange, routing key) it was published with; ("", subject) if not through an exchange
        (or after a restart: this is not stored)."""
        try:
            exchange, key = self._published
        except AttributeError:
            exchange, key = "", None
        return exchange, key if key is not None else (self.routing.subject or "")

    # -- dead-lettering -----------------------------------------------------------------------
    def dead_lettered(self, death: Mapping[str, Any], now: float) -> QueuedMessage:
        """A new message to republish to a dead-letter exchange, its death history updated
        with ``death`` (queue, reason, exchange, routing-keys: RabbitMQ's x-death record;
        and where it is republished: dead-letter-exchange, and new-key, the dead-letter
        routing key, None: its own)."""
        m = self.copy()
        m.expiry = None  # an expired message must not expire again where it is kept
        m._due = None  # nor be held back again
        m.arrival = now  # (its new queue's TTL counts from now)
        return m

    # -- other protocols' forms -------------------------------------------------------------
    def form(self, fmt: str) -> Any:
        """The message in protocol ``fmt``'s form: ``data`` itself, or a cached conversion."""
        if fmt == self.format:
            return self.data
        try:
            forms = self._forms
        except AttributeError:
            forms = self._forms = {}
        if fmt not in forms:
            convert = _CONVERSIONS.get((self.format, fmt))
            if convert is None:
                raise LookupError(f"no conversion from {self.format} to {fmt}")
            forms[fmt] = convert(self)
        return forms[fmt]

    def with_stream_position(self, offset: int) -> bytes:
        """``data`` marked with its stream offset and arrival time (as the protocol shows them)."""
        return self.data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seq={self.seq}, size={self.size}, priority={self.priority}, dc={self.delivery_count})"


FORMATS: dict[str, type[QueuedMessage]] = {QueuedMessage.format: QueuedMessage}
"""Message classes by format name (what the store records with each message)."""

_CONVERSIONS: dict[tuple[str, str], Callable[[QueuedMessage], Any]] = {}


MAKERS: dict[str, Callable[[bytes], QueuedMessage]] = {QueuedMessage.format: QueuedMessage}
"""What makes a message of each format from its ``data`` alone (:func:`maker_named`)."""


def register_format(
    cls: type[QueuedMessage], make: Callable[[bytes], QueuedMessage] | None = None
) -> type[QueuedMessage]:
    """Make ``cls`` the message class of its ``format`` (a front end does this on import);
    ``make``: a compiled function of ``data`` that calls ``cls(data)``, for
    :func:`maker_named` (a call of a compiled function is cheaper than a call of a class
    known only when it runs: that builds and parses an arguments tuple); None: ``cls``
    itself (an interpreted front end's, 0-10's)."""
    FORMATS[cls.format] = cls
    MAKERS[cls.format] = cls if make is None else make
    return cls


def register_conversion(source: str, target: str, convert: Callable[[QueuedMessage], Any]) -> None:
    """Declare how a ``source``-format message becomes ``target``'s form (the 0-9-1 hook)."""
    _CONVERSIONS[(source, target)] = convert


def format_named(name: str) -> type[QueuedMessage]:
    """The message class of format ``name`` (its front end must have been imported)."""
    cls = FORMATS.get(name)
    if cls is None:
        raise LookupError(f"no front end has registered the message format {name!r}")
    return cls


def maker_named(name: str) -> Callable[[bytes], QueuedMessage]:
    """What makes a message of format ``name`` from its ``data`` (:func:`register_format`)."""
    make = MAKERS.get(name)
    if make is None:
        raise LookupError(f"no front end has registered the message format {name!r}")
    return make


def priority_level(priority: int) -> int:
    """``priority`` as one of the :data:`PRIORITY_LEVELS` a queue keeps (out of range: the
    nearest)."""
    return min(max(priority, 0), PRIORITY_LEVELS - 1)


def made_as(
    make: Callable[[bytes], QueuedMessage],
    data: bytes,
    priority: int,
    durable: bool,
    expiry: float | None,
    message_id: str | None,
    delivery_count: int,
    arrival: float,
    seq: int,
) -> QueuedMessage:
    """What its class's ``__init__`` makes with these fields, by ``make`` (what
    :func:`maker_named` gave for its format: the internal link's records,
    workers/link.py): made from ``data`` alone and its fields set after, for every message
    that crosses to another worker (a call with keywords builds and parses them)."""
    msg = make(data)
    msg.priority = priority_level(priority)
    msg.durable = durable
    msg.expiry = expiry
    msg.message_id = message_id
    msg.delivery_count = delivery_count
    msg.arrival = arrival
    msg.seq = seq
    return msg


def amqp1_body(message: LazyMessage) -> tuple[bytes, Literal["bytes", "text", "encoded"]]:
    """The body of a decoded 1.0 message as the one body of a 0-9-1 or 0-10 message, and
    what it is: ``"bytes"`` (its data sections joined, or a binary amqp-value), ``"text"``
    (a string amqp-value, as UTF-8) or ``"encoded"`` (anything else: the 1.0 encoding of
    its body sections). Each front end says what content type the last two get."""
    body, body_type = message.body, message.body_type
    if body_type == "data":
        return b"".join(bytes(b) for b in body), "bytes"
    if body_type == "value" and isinstance(body, str):
        return body.encode(), "text"
    if body_type == "value" and isinstance(body, bytes):
        return body, "bytes"
    span = message.span("body")
    return (message.raw[span[0] : span[1]] if span else b""), "encoded"


def amqp1_with_body(
    body: bytes,
    *,
    header: Header | None,
    properties: Properties | None,
    annotations: dict[Any, Any],
    application: dict[str, Any],
) -> bytes:
    """The 1.0 encoding of a 0-9-1 or 0-10 message: its body as the one data section,
    with the sections its properties mapped to (empty annotations and application
    properties left out)."""
    return Message(
        [body],
        body_type="data",
        header=header,
        message_annotations=annotations or None,
        properties=properties,
        application_properties=application or None,
    ).encode()
