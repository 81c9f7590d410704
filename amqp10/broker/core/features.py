"""Qpid's queue features on a core queue: priority levels, fair share, message groups keyed
by a header, last-value queues and sequence numbers.

A queue whose policy asks for none of them (:attr:`QueuePolicy.has_features`) has no
:class:`QueueFeatures` and pays nothing per message for them; one that does hands each
arriving message to :meth:`QueueFeatures.arriving` first. What each does, as the Qpid C++
broker and Qpid Broker-J do it (the arguments are in core/arguments.py):

- **priority levels** (``qpid.priorities`` N): priorities 0-9 spread over N levels centred
  on 4 and 5 (level = priority - (5 - ceil(N / 2)), within 0..N-1), so 10 levels keep
  every priority apart and 5 keep 0-2, 3, 4, 5 and 6-9; a ring queue (``qpid.policy_type``
  ring) that is full drops the oldest message of the lowest level first.
- **fair share** (``qpid.fairshare``, per level ``qpid.fairshare-N``): a level gives at
  most its limit of messages in a row before the levels below it get theirs; when every
  level with messages has had its share, a new round begins (0: no limit).
- **groups by header** (``qpid.group_header_key``): a message's group is that header's
  value, ``qpid.no_group`` for a message without it (those are one group too, as in Qpid);
  with ``qpid.shared_msg_group`` a group belongs to a consumer only while it holds one of
  the group's messages unsettled (core/groups.py).
- **last value** (``qpid.last_value_queue_key``): a message whose key header matches a
  queued (not acquired) message's replaces it: the old one leaves the queue, the new one
  joins at the back.
- **sequence numbers** (``qpid.queue_msg_sequence`` NAME): each message gets the header
  NAME with its enqueue number on this queue, from 1 (a 1.0 message as a message
  annotation, since a 1.0 bare message is not changed on its way).

A message paged out of memory (core/paging.py) is not replaced by a newer last value, and
fair share takes from the levels in memory, the usual take after them.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from .message import QueuedMessage
from .queue_policy import QueuePolicy

if TYPE_CHECKING:
    from .paging import Pager

__all__ = ["NO_GROUP", "QueueFeatures"]

NO_GROUP = "qpid.no_group"
"""The group of a message without the queue's group header (Qpid's default group)."""

_seq = attrgetter("seq")
_PRUNE_MIN = 1024


def _position(msg: QueuedMessage, levels: list[deque[QueuedMessage]]) -> int | None:
    """Where ``msg`` is in its level, if it is still queued there (not taken, expired,
    purged or paged out); else None."""
    if msg.priority >= len(levels):
        return None
    level = levels[msg.priority]
    i = bisect_left(level, msg.seq, key=_seq)
    return i if i < len(level) and level[i] is msg else None


class QueueFeatures:
    """Qpid's features of one queue (see the module's docstring); made from its policy."""

    __slots__ = ("_by_key", "_fair_used", "_offset", "_prune_at", "_sequence", "fairshare", "policy", "top")

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        levels = policy.priority_levels
        self._offset = 0 if levels is None else 5 - math.ceil(levels / 2)
        self.top: int | None = None if levels is None else levels - 1
        """The highest level (None: the queue's own priorities, unchanged)."""
        self.fairshare = policy.fairshare
        self._fair_used = [0] * len(self.fairshare)  # taken from each level this round
        # last value key -> the message last queued with it (which may have left the queue
        # since: such entries are pruned as the table grows, so it stays near the queue's size)
        self._by_key: dict[Any, QueuedMessage] = {}
        self._prune_at = _PRUNE_MIN
        self._sequence = 0

    @property
    def keys_known(self) -> int:
        """How many last-value keys it remembers (about the queue's depth, at most twice)."""
        return len(self._by_key)

    def carry_on(self, old: QueueFeatures) -> None:
        """Take over what ``old`` (the queue's features under its previous policy: a runtime
        policy changed) knew: the last values by key and the sequence number."""
        self._by_key = old._by_key
        self._sequence = old._sequence

    def arriving(self, msg: QueuedMessage, levels: list[deque[QueuedMessage]]) -> QueuedMessage | None:
        """``msg`` is being published to the queue whose priority ``levels`` are given: set its
        level, group and sequence header; return the message it replaces (a last-value
        queue's, taken out of ``levels`` here: the caller counts it out), or None."""
        policy = self.policy
        if self.top is not None:
            msg.priority = min(max(msg.priority - self._offset, 0), self.top)
        if policy.sequence_header is not None:
            self._sequence += 1
            msg.data = msg.with_header(policy.sequence_header, self._sequence)
            msg.size = len(msg.data)
            msg.forget_fields()
        if policy.group_key is not None:
            self.regroup(msg)
        key = policy.last_value_key
        if key is None:
            return None
        value = msg.headers.get(key)
        if value is None or isinstance(value, list | dict):  # (no key, or none a map can hold)
            return None
        by_key = self._by_key
        old = by_key.get(value)
        by_key[value] = msg
        if old is None:
            if len(by_key) > self._prune_at:
                self._prune(levels)
            return None
        i = _position(old, levels)
        if i is None:
            return None
        del levels[old.priority][i]
        return old

    def _prune(self, levels: list[deque[QueuedMessage]]) -> None:
        """Forget the keys whose message has left the queue (the newest, just added, stays)."""
        *older, newest = self._by_key.items()
        kept = {k: m for k, m in older if _position(m, levels) is not None}
        kept[newest[0]] = newest[1]
        self._by_key = kept
        self._prune_at = max(2 * len(kept), _PRUNE_MIN)

    def regroup(self, msg: QueuedMessage) -> None:
        """Set ``msg``'s group from the queue's group header (restored messages too)."""
        group = msg.headers.get(self.policy.group_key or "")
        msg.set_group(NO_GROUP if group is None else str(group))

    def restored(self, msg: QueuedMessage) -> None:
        """``msg`` came back from the store: its group, its place as its key's last value, and
        its sequence number (the next is above it)."""
        if self.policy.group_key is not None:
            self.regroup(msg)
        if self.policy.sequence_header is not None:
            n = msg.headers.get(self.policy.sequence_header)
            if not isinstance(n, int) or isinstance(n, bool):
                n = msg.seq  # (a 1.0 message's is an annotation: its seq is never below it)
            self._sequence = max(self._sequence, n)
        key = self.policy.last_value_key
        if key is not None:
            value = msg.headers.get(key)
            if value is not None and not isinstance(value, list | dict):
                self._by_key[value] = msg

    def lowest_level(self, levels: list[deque[QueuedMessage]], pager: Pager | None) -> deque[QueuedMessage] | None:
        """The level a full ring queue drops from: with priority levels the lowest one with
        messages (Qpid drops the lowest priority first); else None (the oldest of all)."""
        if self.top is None:
            return None
        for level in levels:
            if level or (pager is not None and pager.refill(level)):
                return level
        return None

    def outranked(self, msg: QueuedMessage, levels: list[deque[QueuedMessage]]) -> bool:
        """Whether a full ring queue drops the arriving ``msg`` itself: with priority levels,
        when every queued message is of a higher level than its own."""
        if self.top is None:
            return False
        return not any(levels[p] for p in range(min(msg.priority + 1, len(levels))))

    def fair_levels(self, levels: list[deque[QueuedMessage]]) -> list[int]:
        """The levels to take from, in order, under fair share: from the highest, those that
        have not had their share this round; if none with messages is left, a new round."""
        used, limits = self._fair_used, self.fairshare
        order = [
            p
            for p in range(len(levels) - 1, -1, -1)
            if levels[p] and (p >= len(limits) or not limits[p] or used[p] < limits[p])
        ]
        if not order:
            for i in range(len(used)):
                used[i] = 0
            order = [p for p in range(len(levels) - 1, -1, -1) if levels[p]]
        return order

    def fair_taken(self, msg: QueuedMessage) -> None:
        """A message of ``msg``'s level was taken: count it against the level's share."""
        p = msg.priority
        if p < len(self._fair_used):
            self._fair_used[p] += 1
