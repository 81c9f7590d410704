"""The Azure Service Bus conventions on the AMQP 1.0 front end (``[servicebus]``).

Claims-based security (``$cbs``, :mod:`.cbs`; the tokens, :mod:`.tokens`), and
what ``azure-servicebus`` reads from deliveries (:mod:`.consumer`): enough that the
SDK talks to the broker unmodified through its emulator connection string. Queue
semantics stay the core's.
"""

from __future__ import annotations

from .cbs import CBS_ADDRESS, CbsNode, Gate, entity_path

__all__ = ["CBS_ADDRESS", "CbsNode", "Gate", "entity_path"]
