"""Reading a queue without taking from it: browsers (1.0's ``copy`` distribution mode),
management's PEEK, Service Bus's peek, and other looks at what a queue holds.

A queue over its memory budget keeps part of each priority level paged out
(core/paging.py); every reader here sees that part too, in order, read back from the
store a chunk at a time and left where it is, so that a browser of a deep queue never
holds more than a chunk of it in memory.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .message import QueuedMessage
from .paging import MAX_RUN, Gap

if TYPE_CHECKING:
    from .queues import Queue

__all__ = ["browse", "dispatch_browsers", "has_after", "peek"]


def _seq(msg: QueuedMessage | Gap) -> int:
    return msg.seq


def _level_after(queue: Queue, p: int, after: int, chunk: int) -> Iterator[QueuedMessage | Gap]:
    """Level ``p``'s messages after seq ``after``, oldest first: its head, then what is paged
    out (each head is in seq order, and older than its paged-out part)."""
    level = queue._levels[p]
    start = bisect_right(level, after, key=_seq) if after else 0
    yield from itertools.islice(level, start, None)
    if queue.pager is not None:
        yield from queue.pager.paged(p, after=after, chunk=chunk)


def browse(queue: Queue, after: int = 0, *, chunk: int = MAX_RUN) -> Iterator[QueuedMessage]:
    """``queue``'s messages after seq ``after``, in arrival (seq) order across priority
    levels, left where they are; paged-out ones are read back ``chunk`` at a time as the
    caller reaches them. It stops short at a paged-out message whose row is not committed
    yet (the queue is dispatched again once it is), so that nothing after it is seen first."""
    levels = [_level_after(queue, p, after, chunk) for p in range(len(queue._levels))]
    for msg in heapq.merge(*levels, key=_seq):
        if isinstance(msg, Gap):
            return
        yield msg


def peek(queue: Queue, n: int, offset: int = 0) -> list[QueuedMessage]:
    """``n`` messages in delivery order (highest priority first, FIFO within a level) from
    position ``offset``, left where they are; the skipped ones are counted, not read."""
    out: list[QueuedMessage] = []
    pager = queue.pager
    for p in reversed(range(len(queue._levels))):
        if len(out) >= n:
            break
        level = queue._levels[p]
        if offset < len(level):
            out.extend(itertools.islice(level, offset, offset + n - len(out)))
            offset = 0
        else:
            offset -= len(level)
        if pager is None or len(out) >= n:
            continue
        paged = pager.paged_count(p)
        if offset >= paged:
            offset -= paged
            continue
        for msg in pager.paged(p, skip=offset, chunk=n - len(out)):
            if isinstance(msg, Gap):
                return out
            out.append(msg)
            if len(out) >= n:
                break
        offset = 0
    return out


def has_after(queue: Queue, seq: int) -> bool:
    """Whether ``queue`` holds a message newer than ``seq`` (a browser has more to see)."""
    if any(level and level[-1].seq > seq for level in queue._levels):
        return True
    return queue.pager is not None and queue.pager.last_paged() > seq


def dispatch_browsers(queue: Queue) -> None:
    """Give each browser with credit copies of the messages it has not seen yet, in seq
    order; one without a selector reads paged-out messages back only as far as its credit
    reaches."""
    seen = queue.browsers
    for c in queue.consumers:
        if not c.browse:
            continue
        credit = c.credit()
        if credit <= 0:
            continue
        selector: Callable[[QueuedMessage], bool] | None = getattr(c, "selector", None)
        for msg in browse(queue, seen.get(c.id, 0), chunk=MAX_RUN if selector is not None else credit):
            seen[c.id] = msg.seq
            if selector is None or selector(msg):
                c.deliver(queue, msg.copy())
                if c.credit() <= 0:
                    break
