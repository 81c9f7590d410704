"""The AMQP 1.0 message (Part 3 §3.2): sections, body kinds, and lazy decoding.

A message on the wire is a run of described sections in a fixed order::

    header? delivery-annotations? message-annotations? properties?
    application-properties? body footer?

where the body is one or more ``data`` sections, one or more ``amqp-sequence``
sections, or a single ``amqp-value`` section.

- :class:`Message` (:mod:`.model`, accessors in :mod:`.fields`) holds every section
  as plain Python values and encodes and decodes the whole message.
- :class:`LazyMessage` (:mod:`.lazy`) is for intermediaries (brokers): it keeps the
  received bytes and decodes a section only when asked.
- :mod:`.sections` holds what both share: section codes, the spec's order, and the
  order errors.
"""

from __future__ import annotations

from .lazy import KEEP, LazyMessage
from .model import Message
from .sections import BodyType

__all__ = ["KEEP", "BodyType", "LazyMessage", "Message"]
