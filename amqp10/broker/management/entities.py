"""The entity types management operations act on, each with its attributes and operations.

An entity type knows how to list its entities in a virtual host (or in the broker),
find one by name, describe one as a map of attributes (plain values: strings,
numbers, booleans, lists, maps), and — where it makes sense — create, update, delete,
purge and peek. Access checks are the caller's (:class:`.api.Management`); the
changes themselves are the core's (:mod:`amqp10.broker.core`), done once there.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...management import oasis
from ..core import (
    DEFAULT_EXCHANGE,
    Binding,
    Exchange,
    ModelError,
    Queue,
    ResourceKind,
    RuntimePolicy,
    Stream,
    Topic,
    VirtualHost,
)
from ..core.arguments import QUEUE_TYPES
from ..core.exchanges import EXCHANGE_TYPES
from .errors import BadRequest, Conflict, NotImplementedOperation

if TYPE_CHECKING:
    from .api import Management

__all__ = ["ENTITY_TYPES", "EntityType", "model_error_status", "plain_value", "type_named"]

Attrs = dict[str, Any]

RATE_ATTRIBUTES = ("publish_rate", "deliver_rate", "ack_rate")
QUEUE_ATTRIBUTES = (
    "name", "identity", "type", "vhost", "durable", "auto_delete", "exclusive", "dynamic", "arguments",
    "depth", "bytes", "consumers", "unacked", "enqueued", "delivered", "acked", "rejected", "expired",
    "dead_lettered", *RATE_ATTRIBUTES,
)  # fmt: skip


class EntityType:
    """One kind of entity. Subclasses fill in what they support; the rest is a 501."""

    name = ""
    description = ""
    attributes: tuple[str, ...] = ("name", "identity", "type")
    operations: tuple[str, ...] = ("READ",)
    vhost_scoped = True
    """Named within a virtual host (False: within the broker: connections, virtual hosts)."""
    required: tuple[str, ...] = ("name",)
    """Attributes CREATE needs besides the name."""
    resource: ResourceKind | None = "queue"
    """What the user's permissions name for this entity (None: tags alone decide)."""

    @property
    def a(self) -> str:
        """The type's name with its article ("a queue", "an exchange")."""
        return f"{'an' if self.name[0] in 'aeiou' else 'a'} {self.name}"

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        raise NotImplementedError

    def find(self, m: Management, vhost: VirtualHost | None, name: str) -> Any | None:
        for item in self.items(m, vhost):
            if self.name_of(item) == name:
                return item
        return None

    def name_of(self, item: Any) -> str:
        return str(item.name)

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        raise NotImplementedError

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        raise NotImplementedOperation(f"CREATE is not an operation of {self.name}")

    def update(self, m: Management, vhost: VirtualHost | None, item: Any, attrs: Mapping[str, Any]) -> Any:
        raise NotImplementedOperation(f"UPDATE is not an operation of {self.name}")

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        raise NotImplementedOperation(f"DELETE is not an operation of {self.name}")

    def messages(self, item: Any) -> Queue | Stream:
        """What PURGE and PEEK act on."""
        raise NotImplementedOperation(f"PURGE and PEEK are not operations of {self.name}")

    def base(self, vhost: VirtualHost | None, item: Any) -> Attrs:
        name = self.name_of(item)
        out: Attrs = {"name": name, "identity": name, "type": self.name}
        if vhost is not None:
            out["vhost"] = vhost.name
        return out


def _queue_attrs(m: Management, vhost: VirtualHost, q: Queue | Stream, kind: str) -> Attrs:
    s = q.stats
    depth = q.count
    rates = m.rates.sample((vhost.name, q.name), (s.enqueued, s.delivered, s.acked))
    out: Attrs = {
        "durable": q.durable_node if isinstance(q, Queue) else True,
        "auto_delete": isinstance(q, Queue) and q.auto_delete,
        "exclusive": isinstance(q, Queue) and q.owner is not None,
        "dynamic": q.dynamic,
        "arguments": plain_value(q.arguments if isinstance(q, Queue) else vhost.stream_arguments.get(q.name, {})),
        "depth": depth,
        "bytes": q.bytes,
        "consumers": len(q.consumers),
        "unacked": s.unacked if isinstance(q, Queue) else 0,
        "enqueued": s.enqueued,
        "delivered": s.delivered,
        "acked": s.acked,
        "rejected": s.rejected,
        "expired": s.expired,
        "dead_lettered": s.dead_lettered,
        **dict(zip(RATE_ATTRIBUTES, rates, strict=True)),
    }
    return out


