"""The AMQP 0-10 front end: :class:`.frontend.Amqp010FrontEnd` (registered in
:mod:`amqp10.broker.frontends`) over the sans-IO engine :mod:`amqp10.amqp010`."""

from __future__ import annotations

from .frontend import Amqp010FrontEnd

__all__ = ["Amqp010FrontEnd"]
