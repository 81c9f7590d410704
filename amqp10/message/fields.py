"""Proton-style accessors of :class:`~amqp10.message.Message`: header and properties fields.

They read and write fields of the ``header`` and ``properties`` sections in Proton's
units (seconds for times, a plain ``int`` message-id becoming ulong).
"""

from __future__ import annotations

import datetime as _dt
import uuid as _uuid
from typing import Any, Final

from ..types import Header, Properties, symbol, timestamp, ubyte, ulong


def _message_id(value: Any) -> Any:
    """A message-id as it must travel: a plain ``int`` becomes ulong (as in Proton)."""
    if value is None or isinstance(value, (str, bytes, _uuid.UUID, ulong)):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return ulong(value)
    raise TypeError(
        f"a message-id is a str, bytes, uuid.UUID or unsigned int, not {type(value).__name__}"
    )


def _secs_to_ms(value: float | None) -> int | None:
    return None if value is None else round(value * 1000)


def _ms_to_secs(value: int | None) -> float | None:
    return None if value is None else float(value) / 1000.0


def _timestamp_secs(value: float | _dt.datetime | None) -> timestamp | None:
    if value is None:
        return None
    ts: timestamp = (
        timestamp.from_datetime(value)
        if isinstance(value, _dt.datetime)
        else timestamp(round(value * 1000))
    )
    return ts


class ProtonFields:
    """The Proton-style accessors, for a class with ``header`` and ``properties`` slots.

    Setting a field creates its section if it is absent; header fields read back as
    the spec's default when absent.
    """

    __slots__ = ()

    header: Header | None
    properties: Properties | None

    def _header(self) -> Any:
        h: Any = self.header
        if h is None:
            h = self.header = Header()  # type: ignore[misc]  # (the subclass's slot)
        return h

    def _props(self) -> Any:
        p: Any = self.properties
        if p is None:
            p = self.properties = Properties()  # type: ignore[misc]  # (the subclass's slot)
        return p

    @property
    def durable(self) -> bool:
        """header.durable (false when absent)."""
        h: Any = self.header
        return bool(h is not None and h.durable)

    @durable.setter
    def durable(self, value: bool | None) -> None:
        self._header().durable = None if value is None else bool(value)

    @property
    def priority(self) -> int:
        """header.priority (4 when absent)."""
        h: Any = self.header
        return 4 if h is None or h.priority is None else int(h.priority)

    @priority.setter
    def priority(self, value: int | None) -> None:
        self._header().priority = None if value is None else ubyte(value)

    @property
    def ttl(self) -> float | None:
        """header.ttl in seconds (Proton's unit; the header holds milliseconds)."""
        h: Any = self.header
        return None if h is None else _ms_to_secs(h.ttl)

    @ttl.setter
    def ttl(self, value: float | None) -> None:
        self._header().ttl = _secs_to_ms(value)

    @property
    def first_acquirer(self) -> bool:
        """header.first-acquirer (false when absent)."""
        h: Any = self.header
        return bool(h is not None and h.first_acquirer)

    @first_acquirer.setter
    def first_acquirer(self, value: bool | None) -> None:
        self._header().first_acquirer = None if value is None else bool(value)

    @property
    def delivery_count(self) -> int:
        """header.delivery-count (0 when absent)."""
        h: Any = self.header
        return 0 if h is None or h.delivery_count is None else int(h.delivery_count)

    @delivery_count.setter
    def delivery_count(self, value: int | None) -> None:
        self._header().delivery_count = value

    @property
    def id(self) -> Any:
        """properties.message-id (str, bytes, uuid.UUID or ulong; a plain int becomes ulong)."""
        p: Any = self.properties
        return None if p is None else p.message_id

    @id.setter
    def id(self, value: Any) -> None:
        self._props().message_id = _message_id(value)

    @property
    def user_id(self) -> bytes | None:
        """properties.user-id."""
        p: Any = self.properties
        return None if p is None else p.user_id

    @user_id.setter
    def user_id(self, value: bytes | None) -> None:
        self._props().user_id = value

    @property
    def to(self) -> str | None:
        """properties.to (Proton calls it ``address``)."""
        p: Any = self.properties
        return None if p is None else p.to

    @to.setter
    def to(self, value: str | None) -> None:
        self._props().to = value

    @property
    def address(self) -> str | None:
        """Proton's name of :attr:`to` (its own property: mypyc compiles no ``address = to``)."""
        return self.to

    @address.setter
    def address(self, value: str | None) -> None:
        self.to = value

    @property
    def subject(self) -> str | None:
        """properties.subject."""
        p: Any = self.properties
        return None if p is None else p.subject

    @subject.setter
    def subject(self, value: str | None) -> None:
        self._props().subject = value

    @property
    def reply_to(self) -> str | None:
        """properties.reply-to."""
        p: Any = self.properties
        return None if p is None else p.reply_to

    @reply_to.setter
    def reply_to(self, value: str | None) -> None:
        self._props().reply_to = value

    @property
    def correlation_id(self) -> Any:
        """properties.correlation-id (same types as ``id``)."""
        p: Any = self.properties
        return None if p is None else p.correlation_id

    @correlation_id.setter
    def correlation_id(self, value: Any) -> None:
        self._props().correlation_id = _message_id(value)

    @property
    def content_type(self) -> str | None:
        """properties.content-type (a symbol)."""
        p: Any = self.properties
        return None if p is None else p.content_type

    @content_type.setter
    def content_type(self, value: str | None) -> None:
        self._props().content_type = None if value is None else symbol(value)

    @property
    def content_encoding(self) -> str | None:
        """properties.content-encoding (a symbol)."""
        p: Any = self.properties
        return None if p is None else p.content_encoding

    @content_encoding.setter
    def content_encoding(self, value: str | None) -> None:
        self._props().content_encoding = None if value is None else symbol(value)

    @property
    def expiry_time(self) -> float | None:
        """properties.absolute-expiry-time in seconds since the epoch (Proton's unit)."""
        p: Any = self.properties
        return None if p is None else _ms_to_secs(p.absolute_expiry_time)

    @expiry_time.setter
    def expiry_time(self, value: float | _dt.datetime | None) -> None:
        self._props().absolute_expiry_time = _timestamp_secs(value)

    @property
    def creation_time(self) -> float | None:
        """properties.creation-time in seconds since the epoch (Proton's unit)."""
        p: Any = self.properties
        return None if p is None else _ms_to_secs(p.creation_time)

    @creation_time.setter
    def creation_time(self, value: float | _dt.datetime | None) -> None:
        self._props().creation_time = _timestamp_secs(value)

    @property
    def group_id(self) -> str | None:
        """properties.group-id."""
        p: Any = self.properties
        return None if p is None else p.group_id

    @group_id.setter
    def group_id(self, value: str | None) -> None:
        self._props().group_id = value

    @property
    def group_sequence(self) -> int | None:
        """properties.group-sequence."""
        p: Any = self.properties
        return None if p is None else p.group_sequence

    @group_sequence.setter
    def group_sequence(self, value: int | None) -> None:
        self._props().group_sequence = value

    @property
    def reply_to_group_id(self) -> str | None:
        """properties.reply-to-group-id."""
        p: Any = self.properties
        return None if p is None else p.reply_to_group_id

    @reply_to_group_id.setter
    def reply_to_group_id(self, value: str | None) -> None:
        self._props().reply_to_group_id = value


FIELDS: Final = frozenset(name for name in vars(ProtonFields) if not name.startswith("_"))
"""The accessors' names (and, in the compiled build, ``header`` and ``properties``), which
``Message()`` takes as keyword arguments."""