class QueueType(EntityType):
    name = "queue"
    description = "a queue: messages are taken by competing consumers"
    attributes: tuple[str, ...] = QUEUE_ATTRIBUTES
    operations: tuple[str, ...] = ("CREATE", "READ", "DELETE", "PURGE", "PEEK")
    kind = "queue"

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        assert vhost is not None
        cls = Stream if self.kind == "stream" else Queue
        # dynamic nodes (a client's temporary reply queues) are left out of listings
        return sorted((n for n in vhost.nodes.values() if type(n) is cls and not n.dynamic), key=_by_name)

    def find(self, m: Management, vhost: VirtualHost | None, name: str) -> Any | None:
        assert vhost is not None
        node = vhost.nodes.get(name)
        return node if type(node) is (Stream if self.kind == "stream" else Queue) else None

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        assert vhost is not None
        out = self.base(vhost, item)
        out.update(_queue_attrs(m, vhost, item, self.kind))
        if isinstance(item, Stream):
            out.update({"first_offset": item.first, "next_offset": item.next})
        return out

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        assert vhost is not None
        existing = vhost.nodes.get(name)
        if existing is not None:
            raise Conflict(f"{name!r} already exists in vhost {vhost.name!r} (a {existing.kind})")
        arguments = _map(attrs.get("arguments"), "arguments")
        return vhost.declare_queue(
            name,
            durable=_bool(attrs.get("durable", True), "durable"),
            auto_delete=_bool(attrs.get("auto_delete", False), "auto_delete"),
            kind=self.kind,
            arguments=arguments,
        )

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        assert vhost is not None
        vhost.delete_node(item.name)

    def messages(self, item: Any) -> Queue | Stream:
        assert isinstance(item, (Queue, Stream))
        return item


class StreamType(QueueType):
    name = "stream"
    description = "a stream: an append-only log that consumers read from an offset"
    attributes: tuple[str, ...] = (*QUEUE_ATTRIBUTES, "first_offset", "next_offset")
    operations: tuple[str, ...] = ("CREATE", "READ", "DELETE", "PEEK")
    kind = "stream"


class TopicType(EntityType):
    name = "topic"
    description = "a 1.0 topic: each subscriber gets a subscription queue of its own"
    attributes: tuple[str, ...] = ("name", "identity", "type", "vhost", "subscriptions", "depth", "bytes", *RATE_ATTRIBUTES)
    resource: ResourceKind | None = "topic"
    operations: tuple[str, ...] = ("CREATE", "READ", "DELETE")

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        assert vhost is not None
        return sorted((n for n in vhost.nodes.values() if isinstance(n, Topic)), key=_by_name)

    def find(self, m: Management, vhost: VirtualHost | None, name: str) -> Any | None:
        assert vhost is not None
        node = vhost.nodes.get(name)
        return node if isinstance(node, Topic) else None

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        assert vhost is not None and isinstance(item, Topic)
        subs = list(item.subscriptions.values())
        enq = sum(q.stats.enqueued for q in subs)
        dlv = sum(q.stats.delivered for q in subs)
        ack = sum(q.stats.acked for q in subs)
        rates = m.rates.sample((vhost.name, "topic", item.name), (enq, dlv, ack))
        return {
            **self.base(vhost, item),
            "subscriptions": len(subs),
            "depth": sum(q.count for q in subs),
            "bytes": sum(q.bytes for q in subs),
            **dict(zip(RATE_ATTRIBUTES, rates, strict=True)),
        }

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        assert vhost is not None
        existing = vhost.nodes.get(name)
        if existing is not None or name in vhost.exchanges:
            raise Conflict(f"{name!r} already exists in vhost {vhost.name!r}")
        return vhost.create_node(name, "topic")

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        assert vhost is not None
        vhost.delete_node(item.name)


