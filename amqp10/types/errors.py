"""Codec errors and the spec's error conditions."""

from __future__ import annotations

import enum

from .primitives import symbol

__all__ = ["AMQPTypeError", "DecodeError", "EncodeError", "ErrorCondition"]


class ErrorCondition(symbol, enum.Enum):
    """Every ``amqp:*`` error condition the specification defines (Parts 2 and 4).

    Members are symbols, so they encode on the wire exactly as the spec's values.
    """

    # amqp-error (Part 2 §2.8.15)
    INTERNAL_ERROR = "amqp:internal-error"
    NOT_FOUND = "amqp:not-found"
    UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"
    DECODE_ERROR = "amqp:decode-error"
    RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
    NOT_ALLOWED = "amqp:not-allowed"
    INVALID_FIELD = "amqp:invalid-field"
    NOT_IMPLEMENTED = "amqp:not-implemented"
    RESOURCE_LOCKED = "amqp:resource-locked"
    PRECONDITION_FAILED = "amqp:precondition-failed"
    RESOURCE_DELETED = "amqp:resource-deleted"
    ILLEGAL_STATE = "amqp:illegal-state"
    FRAME_SIZE_TOO_SMALL = "amqp:frame-size-too-small"
    # connection-error (§2.8.16)
    CONNECTION_FORCED = "amqp:connection:forced"
    FRAMING_ERROR = "amqp:connection:framing-error"
    CONNECTION_REDIRECT = "amqp:connection:redirect"
    # session-error (§2.8.17)
    WINDOW_VIOLATION = "amqp:session:window-violation"
    ERRANT_LINK = "amqp:session:errant-link"
    HANDLE_IN_USE = "amqp:session:handle-in-use"
    UNATTACHED_HANDLE = "amqp:session:unattached-handle"
    # link-error (§2.8.18)
    DETACH_FORCED = "amqp:link:detach-forced"
    TRANSFER_LIMIT_EXCEEDED = "amqp:link:transfer-limit-exceeded"
    MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
    LINK_REDIRECT = "amqp:link:redirect"
    STOLEN = "amqp:link:stolen"
    # transaction-error (Part 4 §4.5.8)
    TRANSACTION_UNKNOWN_ID = "amqp:transaction:unknown-id"
    TRANSACTION_ROLLBACK = "amqp:transaction:rollback"
    TRANSACTION_TIMEOUT = "amqp:transaction:timeout"

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"ErrorCondition.{self.name}"


class AMQPTypeError(Exception):
    """Base class of codec errors; ``condition`` is the AMQP condition to report."""

    condition: ErrorCondition = ErrorCondition.INTERNAL_ERROR


class DecodeError(AMQPTypeError, ValueError):
    """Bytes that are not a valid AMQP encoding (or break a configured limit)."""

    condition = ErrorCondition.DECODE_ERROR


class EncodeError(AMQPTypeError, ValueError):
    """A Python value that cannot be encoded as the AMQP type asked for."""

    condition = ErrorCondition.INVALID_FIELD
