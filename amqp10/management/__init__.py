"""Managing a broker's queues, exchanges and bindings over AMQP 1.0: the two protocols' messages.

One home for what both ends must agree on — the client that sends the requests
(:mod:`amqp10.client.management`, ``conn.management()``) and the broker that answers
them (:mod:`amqp10.broker.amqp1.rabbitmq_management`, :mod:`amqp10.broker.amqp1.management`):

- :mod:`.http`: RabbitMQ 4's management node, HTTP over AMQP 1.0 on ``/management``
  (paths, bodies, replies whose ``subject`` is the status code);
- :mod:`.oasis`: the OASIS AMQP Management draft's ``$management`` node (``operation``,
  ``type``, ``name`` application properties; ``statusCode`` and ``statusDescription``);
- :mod:`.model`: what both describe, :class:`QueueInfo`, :class:`ExchangeInfo`.

Pure functions and values: no I/O, no broker, no client.
"""

from .model import ExchangeInfo, QueueInfo, queue_type

__all__ = ["ExchangeInfo", "QueueInfo", "queue_type"]