class SubscriptionType(EntityType):
    name = "subscription"
    description = "a topic's subscription queue (named TOPIC::KEY)"
    attributes: tuple[str, ...] = ("topic", *QUEUE_ATTRIBUTES)
    operations: tuple[str, ...] = ("READ", "DELETE", "PURGE", "PEEK")

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        assert vhost is not None
        out: list[tuple[Topic, Queue]] = []
        for node in vhost.nodes.values():
            if isinstance(node, Topic):
                out.extend((node, q) for q in node.subscriptions.values())
        return sorted(out, key=lambda pair: pair[1].name)

    def find(self, m: Management, vhost: VirtualHost | None, name: str) -> Any | None:
        assert vhost is not None
        topic = vhost.nodes.get(name.partition("::")[0])
        if isinstance(topic, Topic):
            for q in topic.subscriptions.values():
                if q.name == name:
                    return (topic, q)
        return None

    def name_of(self, item: Any) -> str:
        return str(item[1].name)

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        assert vhost is not None
        topic, q = item
        return {**self.base(vhost, item), "topic": topic.name, **_queue_attrs(m, vhost, q, "queue")}

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        assert vhost is not None
        topic, q = item
        vhost.drop_subscription(topic, q)
        q.delete()

    def messages(self, item: Any) -> Queue | Stream:
        q: Queue = item[1]
        return q


class ExchangeType(EntityType):
    name = "exchange"
    description = "an exchange: routes messages to queues and exchanges by its bindings"
    attributes: tuple[str, ...] = ("name", "identity", "type", "vhost", "exchange_type", "durable", "auto_delete", "internal",
                  "alternate_exchange", "arguments", "bindings")  # fmt: skip
    resource: ResourceKind | None = "exchange"
    operations: tuple[str, ...] = ("CREATE", "READ", "DELETE")

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        assert vhost is not None
        return sorted((x for x in vhost.exchanges.values() if not isinstance(x, Topic)), key=_by_name)

    def find(self, m: Management, vhost: VirtualHost | None, name: str) -> Any | None:
        assert vhost is not None
        x = vhost.exchanges.get(name)
        return None if isinstance(x, Topic) else x

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        assert isinstance(item, Exchange)
        return {
            **self.base(vhost, item),
            "exchange_type": item.type,
            "durable": item.durable,
            "auto_delete": item.auto_delete,
            "internal": item.internal,
            "alternate_exchange": item.alternate,
            "arguments": plain_value(item.arguments),
            "bindings": len(item.bindings),
        }

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        assert vhost is not None
        if name in vhost.exchanges or name == DEFAULT_EXCHANGE:
            raise Conflict(f"exchange {name!r} already exists in vhost {vhost.name!r}")
        kind = _str(attrs.get("exchange_type", "direct"), "exchange_type")
        if kind not in EXCHANGE_TYPES:
            raise BadRequest(f"exchange_type must be one of {', '.join(EXCHANGE_TYPES)}, not {kind!r}")
        alternate = attrs.get("alternate_exchange")
        return vhost.declare_exchange(
            name,
            kind,
            durable=_bool(attrs.get("durable", True), "durable"),
            auto_delete=_bool(attrs.get("auto_delete", False), "auto_delete"),
            internal=_bool(attrs.get("internal", False), "internal"),
            alternate=None if alternate is None else _str(alternate, "alternate_exchange"),
            arguments=_map(attrs.get("arguments"), "arguments"),
        )

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        assert vhost is not None
        vhost.delete_exchange(item.name)


def binding_name(b: Binding) -> str:
    """A binding's name: the JSON list [source, destination_type, destination, routing_key, arguments]."""
    kind = "exchange" if isinstance(b.destination, Exchange) else "queue"
    return oasis.binding_name(b.source.name, kind, b.destination.name, b.key, plain_value(b.arguments))


