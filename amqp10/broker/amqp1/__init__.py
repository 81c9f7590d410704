"""The AMQP 1.0 front end of the broker (see :mod:`amqp10.broker.amqp1.handler`)."""

from __future__ import annotations

from .consumers import LinkConsumer
from .handler import ConnectionHandler
from .management import MANAGEMENT_ADDRESS, ManagementNode
from .message import Amqp1Message, parse_transfer

__all__ = ["MANAGEMENT_ADDRESS", "Amqp1Message", "ConnectionHandler", "LinkConsumer", "ManagementNode", "parse_transfer"]
