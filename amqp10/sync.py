"""The blocking API: ``amqp10.sync.connect(url)`` and ``amqp10.sync.serve(...)``.

The same client as :mod:`amqp10.client`, without ``await``; see
:mod:`amqp10.client.sync`, whose public names this module offers.
"""

from __future__ import annotations

from .client.sync import *  # noqa: F403
from .client.sync import __all__ as __all__
