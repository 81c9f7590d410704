"""The AMQP 0-9-1 front end (0-9 and 0-8 too): the engine's events as core operations.

:class:`Amqp091Handler` serves one connection; :mod:`.message` holds the
message container subclass and the 0-9-1 ↔ 1.0 conversions (registered with
the core on import). ``service.py`` picks this front end when a connection's
first 8 bytes are a 0-9-1, 0-9 or 0-8 protocol header.
"""

from __future__ import annotations

from .handler import Amqp091Handler, BasicConsumer, BrokerConnection
from .message import Amqp091Message

__all__ = ["Amqp091Handler", "Amqp091Message", "BasicConsumer", "BrokerConnection"]
