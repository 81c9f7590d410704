"""A node's limits and policies (:class:`QueuePolicy`): what the core applies to a queue,
topic subscription or stream.

It is also a model of the broker configuration (``default_policy``, ``[[addresses]]``
``policy``; :mod:`amqp10.broker.config` re-exports it), checked as the configuration's
models are: unknown keys are errors, values are frozen. It lives here, in the core, so
that the core needs nothing from the configuration layer above it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .message import PRIORITY_LEVELS

__all__ = ["Overflow", "QueuePolicy"]

Overflow = Literal[
    "block", "drop-oldest", "reject", "drop-head", "reject-publish", "reject-publish-dlx"
]


class QueuePolicy(BaseModel):
    """Limits and policies of a node (queue, topic subscription or stream).

    Each setting also has its RabbitMQ queue-argument name (``x-message-ttl``,
    ``x-max-length``, ...; see :mod:`amqp10.broker.core.arguments`), so a queue
    declared with arguments and a queue configured here mean the same thing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)  # as every configuration model's

    durable: bool = Field(
        default=False,
        description="store every message, not only header.durable ones (those always are)",
    )
    max_length: int | None = Field(
        default=None, ge=0, description="at most this many messages (x-max-length)"
    )
    max_bytes: int | None = Field(
        default=None, ge=0, description="at most this many bytes of messages (x-max-length-bytes)"
    )
    overflow: Overflow = Field(
        default="block",
        description="what a full queue does (x-overflow): block (no credit for publishers), "
        "drop-head (= drop-oldest: drop the oldest, dead-lettering it if a dead-letter exchange is set), "
        "reject-publish (= reject: refuse new messages), reject-publish-dlx (refuse and dead-letter them)",
    )
    dead_letter_address: str | None = Field(
        default=None,
        description="the node dead messages go to (a 1.0 address; see dead_letter_exchange)",
    )
    dead_letter_exchange: str | None = Field(
        default=None,
        description="the exchange dead messages are republished to (x-dead-letter-exchange; '' the default "
        "exchange), with an x-death record",
    )
    dead_letter_routing_key: str | None = Field(
        default=None,
        description="their routing key there (x-dead-letter-routing-key; default: their own)",
    )
    dead_letter_strategy: Literal["at-most-once", "at-least-once"] | None = Field(
        default=None,
        description="x-dead-letter-strategy: at-least-once keeps a dead letter that reaches no queue in its "
        "queue and sends it again until one takes it; at-most-once (None, the default) drops it",
    )
    delivery_limit: int | None = Field(
        default=None,
        ge=1,
        description="deliveries before a message is dead (x-delivery-limit N, RabbitMQ's returns allowed, is N + 1 here)",
    )
    message_ttl: float | None = Field(
        default=None,
        ge=0,
        description="seconds a message may wait in the queue (x-message-ttl, in ms there)",
    )
    expires: float | None = Field(
        default=None,
        gt=0,
        description="seconds a queue may go unused before it is deleted (x-expires, in ms there)",
    )
    max_priority: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description="highest priority honoured (x-max-priority; strict levels up to 31, higher values "
        "share the top one; without it 0-9 as the 1.0 spec's minimum)",
    )
    single_active_consumer: bool = Field(
        default=False,
        description="one consumer at a time gets messages, the next takes over (x-single-active-consumer)",
    )
    consumer_timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds a consumer may hold a delivery unsettled before it loses its channel (0-9-1) "
        "or link (1.0) and the message goes back (x-consumer-timeout, in ms there); None: no limit",
    )
    priority_levels: int | None = Field(
        default=None,
        ge=1,
        le=PRIORITY_LEVELS,
        description="Qpid's priority levels (qpid.priorities): N levels centred on priorities 4 and 5 "
        "(0-9 spread over them as Qpid spreads them; ring overflow drops the lowest level's oldest first)",
    )
    fairshare: tuple[int, ...] = Field(
        default=(),
        description="Qpid's fair share (qpid.fairshare, qpid.fairshare-N): per priority level, the "
        "messages delivered from it in a row before lower levels get theirs (0: no limit); empty: strict",
    )
    group_key: str | None = Field(
        default=None,
        description="the header that names a message's group (qpid.group_header_key), in place of "
        "1.0's group-id; a message without it is in the group qpid.no_group",
    )
    shared_groups: bool = Field(
        default=False,
        description="a group is a consumer's only while it holds one of its messages unsettled "
        "(qpid.shared_msg_group); else until the consumer leaves",
    )
    last_value_key: str | None = Field(
        default=None,
        description="the header whose value a newer message replaces an older queued one by "
        "(a last-value queue: qpid.last_value_queue_key)",
    )
    sequence_header: str | None = Field(
        default=None,
        description="the header each message gets its queue's enqueue number in, from 1 "
        "(qpid.queue_msg_sequence)",
    )
    auto_delete_timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds an auto-delete or exclusive queue is kept once it would be deleted (its last "
        "consumer or its owner gone), deleted then if still unused (qpid.auto_delete_timeout)",
    )
    max_age_seconds: float | None = Field(default=None, gt=0, description="stream retention by age")
    retention_bytes: int | None = Field(default=None, ge=1, description="stream retention by size")
    deliver_after_commit: bool | None = Field(
        default=None,
        description="queues: hand a stored (durable) message to consumers only once its store commit is done, "
        "so no consumer acts on a message a crash then erases; None: on when durable is set",
    )
    duplicate_window: int = Field(
        default=0, ge=0, description="message-ids remembered for duplicate detection"
    )
    partitions: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="streams: more than 1 makes a partitioned stream, each partition a stream at "
        "<address>/partition/<K> with its own offsets; messages placed by their "
        "x-opt-partition-key annotation (crc32 mod N), else round robin",
    )

    @property
    def overflow_mode(self) -> Literal["block", "drop", "reject"]:
        """The overflow behaviour, RabbitMQ's names and ours folded together."""
        if self.overflow in ("drop-oldest", "drop-head"):
            return "drop"
        if self.overflow in ("reject", "reject-publish", "reject-publish-dlx"):
            return "reject"
        return "block"

    @property
    def has_features(self) -> bool:
        """Whether a queue needs :class:`~amqp10.broker.core.features.QueueFeatures` (Qpid's
        queue features: each message is looked at as it arrives)."""
        return (
            self.priority_levels is not None
            or self.group_key is not None
            or self.last_value_key is not None
            or self.sequence_header is not None
            or bool(self.fairshare)
        )

    @property
    def dead_letters(self) -> bool:
        """Whether dead messages go somewhere (an address or an exchange)."""
        return self.dead_letter_address is not None or self.dead_letter_exchange is not None
