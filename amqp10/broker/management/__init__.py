"""Broker management, protocol-neutral: one API for ``$management``, ``amqp10 admin`` and the web console.

Nothing here imports a protocol engine; front ends translate their requests into
these calls. One :class:`Management` per broker::

    from amqp10.broker.management import Caller, Management, ManagementError

    m = Management.of(broker)                    # shared by every front end
    me = Caller(user="alice", vhost="/")         # who asks (user None: anonymous)

    m.list(me, "queue", offset=0, count=100)     # -> [ {attributes}, ... ] sorted by name
    m.read(me, "queue", "orders")                # -> {attributes}
    m.create(me, "queue", "orders", {"durable": True, "arguments": {...}})
    m.update(me, "policy", "ttl", {"definition": {"message-ttl": 1000}})
    m.delete(me, "queue", "orders")              # -> None
    m.purge(me, "queue", "orders")               # -> how many messages were dropped
    m.peek(me, "queue", "orders", 10)            # -> first 10 messages as maps, left in place
    m.connections(me)                            # == m.list(me, "connection")
    m.close_connection(me, "conn-3", "reason")
    m.publish(me, "amq.direct", "key", msg)      # -> PublishResult (msg: a QueuedMessage)
    m.get(me, "orders", 5, settle="requeue")     # -> [Got(message, left, redelivered)], basic.get's way
    m.overview(me)                               # broker totals (connections, links, nodes, bytes)
    m.execute(me, Request(operation="QUERY", properties={"entityType": "queue"}, body={}))
                                                 # -> Response(status, description, body, properties)

Every call but :meth:`Management.execute` raises :class:`ManagementError` (``.status``
— 400, 401, 403, 404, 409, 501 — and ``.description``, one line) when refused;
``execute`` never raises and answers the OASIS AMQP Management draft's operations
(:mod:`.draft`).

Entity types (:data:`ENTITY_TYPES`; ``org.amqp10.`` + the name is accepted too):
``queue``, ``stream``, ``topic``, ``subscription`` (``TOPIC::KEY``), ``exchange``,
``binding`` (named by a JSON list ``[source, destination_type, destination,
routing_key, arguments]``), ``policy``, ``vhost`` and ``connection`` (read, and
DELETE/:meth:`~Management.close_connection` to close). Every entity has ``name``,
``identity`` (= name) and ``type``; vhost-scoped ones ``vhost``. Queues, streams
and subscriptions have ``depth``, ``bytes``, ``consumers``, ``unacked``, the
counters ``enqueued``, ``delivered``, ``acked``, ``rejected``, ``expired``,
``dead_lettered`` and the rates ``publish_rate``, ``deliver_rate``, ``ack_rate``
(messages per second over the last 10 s of reads; see :class:`Rates`). Listings
leave out dynamic queues (clients' temporary reply queues); READ finds them.
A PEEK message map: ``position``, ``format``, ``size``, ``priority``, ``durable``,
``delivery_count``, ``arrival``, ``message_id``, ``correlation_id``, ``subject``,
``to``, ``reply_to``, ``content_type``, ``application_properties``,
``message_annotations``, ``body`` (text cut at 4096 characters, then ``truncated``).

Authorization (:mod:`.access`, configured in ``[management]``) is by the user's
tags — reading needs a ``read_tags`` tag, changing a ``write_tags`` tag plus the
user's permission on the resource (configure; read to purge and peek); everyone's
connections and hosts ``monitor_tags``; closing others' connections ``admin_tags``;
policies ``policy_tags``. Without a users file everything is allowed.

Connections are the service's: it registers a :class:`ManagedConnection` per
connection (:meth:`Management.register_connection`).

Like the core, none of this is thread-safe: call it from the broker's event loop
(the HTTP listener's handlers run there).
"""

from .access import Access, Caller
from .api import (
    Got,
    ManagedConnection,
    Management,
    NodeOp,
    Rates,
    delete_node,
    describe_message,
    peek_node,
    purge_node,
    read_node,
)
from .draft import Request, Response
from .entities import ENTITY_TYPES, EntityType, type_named
from .errors import (
    BadRequest,
    Conflict,
    Forbidden,
    ManagementError,
    NotFoundError,
    NotImplementedOperation,
    Unauthorized,
    error_of,
)

__all__ = [
    "ENTITY_TYPES",
    "Access",
    "BadRequest",
    "Caller",
    "Conflict",
    "EntityType",
    "Got",
    "Forbidden",
    "ManagedConnection",
    "Management",
    "ManagementError",
    "NodeOp",
    "NotFoundError",
    "NotImplementedOperation",
    "Rates",
    "Request",
    "Response",
    "Unauthorized",
    "delete_node",
    "describe_message",
    "error_of",
    "peek_node",
    "purge_node",
    "read_node",
    "type_named",
]
