"""Node address names that clients and the broker both rely on: one home for their spelling.

A partitioned stream at ``<address>`` keeps partition K at ``<address>/partition/K``
(K from 0); any client reads (or writes) one partition at its own address. The broker
(:mod:`amqp10.broker.core.partitioned`) creates the partitions by these names and the
Spark connector reads them by the same names. No imports: every layer may use it.
"""

from __future__ import annotations

import re

__all__ = ["PARTITION_SEPARATOR", "is_partition_address", "partition_address"]

PARTITION_SEPARATOR = "/partition/"
"""Between a partitioned stream's address and a partition's number: ``events/partition/0``."""

_PARTITION_NAME = re.compile(r".+/partition/\d+\Z", re.DOTALL)


def partition_address(address: str, k: int) -> str:
    """The address of partition ``k`` of the partitioned stream at ``address``."""
    return f"{address}{PARTITION_SEPARATOR}{k}"


def is_partition_address(address: str) -> bool:
    """Whether ``address`` names a partition (``<stream>/partition/<K>``): it is never partitioned itself."""
    return _PARTITION_NAME.fullmatch(address) is not None
