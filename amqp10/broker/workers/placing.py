"""Nodes placed on the worker of the connection that made them: the override table as metadata.

An exclusive queue belongs to one connection, so it is made on that connection's worker,
whatever the hash of its name says (:class:`~.ownership.Ownership`). Every other worker
must know where it is, so that a declaration, consume, get, purge or delete of it there is
put to its owner, which refuses it (RESOURCE_LOCKED 405 / ``amqp:resource-locked``), and
so that a publish to it reaches it. The table of these placements is metadata, changed
in the one order of :mod:`.metadata`:

- ``("place", name, worker)``: the core's ``VirtualHost.share("place", name)`` when it
  makes an exclusive queue; the worker adds its own number (:func:`placed_here`) and
  places it at once in its own table (its own change does not come back to it);
  Two workers placing one name (two connections declaring one exclusive queue at the
  same instant, each before it heard of the other's) are decided by the order: the
  parent refuses the later placement (:func:`check_placement`), and the worker that made
  it drops its queue, whose declaration is answered as locked (405 / resource-locked);
- ``("unplace", name)``: the queue was deleted (its connection closed, or a delete);
- ``("unplace-worker", worker)``: sequenced by the parent when a worker's control link
  goes (it died or stopped): its connections, and so its exclusive queues, are gone.

A binding to such a queue is metadata too (``bind``): every other worker, which has no
record of the queue, binds its stand-in while it is placed (:func:`bind_placed`), so a
message published there reaches it; when it is unplaced, those bindings go
(:func:`unbind_unplaced`), as a deleted queue's bindings do on its own worker.

A worker that starts gets the whole table from the parent first (``placed``), then the
changes it missed: placements are kept by nobody's store (an exclusive queue is never
durable), so a worker's applied number says nothing about them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import Binding, ResourceLocked
from .ownership import Ownership

if TYPE_CHECKING:
    from ..core import Broker

__all__ = [
    "PLACE",
    "PLACEMENT_OPS",
    "UNPLACE",
    "UNPLACE_WORKER",
    "PlacementTaken",
    "apply_placement",
    "check_placement",
    "placed_here",
    "bind_placed",
    "unbind_unplaced",
]

PLACE = "place"
UNPLACE = "unplace"
UNPLACE_WORKER = "unplace-worker"
PLACEMENT_OPS = frozenset((PLACE, UNPLACE, UNPLACE_WORKER))
"""The metadata changes that are the override table's (:func:`apply_placement`)."""


def placed_here(change: tuple[Any, ...], me: int) -> tuple[Any, ...]:
    """The core's ``("place", name)``, as worker ``me`` sends it: with its number."""
    return (*change, me) if change[0] == PLACE and len(change) == 2 else change


class PlacementTaken(ResourceLocked):
    """A placement of a name that an earlier change of the order placed on another worker."""


def check_placement(ownership: Ownership, vhost: str, change: tuple[Any, ...]) -> None:
    """The parent's check of ``change`` against its table: raises :class:`PlacementTaken`
    for a ``place`` of a name already placed on another worker (the first placement stands)."""
    if change[0] != PLACE:
        return
    held = ownership.placed_on(vhost, str(change[1]))
    if held is not None and held != int(change[2]):
        raise PlacementTaken(f"queue {change[1]!r} in vhost {vhost!r} was placed on worker {held} first")


def apply_placement(ownership: Ownership, vhost: str, change: tuple[Any, ...]) -> bool:
    """Make ``change`` in ``ownership``'s table if it is a placement; whether it was one."""
    op = change[0]
    if op == PLACE:
        ownership.place(vhost, str(change[1]), int(change[2]))
    elif op == UNPLACE:
        ownership.unplace(vhost, str(change[1]))
    elif op == UNPLACE_WORKER:
        ownership.unplace_worker(int(change[1]))
    else:
        return False
    return True


def bind_placed(broker: Broker, ownership: Ownership, vhost: str, change: tuple[Any, ...]) -> bool:
    """If ``change`` binds a queue placed on another worker that this worker has no record
    of (an exclusive queue), bind its stand-in here; whether it did. (A bind of a queue no
    longer placed, replayed as a worker catches up, is left to ``apply_change``: no such
    queue.)"""
    if change[0] != "bind":
        return False
    source, destination, key, arguments, kind = change[1:]
    owner = ownership.placed_on(vhost, str(destination))
    host = broker.vhost(vhost) if vhost else broker.default
    if kind != "queue" or owner is None or owner == ownership.me or host is None or host.queue(destination) is not None:
        return False
    remote, x = host.elsewhere(destination), host.exchange(source)
    if remote is None or x is None:
        return False
    x.bind(Binding(x, remote, key, arguments))
    return True


def unbind_unplaced(broker: Broker, ownership: Ownership, vhost: str, change: tuple[Any, ...]) -> None:
    """Before ``change`` is made in ``ownership``'s table: if it unplaces queues another
    worker made, the bindings here to their stand-ins go."""
    op = change[0]
    if op == UNPLACE:
        gone = [(vhost, str(change[1]))]
    elif op == UNPLACE_WORKER:
        gone = [(str(v), str(name)) for v, name, owner in ownership.placed() if owner == int(change[1])]
    else:
        return
    for vhost_name, name in gone:
        host = broker.vhost(vhost_name) if vhost_name else broker.default
        if host is not None:
            host.unbind_elsewhere(name)