class BindingType(EntityType):
    name = "binding"
    description = "a route from an exchange to a queue or exchange (name: a JSON list, see GET-ATTRIBUTES)"
    attributes: tuple[str, ...] = ("name", "identity", "type", "vhost", "source", "destination", "destination_type", "routing_key", "arguments")
    operations: tuple[str, ...] = ("CREATE", "READ", "DELETE")
    required: tuple[str, ...] = ("source", "destination")

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        assert vhost is not None
        out = [b for x in vhost.exchanges.values() if x.name != DEFAULT_EXCHANGE and not isinstance(x, Topic) for b in x.bindings.values()]
        return sorted(out, key=binding_name)

    def name_of(self, item: Any) -> str:
        return binding_name(item)

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        b: Binding = item
        return {
            **self.base(vhost, b),
            "source": b.source.name,
            "destination": b.destination.name,
            "destination_type": "exchange" if isinstance(b.destination, Exchange) else "queue",
            "routing_key": b.key,
            "arguments": plain_value(b.arguments),
        }

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        assert vhost is not None
        kind = _str(attrs.get("destination_type", "queue"), "destination_type")
        if kind not in ("queue", "exchange"):
            raise BadRequest(f"destination_type must be queue or exchange, not {kind!r}")
        return vhost.bind(
            _str(attrs.get("source"), "source"),
            _str(attrs.get("destination"), "destination"),
            _str(attrs.get("routing_key", ""), "routing_key"),
            _map(attrs.get("arguments"), "arguments"),
            destination_kind=kind,
        )

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        assert vhost is not None
        b: Binding = item
        kind = "exchange" if isinstance(b.destination, Exchange) else "queue"
        vhost.unbind(b.source.name, b.destination.name, b.key, b.arguments, destination_kind=kind)


class PolicyType(EntityType):
    name = "policy"
    description = "a runtime policy (RabbitMQ's): settings for the queues whose names match a pattern"
    attributes: tuple[str, ...] = ("name", "identity", "type", "vhost", "pattern", "apply_to", "definition", "priority")
    resource: ResourceKind | None = None
    operations: tuple[str, ...] = ("CREATE", "READ", "UPDATE", "DELETE")
    required: tuple[str, ...] = ("name", "pattern")

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        assert vhost is not None
        return sorted(vhost.policies.values(), key=_by_name)

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        p: RuntimePolicy = item
        return {**self.base(vhost, p), "pattern": p.pattern, "apply_to": p.apply_to, "definition": plain_value(p.definition), "priority": p.priority}

    def _declare(self, vhost: VirtualHost, name: str, attrs: Mapping[str, Any], old: RuntimePolicy | None) -> RuntimePolicy:
        def pick(key: str, default: Any) -> Any:
            return attrs.get(key, attrs.get(key.replace("_", "-"), default))

        policy = RuntimePolicy(
            name,
            _str(pick("pattern", old.pattern if old else None), "pattern"),
            _str(pick("apply_to", old.apply_to if old else "all"), "apply_to"),
            dict(_map(pick("definition", old.definition if old else {}), "definition")),
            _int(pick("priority", old.priority if old else 0), "priority"),
        )
        vhost.declare_policy(policy)
        return policy

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        assert vhost is not None
        if name in vhost.policies:
            raise Conflict(f"policy {name!r} already exists in vhost {vhost.name!r}")
        return self._declare(vhost, name, attrs, None)

    def update(self, m: Management, vhost: VirtualHost | None, item: Any, attrs: Mapping[str, Any]) -> Any:
        assert vhost is not None
        return self._declare(vhost, item.name, attrs, item)

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        assert vhost is not None
        vhost.delete_policy(item.name)


class VhostType(EntityType):
    name = "vhost"
    description = "a virtual host: its own queues, exchanges and permissions"
    attributes: tuple[str, ...] = (
        "name", "identity", "type", "description", "tags", "default_queue_type", "queues", "exchanges", "connections", "depth",
    )  # fmt: skip
    resource: ResourceKind | None = None
    operations: tuple[str, ...] = ("CREATE", "READ", "UPDATE", "DELETE")
    vhost_scoped = False

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        return sorted(m.broker.vhosts.values(), key=_by_name)

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        v: VirtualHost = item
        queues = v.queues()
        conns = sum(1 for c in m.connection_list() if c.info().get("vhost") == v.name)
        return {
            **self.base(None, v),
            "description": str(v.metadata.get("description", "")),
            "tags": plain_value(v.metadata.get("tags", [])),
            "default_queue_type": v.metadata.get("default_queue_type"),
            "queues": len(queues),
            "exchanges": len(v.exchanges),
            "connections": conns,
            "depth": sum(q.count for q in queues),
        }

    def create(self, m: Management, vhost: VirtualHost | None, name: str, attrs: Mapping[str, Any]) -> Any:
        if name in m.broker.vhosts:
            raise Conflict(f"virtual host {name!r} already exists")
        queue_type = attrs.get("default_queue_type")  # (set when made, as RabbitMQ 3.10's put_vhost)
        if queue_type is not None and queue_type not in QUEUE_TYPES:
            raise BadRequest(f"invalid_queue_type: default_queue_type is classic, quorum or stream, not {queue_type!r}")
        v = m.broker.add_vhost(name)
        if queue_type is not None:
            v.set_metadata({**v.metadata, "default_queue_type": queue_type})
        return self.update(m, None, v, attrs)

    def update(self, m: Management, vhost: VirtualHost | None, item: Any, attrs: Mapping[str, Any]) -> Any:
        v: VirtualHost = item
        meta = dict(v.metadata)
        if "description" in attrs:
            meta["description"] = _str(attrs["description"], "description")
        if "tags" in attrs:
            tags = attrs["tags"]
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise BadRequest("tags must be a list of strings")
            meta["tags"] = list(tags)
        v.set_metadata(meta)
        return v

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        """As RabbitMQ deletes a virtual host: its connections closed, then the host with
        everything in it (the default host is refused)."""
        v: VirtualHost = item
        if v is m.broker.default:
            raise BadRequest(f"the default virtual host {v.name!r} cannot be deleted")
        for c in m.connection_list():
            if c.info().get("vhost") == v.name:
                c.close(f"vhost '{v.name}' is deleted")
        port = m.broker.definitions
        if port is not None:  # the users file's permissions in it go too
            for p in json.loads(port.export_json()).get("permissions", []):
                if p.get("vhost") == v.name:
                    with contextlib.suppress(LookupError, ValueError):
                        port.delete_permission(str(p.get("user")), v.name)
        m.broker.delete_vhost(v.name)


