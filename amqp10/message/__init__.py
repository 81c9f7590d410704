"""The AMQP 1.0 message (Part 3 §3.2); see :mod:`.model`."""

from __future__ import annotations

from .model import KEEP, BodyType, LazyMessage, Message

__all__ = ["KEEP", "BodyType", "LazyMessage", "Message"]
