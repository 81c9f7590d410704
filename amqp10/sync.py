"""The blocking API: ``amqp10.sync.connect(url)`` and ``amqp10.sync.serve(...)``.

The same client as :mod:`amqp10.client`, without ``await``; see
:mod:`amqp10.client.sync` and :mod:`amqp10.client.syncserve`, whose public
names this module offers.
"""

from __future__ import annotations

from .client import sync as _sync
from .client import syncserve as _syncserve
from .client.sync import *  # noqa: F403
from .client.syncserve import *  # noqa: F403

__all__ = [*_sync.__all__, *_syncserve.__all__]