class ConnectionType(EntityType):
    name = "connection"
    description = "a client connection (any protocol): read it, or DELETE to close it"
    attributes: tuple[str, ...] = ("name", "identity", "type", "protocol", "user", "vhost", "peer", "container_id",
                  "connected_at", "sessions", "links")  # fmt: skip
    resource: ResourceKind | None = None
    operations: tuple[str, ...] = ("READ", "DELETE")
    vhost_scoped = False

    def items(self, m: Management, vhost: VirtualHost | None) -> Iterable[Any]:
        return sorted(m.connection_list(), key=_by_name)

    def describe(self, m: Management, vhost: VirtualHost | None, item: Any) -> Attrs:
        return {**self.base(None, item), **plain_value(item.info())}

    def delete(self, m: Management, vhost: VirtualHost | None, item: Any) -> None:
        item.close("closed by the broker's management")


ENTITY_TYPES: dict[str, EntityType] = {
    t.name: t
    for t in (
        QueueType(),
        StreamType(),
        TopicType(),
        SubscriptionType(),
        ExchangeType(),
        BindingType(),
        PolicyType(),
        VhostType(),
        ConnectionType(),
    )
}
"""Every entity type, by the name requests use (``type``, ``entityType``)."""

TYPE_PREFIX = "org.amqp10."
"""Types may also be named fully qualified (``org.amqp10.queue``), as the draft suggests."""


def type_named(name: Any) -> EntityType:
    """The entity type ``name`` names (short or qualified); 400 for a non-string, 404 if unknown."""
    if not isinstance(name, str) or not name:
        raise BadRequest(f"the entity type must be a non-empty string, not {name!r}")
    t = ENTITY_TYPES.get(name.removeprefix(TYPE_PREFIX))
    if t is None:
        from .errors import NotFoundError

        raise NotFoundError(f"unknown entity type {name!r} (known: {', '.join(ENTITY_TYPES)})")
    return t


# -- values --------------------------------------------------------------------------------
def _by_name(item: Any) -> str:
    return str(item.name)


def plain_value(value: Any) -> Any:
    """``value`` with only plain types (maps with string keys, lists, str, int, float, bool, None)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _checked(kind: type | tuple[type, ...], what: str) -> Callable[[Any, str], Any]:
    def check(value: Any, name: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise BadRequest(f"{name} must be {what}, not {type(value).__name__} {value!r}"[:300])
        return value

    return check


_str = _checked(str, "a string")
_bool = _checked(bool, "a boolean")
_int = _checked(int, "an integer")


def _map(value: Any, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadRequest(f"{name} must be a map, not {type(value).__name__}")
    return value


def model_error_status(exc: ModelError) -> int:
    """The status a core refusal becomes (404 not found, 403 refused, 409 otherwise)."""
    from ..core import AccessRefused, NotFound

    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, AccessRefused):
        return 403
    return 409
