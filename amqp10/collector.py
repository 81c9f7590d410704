"""Pausing Python's cyclic garbage collector around work that makes many objects and no cycles."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (as it was, after; also on errors).

    For work that allocates many container objects, none of them in a cycle: as they
    pile up, the collections their allocation triggers pass over them again and
    again. Objects are still freed by their reference counts; the collector runs
    again when the block ends. Used by the broker's recovery at start
    (:meth:`~amqp10.broker.core.broker.Broker.recover`: ~40% of a restart) and by
    the Spark source while it decodes a chunk (a quarter of its decoding).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
