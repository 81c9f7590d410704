"""The AMQP 0-9-1 front end (0-9 and 0-8 too): the engine's events as core operations.

:class:`Amqp091Handler` (:mod:`.handler`) serves one connection: a router that
passes each channel method to the handler of its concern (:mod:`.exchange`,
:mod:`.queue`, :mod:`.basic`, :mod:`.publish`, :mod:`.confirm`, :mod:`.tx`),
each holding the connection's :class:`.context.Amqp091Context`. :mod:`.channel`
holds a channel's state and consumers; :mod:`.connection` the server-role
engine; :mod:`.message` the message container subclass and the 0-9-1 ↔ 1.0
conversions (registered with the core on import). ``service.py`` picks this
front end when a connection's first 8 bytes are a 0-9-1, 0-9 or 0-8 protocol
header.
"""

from __future__ import annotations

from .channel import BasicConsumer
from .connection import BrokerConnection
from .handler import Amqp091Handler
from .message import Amqp091Message

__all__ = ["Amqp091Handler", "Amqp091Message", "BasicConsumer", "BrokerConnection"]
