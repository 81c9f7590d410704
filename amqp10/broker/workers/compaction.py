"""Compaction of the metadata log (``metadata.sqlite3``): what of it a catch-up still needs.

The log (:class:`~.metadata.MetadataLog`) holds every change in order, and a worker
that starts asks for the changes after the last number it applied. Compacting the
changes up to the last one, S (the *snapshot*), keeps only:

- what stands now: a declaration (virtual host, exchange, queue, binding) at the number
  of the first declaration of what exists now (a later equivalent one changed nothing;
  the sequencer refuses one that differs); a policy, a virtual host's metadata and the
  users file at the number of their latest change (what they hold now);
  The placements of exclusive queues (``placing.py``) are replaced likewise; a 1.0
  topic (made on every worker) is a declaration;
- the latest delete of each thing (``drop-queue``, ``unbind``...; its *tombstone*), at its
  number, even where the thing was declared again after it: a worker that applied less
  than that deletes its copy as the whole log would have made it (with what it held:
  a queue's or an exchange's bindings, a virtual host's contents).

The changes kept are a sub-sequence of the log, so a worker that applied up to A and
takes those after A (the same protocol, the same :func:`~.metadata.apply_change`) ends
with the metadata the whole log would have given it, whether A is before S or after: a
change it skips (at or before A) it applied, and each change it gets sits after what it
depends on, as in the log. The changes after S are the log as it was.

Tombstones are one per thing ever deleted, not one per change; one that every worker
has applied (``applied_by_all``: the lowest of the workers' ``<K>.applied``) is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Row", "compacted"]

Row = tuple[int, str, tuple[Any, ...]]
"""A change of the log: its number, its virtual host, the change (``apply_change``'s)."""

Key = tuple[Any, ...]

_KINDS = {
    "vhost": "vhost",
    "drop-vhost": "vhost",
    "vhost-metadata": "vhost-metadata",
    "exchange": "exchange",
    "drop-exchange": "exchange",
    "queue": "queue",
    "drop-queue": "queue",
    "bind": "bind",
    "unbind": "bind",
    "policy": "policy",
    "drop-policy": "policy",
    "users": "users",
    "topic": "topic",
    "drop-topic": "topic",
    "place": "place",
    "unplace": "place",
    "unplace-worker": "place-worker",
}
_DECLARES = {"vhost", "exchange", "queue", "bind", "topic"}
"""Changes whose first declaration stands (an equivalent one again changes nothing)."""
_REPLACES = {"vhost-metadata", "policy", "users", "place"}
"""Changes whose latest one stands (it holds what is there now)."""


def _key(vhost: str, change: tuple[Any, ...]) -> Key:
    op, args = change[0], change[1:]
    kind = _KINDS.get(op)
    if kind is None:
        raise ValueError(f"unknown metadata change {op!r}")
    if kind in ("vhost", "vhost-metadata", "users"):
        return (kind, vhost)
    if kind == "place-worker":  # (every placement of that worker: ``compacted`` reads the rows)
        return (kind, "", args[0])
    if kind == "bind":
        source, destination, key, arguments, dest_kind = args
        return (kind, vhost, source, destination, key, _frozen(arguments), dest_kind)
    return (kind, vhost, args[0])


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _contained(key: Key, gone: Key) -> bool:
    """Whether deleting ``gone`` deletes ``key`` with it (a virtual host's contents; a
    queue's or an exchange's bindings)."""
    kind, vhost = gone[0], gone[1]
    if key[1] != vhost or key == gone:
        return False
    if kind == "vhost":
        return bool(key[0] != "place")  # (a placement outlives its virtual host: placing.py)
    if key[0] != "bind":
        return False
    name: str = gone[2]
    _, _, source, destination, _, _, dest_kind = key
    if kind == "queue":
        return bool(destination == name and dest_kind != "exchange")
    if kind == "exchange":
        return bool(source == name or (destination == name and dest_kind == "exchange"))
    return False


def compacted(rows: Iterable[Row], applied_by_all: int = 0) -> list[Row]:
    """``rows`` (a log's changes, in order, perhaps compacted before) compacted: what still
    stands and the latest delete of each thing, each at its number, in order. Deletes at or
    before ``applied_by_all`` (every worker applied them) are left out."""
    standing: dict[Key, Row] = {}
    deleted: dict[Key, Row] = {}
    for row in rows:
        _, vhost, change = row
        op = change[0]
        key = _key(vhost, change)
        if op in _REPLACES or (op in _DECLARES and key not in standing):
            standing[key] = row
        elif op == "unplace-worker":  # every placement of that worker goes with it
            for inner in [k for k, r in standing.items() if k[0] == "place" and r[2][2] == change[1]]:
                del standing[inner]
            deleted[key] = row
        elif op not in _DECLARES:  # a delete: of the thing and of what it holds
            for inner in [k for k in standing if k == key or _contained(k, key)]:
                del standing[inner]
            deleted[key] = row
    kept = [*standing.values(), *(r for r in deleted.values() if r[0] > applied_by_all)]
    return sorted(kept, key=lambda r: r[0])
