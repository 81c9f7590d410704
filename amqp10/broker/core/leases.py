"""Leases: locks that run out unless renewed (Service Bus's peek-lock and session locks).

A :class:`Lease` is taken for a duration and calls its ``on_expire`` once that much time
passed without a :meth:`Leases.renew`. Every operation is O(1): the leases of one
duration are kept in one ordered dict, oldest expiry first, and since a lease taken or
renewed now expires after every lease of that duration taken or renewed before, a
new or renewed lease always goes to the end. The durations in use are few (one per
entity's lock duration), so the next deadline is the earliest of a few heads.

No timers here, as in :mod:`.scheduled`: the service calls :meth:`Leases.expire_due`
when :meth:`Leases.next_deadline` passes (``on_change`` says it may have moved
earlier), and the broker's once-a-second ``tick`` does too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

__all__ = ["Lease", "Leases"]


class Lease:
    """One lock: it expires at ``expires`` (epoch seconds) unless renewed or dropped first."""

    __slots__ = ("duration", "expires", "on_expire")

    def __init__(self, duration: float, expires: float, on_expire: Callable[[], None]) -> None:
        self.duration = duration
        self.expires = expires
        self.on_expire = on_expire


class Leases:
    """The broker's running leases, by duration."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self._rings: dict[float, OrderedDict[Lease, None]] = {}
        self.on_change: Callable[[], None] = lambda: None
        """Called when the next deadline may have moved earlier (the service re-arms its timer)."""

    def __len__(self) -> int:
        return sum(len(r) for r in self._rings.values())

    def take(self, duration: float, on_expire: Callable[[], None]) -> Lease:
        """A lease of ``duration`` seconds from now; ``on_expire`` runs if it runs out."""
        earliest = self.next_deadline()
        lease = Lease(duration, self.now() + duration, on_expire)
        ring = self._rings.get(duration)
        if ring is None:
            ring = self._rings[duration] = OrderedDict()
        ring[lease] = None
        if earliest is None or lease.expires < earliest:
            self.on_change()
        return lease

    def renew(self, lease: Lease) -> bool:
        """Extend ``lease`` by its duration from now; False if it expired or was dropped."""
        ring = self._rings.get(lease.duration)
        if ring is None or lease not in ring:
            return False
        lease.expires = self.now() + lease.duration
        ring.move_to_end(lease)
        return True

    def drop(self, lease: Lease) -> None:
        """Forget ``lease`` (its lock was released): it never expires."""
        ring = self._rings.get(lease.duration)
        if ring is not None:
            ring.pop(lease, None)

    def held(self, lease: Lease) -> bool:
        """Whether ``lease`` still runs (neither expired nor dropped)."""
        ring = self._rings.get(lease.duration)
        return ring is not None and lease in ring

    def next_deadline(self) -> float | None:
        """When the next lease runs out (None: none runs)."""
        heads = [next(iter(r)).expires for r in self._rings.values() if r]
        return min(heads) if heads else None

    def expire_due(self) -> int:
        """Run out every lease whose time has come (calling its ``on_expire``); return how many."""
        now = self.now()
        n = 0
        for ring in list(self._rings.values()):
            while ring:
                lease = next(iter(ring))
                if lease.expires > now:
                    break
                del ring[lease]
                n += 1
                lease.on_expire()
        return n
