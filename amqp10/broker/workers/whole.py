"""Management of the whole broker at ``workers`` > 1: each request asks every worker and merges.

The worker that takes a management request (an HTTP API call, a ``$management`` QUERY,
a ``/metrics`` scrape) answers its own part first (so a refusal, the same on every worker,
comes at once), asks every other worker over the control links (:mod:`.control`) and
merges the answers:

- **queues and streams** from their owners only (each worker lists the nodes
  :class:`~.ownership.Ownership` gives it), by name, with their message counts;
- **connections and consumers** from every worker (each connection lives on one);
  closing one that lives on another worker asks the others until its owner closes it;
- **the overview's counts** summed;
- **/metrics**: each worker's exposition, merged (:func:`merge_expositions`): counters and
  gauges summed over the workers, a node's series from its owner, the alarm the largest,
  and each worker's own process series (``process_*``, ``python_*``: its memory, CPU,
  open files) kept apart under a ``worker`` label.

A change or a read of one node (``Management.on_owner``: the HTTP API's purge, get and
delete, the console's node, peek, purge and delete; a ``$management`` READ, PEEK, PURGE or
DELETE of a queue or stream; RabbitMQ 4's ``/management`` GET, purge and delete of a queue) is
made on the node's owner, which answers (or refuses) as one broker would, once its store
has it: the asked worker's own record of a queue is not the queue.

Everything else (exchanges, bindings, policies, hosts, users) is metadata, the same on every
worker, and is answered by the worker asked. With one worker there is no
:class:`WholeBroker`: management answers from its own broker, with no hop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from anyio.abc import TaskStatus
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from ..alarms import ResourceAlarms
from ..amqp1.rabbitmq_management import delete_queue, get_queue, purge_messages
from ..amqp1.servicebus.management import entity_request
from ..guard import ConnectionGuard
from ..management import (
    BadRequest,
    Caller,
    Management,
    ManagementError,
    NodeOp,
    NotFoundError,
    Request,
    Response,
    delete_node,
    peek_node,
    purge_node,
    read_node,
)
from ..rabbitmq_api import remove_queue, take_messages
from .control import ControlPoint
from .counters import SharedCounts
from .ownership import Ownership
from .remote import RemoteNodes

__all__ = ["NODE_TYPES", "WholeBroker", "merge_expositions"]

log = logging.getLogger("amqp10.broker.workers")

NODE_TYPES = frozenset({"queue", "stream"})
"""Entity types whose entities are nodes: each is listed by its owner."""
MERGED_TYPES = (*sorted(NODE_TYPES), "connection")
"""Entity types whose listings differ between workers (a QUERY merges these)."""
PER_WORKER_PREFIXES = ("process_", "python_")
"""Metric families of one worker's process: kept apart, under a ``worker`` label."""
LARGEST = frozenset({"amqp10_resource_alarm"})
"""Gauges merged as the largest of the workers' values rather than their sum."""

Entities = list[dict[str, Any]]
Metrics = Callable[[], Awaitable[bytes]]

NODE_OPS: dict[str, NodeOp] = {
    op.__name__: op
    for op in (
        read_node, purge_node, peek_node, delete_node, remove_queue, take_messages, get_queue, purge_messages, delete_queue,
        entity_request,
    )
}
"""The changes of one node another worker may ask its owner to make, by name (each name once)."""
OWNED_OPERATIONS = frozenset({"READ", "PURGE", "PEEK", "DELETE"})
"""``$management`` operations of a queue or stream made on its owner (a READ too: its counts
are the owner's; another worker's record of a shared queue holds none of its messages)."""


