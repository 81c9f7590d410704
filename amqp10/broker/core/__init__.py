"""The protocol-neutral broker core: virtual hosts, exchanges, queues, the message container.

Nothing here reaches, through any chain of runtime imports, a protocol engine
(``amqp10.transport``, ``amqp10.amqp091``, ``amqp10.sasl``, ``amqp10.io``), a front
end, the service or the configuration layer (``tests/test_design.py`` holds the
package to that; the configuration's models are read through :attr:`Broker.config`,
and the one the core applies, :class:`QueuePolicy`, lives here). Front ends
(:mod:`amqp10.broker.amqp1`, :mod:`amqp10.broker.amqp091`) turn their engine's events
into the core's operations:

- choose a virtual host: :meth:`Broker.vhost`, :meth:`Broker.vhost_for_hostname`;
- declare / look up: :meth:`VirtualHost.declare_queue`,
  :meth:`VirtualHost.declare_exchange`, :meth:`VirtualHost.lookup` (1.0 node
  names), :meth:`VirtualHost.create_dynamic`, ``delete_node`` / ``delete_exchange``;
- bind: :meth:`VirtualHost.bind` / :meth:`VirtualHost.unbind` (a binding named with its
  arguments) or :meth:`VirtualHost.unbind_key` (by its key alone: 0-10);
- publish: :meth:`VirtualHost.route` (exchange + routing key), or
  ``node.publish(msg, on_stored)`` on a queue or exchange, with a
  :class:`QueuedMessage` subclass of the publisher's protocol; both return a
  :class:`PublishResult` (taken, or why not: unroutable, full, refused) that each
  front end maps to its protocol's answer;
- consume / cancel: ``node.admits(exclusive=...)`` (a :class:`ConsumeResult`: admitted,
  or why not: an exclusive consumer holds the node, or it is in use and an exclusive
  consumer asked; each front end maps it to its protocol's answer), then
  ``node.add_consumer(c)`` / ``node.remove_consumer(c)``, ``c`` a :class:`Consumer`
  (its ``credit()`` is 1.0 link credit or 0-9-1 prefetch room);
- settle: ``node.ack(msg)``, ``node.release(msg, delivery_failed=...,
  undeliverable_to=...)``, ``node.reject(msg)``;
- transactions: :class:`Transaction`;
- permissions: :meth:`Broker.authorize` (vhost, user, resource, action) before
  any of the above on a user's behalf.

Refusals raise :class:`NotFound`, :class:`AccessRefused` or
:class:`PreconditionFailed`, which each front end maps to its protocol's code.
"""

from __future__ import annotations

from .arguments import ArgumentError, arguments_of, policy_with_arguments
from .broker import (
    CONSUMER_CLAIMS,
    DEFAULT_VHOST,
    Action,
    Authorizer,
    Broker,
    ConsumerClaim,
    DefinitionsPort,
    MetadataPort,
    ResourceKind,
)
from .exchanges import (
    EXCHANGE_TYPES,
    Binding,
    DirectExchange,
    Exchange,
    FanoutExchange,
    HeadersExchange,
    Topic,
    TopicExchange,
    TopicTrie,
    is_pattern,
    make_exchange,
)
from .leases import Lease, Leases
from .message import (
    AMQP010_FORMAT,
    AMQP091_FORMAT,
    AMQP1_FORMAT,
    DEFAULT_PRIORITY,
    PRIORITY_LEVELS,
    QueuedMessage,
    Routing,
    format_named,
    made_as,
    maker_named,
    register_conversion,
    register_format,
)
from .nodes import (
    NULL_JOURNAL,
    Answered,
    Consumer,
    ConsumeResult,
    DuplicateWindow,
    Journal,
    Node,
    NodeElsewhere,
    PublishResult,
    Refused,
    answer_now,
    nothing,
    settled_everywhere,
    unheard,
)
from .partitioned import PartitionedStream
from .policies import RuntimePolicy
from .prepared import HeldWork
from .queue_policy import QueuePolicy
from .queues import Queue
from .recovery import LinkRecovery, SuspendedLink
from .streams import Stream
from .transactions import Coordinator, RoutedOnce, Transaction, commit_reaching, route_once
from .vhost import (
    DEFAULT_EXCHANGE,
    PREDECLARED,
    AccessRefused,
    ModelError,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
    VirtualHost,
)

__all__ = [
    "AMQP010_FORMAT",
    "AMQP091_FORMAT",
    "AMQP1_FORMAT",
    "DEFAULT_EXCHANGE",
    "EXCHANGE_TYPES",
    "DEFAULT_PRIORITY",
    "CONSUMER_CLAIMS",
    "DEFAULT_VHOST",
    "NULL_JOURNAL",
    "PREDECLARED",
    "PRIORITY_LEVELS",
    "AccessRefused",
    "ArgumentError",
    "Action",
    "Authorizer",
    "Binding",
    "Broker",
    "ConsumerClaim",
    "ConsumeResult",
    "Answered",
    "Consumer",
    "Coordinator",
    "DefinitionsPort",
    "MetadataPort",
    "DirectExchange",
    "DuplicateWindow",
    "Exchange",
    "FanoutExchange",
    "HeadersExchange",
    "HeldWork",
    "Journal",
    "Lease",
    "Leases",
    "LinkRecovery",
    "ModelError",
    "Node",
    "NodeElsewhere",
    "NotFound",
    "PartitionedStream",
    "PreconditionFailed",
    "PublishResult",
    "Refused",
    "Queue",
    "QueuePolicy",
    "QueuedMessage",
    "ResourceLocked",
    "Routing",
    "RuntimePolicy",
    "Stream",
    "SuspendedLink",
    "Topic",
    "TopicExchange",
    "TopicTrie",
    "is_pattern",
    "Transaction",
    "RoutedOnce",
    "VirtualHost",
    "arguments_of",
    "format_named",
    "made_as",
    "maker_named",
    "make_exchange",
    "policy_with_arguments",
    "register_conversion",
    "register_format",
    "answer_now",
    "commit_reaching",
    "route_once",
    "nothing",
    "settled_everywhere",
    "unheard",
    "ResourceKind",
]