class WholeBroker:
    """One worker's management of the whole broker (``ownership.me`` of ``ownership.workers``)."""

    def __init__(self, management: Management, ownership: Ownership, directory: Path) -> None:
        self.management = management
        self.ownership = ownership
        self.point = ControlPoint(ownership.workers, ownership.me, directory, self.answer)
        self.directory = directory
        self.local_metrics: Metrics | None = None
        """This worker's ``/metrics`` text (:meth:`serve_metrics`; None: ``[http] metrics`` is off)."""
        self.counts: SharedCounts | None = None
        self.ops: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]] = {}
        """More control operations this worker answers, by name (link resumption's:
        :mod:`.resumption`)."""

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        """Answer the other workers, and be this worker's management of the whole broker,
        until cancelled."""
        self.management.whole = self
        try:
            await self.point.run(task_status=task_status)
        finally:
            self.management.whole = None  # (the counts stay mapped: connections still end)

    def count_with(
        self, guard: ConnectionGuard, alarms: ResourceAlarms | None, links: Mapping[int, RemoteNodes] | None = None
    ) -> None:
        """Make ``guard``'s connection limits, the memory alarm and ``limits.memory_limit_bytes``
        the whole broker's: over the counts the parent shares with every worker
        (:mod:`.counters`), and the publishes on their way to another worker over ``links``
        (this worker's, to each other worker)."""
        counts = self.counts = SharedCounts.attach(self.directory, self.ownership.workers, self.ownership.me)
        if counts is None:
            return
        guard.elsewhere = counts
        if alarms is not None:
            own = alarms.rss
            alarms.rss = lambda: counts.whole_rss(own())
        on_the_way = list((links or {}).values())

        def whole_queued(mine: int) -> int:
            return mine + counts.whole_queued(mine) + sum(nodes.on_the_way() for nodes in on_the_way)

        self.management.broker.whole_queued = whole_queued

    def serve_metrics(self, local: Metrics) -> Metrics:
        """What ``/metrics`` serves: ``local``, this worker's, merged with every other's."""
        self.local_metrics = local
        return self.metrics

    # -- answering the other workers -------------------------------------------------------
    async def answer(self, op: str, args: Mapping[str, Any]) -> Any:
        """This worker's part of a request another worker took."""
        m = self.management
        caller = Caller(user=args.get("user"), vhost=str(args.get("as_vhost", "/")))
        if op == "list":
            return self._local_list(caller, str(args["type"]), args.get("vhost"))
        if op == "consumers":
            return m.consumers(caller, vhost=args.get("vhost"))
        if op == "counts":
            m.overview(caller)  # the read check
            return m.broker.counts()
        if op == "close":
            try:
                m.close_connection(caller, str(args["name"]), str(args["reason"]))
            except NotFoundError:
                return False
            return True
        if op == "node":  # a change of one of our nodes, once stored
            result = NODE_OPS[str(args["op"])](m, caller, str(args["type"]), str(args["name"]), args.get("vhost"), args["args"])
            await m.broker.committed()
            return result
        if op == "execute":  # a $management request about one of our nodes
            done = m.execute(caller, Request(**args["request"]))
            await m.broker.committed()
            return {"status": done.status, "description": done.description, "body": done.body, "properties": done.properties}
        if op == "stream-info":  # (ours if we own it, or hold its partitioned address)
            vhost, address = str(args["vhost"]), str(args["address"])
            host = m.broker.vhost(vhost)
            info = host.stream_info(address) if host is not None else None
            if info is None or ("partitions" not in info and self.ownership.owner(vhost, address) != self.ownership.me):
                return None  # (a record of the metadata's, not the stream)
            return info
        if op == "metrics":
            if self.local_metrics is None:
                raise NotFoundError("/metrics is off")
            return (await self.local_metrics()).decode()
        more = self.ops.get(op)
        if more is not None:
            return await more(args)
        raise BadRequest(f"no control operation {op!r}")

    def _local_list(self, caller: Caller, entity_type: str, vhost: str | None) -> Entities:
        entities = self.management.list(caller, entity_type, vhost=vhost)
        if entity_type not in NODE_TYPES:
            return entities
        mine = self.ownership.me
        owner = self.ownership.owner
        return [e for e in entities if owner(str(e["vhost"]), str(e["name"])) == mine]

    @staticmethod
    def _who(caller: Caller, **args: Any) -> dict[str, Any]:
        return {"user": caller.user, "as_vhost": caller.vhost, **args}

    # -- the merged answers ------------------------------------------------------------------
    async def list(self, caller: Caller, entity_type: str, *, vhost: str | None = None) -> Entities:
        """Every entity of ``entity_type`` the caller may see, on every worker, by name."""
        local = self._local_list(caller, entity_type, vhost)
        if entity_type not in MERGED_TYPES:
            return local
        others = await self.point.ask_others("list", self._who(caller, type=entity_type, vhost=vhost))
        merged = [*local, *(e for k in sorted(others) for e in others[k])]
        return sorted(merged, key=lambda e: str(e.get("name")))

    async def consumers(self, caller: Caller, *, vhost: str | None = None) -> Entities:
        """The consumers of every connection the caller may see, on every worker."""
        local = self.management.consumers(caller, vhost=vhost)
        others = await self.point.ask_others("consumers", self._who(caller, vhost=vhost))
        return [*local, *(c for k in sorted(others) for c in others[k])]

    async def overview(self, caller: Caller) -> dict[str, Any]:
        """The overview with every worker's counts summed."""
        out = self.management.overview(caller)
        others = await self.point.ask_others("counts", self._who(caller))
        for counts in others.values():
            for key, value in counts.items():
                if isinstance(value, int) and isinstance(out.get(key), int):
                    out[key] += value
        return out

    def _owner(self, caller: Caller, entity_type: str, name: str, vhost: str | None) -> int:
        """The worker that owns node ``name`` (this one for what is not a node)."""
        if entity_type not in NODE_TYPES:
            return self.ownership.me
        return self.ownership.owner(vhost if vhost is not None else caller.vhost, name)

    async def on_owner(
        self, caller: Caller, op: NodeOp, entity_type: str, name: str, vhost: str | None, args: Mapping[str, Any]
    ) -> Any:
        """``op`` of node ``name``, made on its owner (here, if this worker owns it)."""
        owner = self._owner(caller, entity_type, name, vhost)
        if owner == self.ownership.me:
            result = op(self.management, caller, entity_type, name, vhost, args)
            await self.management.broker.committed()
            return result
        fields = {"op": op.__name__, "type": entity_type, "name": name, "vhost": vhost, "args": dict(args)}
        return await self.point.ask_one(owner, "node", self._who(caller, **fields))
    async def stream_info(self, vhost: str, address: str) -> dict[str, int] | None:
        """``stream-info`` of a stream another worker holds: the first worker's that does
        (its owner's; a partitioned stream's address, any worker's that made it)."""
        answers = await self.point.ask_others("stream-info", {"vhost": vhost, "address": address})
        for k in sorted(answers):
            if answers[k] is not None:
                return {str(key): int(v) for key, v in answers[k].items()}
        return None

    async def close_connection(self, caller: Caller, name: str, reason: str) -> None:
        """Close connection ``name``, on whichever worker it lives; 404 if on none."""
        try:
            self.management.close_connection(caller, name, reason)
            return
        except NotFoundError:
            pass
        closed = await self.point.ask_others("close", self._who(caller, name=name, reason=reason))
        if not any(closed.values()):
            raise NotFoundError(f"no connection {name!r}")

    async def execute(self, caller: Caller, request: Request) -> Response:
        """A ``$management`` request: a QUERY of queues, streams or connections lists them
        on every worker, a READ of one finds it on any, a DELETE of a connection closes it
        on any; the rest is answered here."""
        m = self.management
        op = request.operation.upper() if isinstance(request.operation, str) else None
        if op == "QUERY":
            return await self._query(caller, request)
        kind = str(request.type).removeprefix("org.amqp10.")
        name = request.name if request.name is not None else request.identity
        if op in OWNED_OPERATIONS and isinstance(name, str):
            owner = self._owner(caller, kind, name, None)
            if owner != self.ownership.me:
                asked = {k: getattr(request, k) for k in ("operation", "type", "name", "identity", "body")}
                asked["properties"] = dict(request.properties)
                try:
                    done = await self.point.ask_one(owner, "execute", self._who(caller, request=asked))
                except ManagementError as exc:  # (a refusal there)
                    return Response(status=exc.status, description=exc.description, body={})
                return Response(
                    status=int(done["status"]),
                    description=str(done["description"]),
                    body=done["body"],
                    properties=dict(done.get("properties") or {}),
                )
        answer = m.execute(caller, request)
        if answer.status != 404 or kind not in MERGED_TYPES or not isinstance(name, str):
            return answer
        try:
            if op == "READ":
                for e in await self.list(caller, kind):
                    if e.get("name") == name:
                        return Response(status=200, description="OK", body=e)
            elif op == "DELETE" and kind == "connection":
                reason = "closed by the broker's management"
                closed = await self.point.ask_others("close", self._who(caller, name=name, reason=reason))
                if any(closed.values()):
                    return Response(status=204, description="No Content", body={})
        except ManagementError as exc:  # another worker's refusal
            return Response(status=exc.status, description=exc.description, body={})
        return answer

    async def _query(self, caller: Caller, request: Request) -> Response:
        m = self.management
        body = request.body if isinstance(request.body, Mapping) else {}
        asked = request.properties.get("entityType", body.get("entityType"))
        kinds = [str(asked).removeprefix("org.amqp10.")] if asked is not None else list(MERGED_TYPES)
        lists: dict[str, Entities] = {}
        for kind in kinds:
            if kind in MERGED_TYPES:
                try:
                    lists[kind] = await self.list(caller, kind)
                except Exception:  # (a refusal: the query below says it, as on one worker)
                    continue
        with m.listing(lists):
            return m.execute(caller, request)

    async def metrics(self) -> bytes:
        """``/metrics`` of the whole broker."""
        assert self.local_metrics is not None
        texts = {self.ownership.me: (await self.local_metrics()).decode()}
        others = await self.point.ask_others("metrics", {})
        texts.update(others)
        return merge_expositions(texts)


class _Merged:
    """What ``generate_latest`` reads: the merged families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge_expositions(texts: Mapping[int, str]) -> bytes:
    """The Prometheus text of several workers as one broker's (see the module)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for worker in sorted(texts):
        for family in text_string_to_metric_families(texts[worker]):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            per_worker = family.name.startswith(PER_WORKER_PREFIXES)
            largest = family.name in LARGEST
            table = values[family.name]
            for sample in family.samples:
                labels = dict(sample.labels)
                if per_worker:
                    labels["worker"] = str(worker)
                key = (sample.name, tuple(sorted(labels.items())))
                old = table.get(key)
                if old is None:
                    table[key] = sample.value
                elif largest:
                    table[key] = max(old, sample.value)
                else:
                    table[key] = old + sample.value
    for name, metric in families.items():
        for (sample_name, label_items), value in values[name].items():
            metric.add_sample(sample_name, dict(label_items), value)
    return generate_latest(_Merged(list(families.values())))
