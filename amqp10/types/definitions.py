"""Restricted types of Parts 1-5 that have no descriptor, with their choices.

Composite types and described restricted types live in the modules named after
the spec's XML files (``transport``, ``messaging``, ``security``,
``transactions``); this module holds the plain restricted types they refer to,
and the enums for those with choices.
"""

from __future__ import annotations

import enum

from .composite import restricted
from .primitives import symbol

__all__ = [
    "ExpiryPolicy",
    "ReceiverSettleMode",
    "Role",
    "SaslCode",
    "SenderSettleMode",
    "StdDistMode",
    "TerminusDurability",
    "TxnCapability",
]


class Role(enum.IntEnum):
    """Link role (``role``, a boolean on the wire: sender=false, receiver=true)."""

    SENDER = 0
    RECEIVER = 1


class SenderSettleMode(enum.IntEnum):
    """``sender-settle-mode``."""

    UNSETTLED = 0
    SETTLED = 1
    MIXED = 2


class ReceiverSettleMode(enum.IntEnum):
    """``receiver-settle-mode``."""

    FIRST = 0
    SECOND = 1


class TerminusDurability(enum.IntEnum):
    """``terminus-durability``."""

    NONE = 0
    CONFIGURATION = 1
    UNSETTLED_STATE = 2


class ExpiryPolicy(symbol, enum.Enum):
    """``terminus-expiry-policy``."""

    LINK_DETACH = "link-detach"
    SESSION_END = "session-end"
    CONNECTION_CLOSE = "connection-close"
    NEVER = "never"

    def __str__(self) -> str:
        return str.__str__(self)


class StdDistMode(symbol, enum.Enum):
    """``std-dist-mode``: the standard distribution modes."""

    MOVE = "move"
    COPY = "copy"

    def __str__(self) -> str:
        return str.__str__(self)


class SaslCode(enum.IntEnum):
    """``sasl-code``: the outcome of a SASL exchange."""

    OK = 0
    AUTH = 1
    SYS = 2
    SYS_PERM = 3
    SYS_TEMP = 4


class TxnCapability(symbol, enum.Enum):
    """``txn-capability``."""

    LOCAL_TRANSACTIONS = "amqp:local-transactions"
    DISTRIBUTED_TRANSACTIONS = "amqp:distributed-transactions"
    PROMOTABLE_TRANSACTIONS = "amqp:promotable-transactions"
    MULTI_TXNS_PER_SSN = "amqp:multi-txns-per-ssn"
    MULTI_SSNS_PER_TXN = "amqp:multi-ssns-per-txn"

    def __str__(self) -> str:
        return str.__str__(self)


def _choices(e: type[enum.Enum]) -> dict[str, object]:
    return {m.name.lower().replace("_", "-"): m.value for m in e}


# --- transport.xml definitions --------------------------------------------------
restricted("role", "boolean", {"sender": False, "receiver": True})
restricted("sender-settle-mode", "ubyte", _choices(SenderSettleMode))
restricted("receiver-settle-mode", "ubyte", _choices(ReceiverSettleMode))
restricted("handle", "uint")
restricted("seconds", "uint")
restricted("milliseconds", "uint")
restricted("delivery-tag", "binary")
restricted("delivery-number", "sequence-no")
restricted("transfer-number", "sequence-no")
restricted("sequence-no", "uint")
restricted("message-format", "uint")
restricted("ietf-language-tag", "symbol")
restricted("fields", "map")
_ERR = "error-condition"
restricted(
    "amqp-error",
    "symbol",
    {
        "internal-error": "amqp:internal-error",
        "not-found": "amqp:not-found",
        "unauthorized-access": "amqp:unauthorized-access",
        "decode-error": "amqp:decode-error",
        "resource-limit-exceeded": "amqp:resource-limit-exceeded",
        "not-allowed": "amqp:not-allowed",
        "invalid-field": "amqp:invalid-field",
        "not-implemented": "amqp:not-implemented",
        "resource-locked": "amqp:resource-locked",
        "precondition-failed": "amqp:precondition-failed",
        "resource-deleted": "amqp:resource-deleted",
        "illegal-state": "amqp:illegal-state",
        "frame-size-too-small": "amqp:frame-size-too-small",
    },
    _ERR,
)
restricted(
    "connection-error",
    "symbol",
    {
        "connection-forced": "amqp:connection:forced",
        "framing-error": "amqp:connection:framing-error",
        "redirect": "amqp:connection:redirect",
    },
    _ERR,
)
restricted(
    "session-error",
    "symbol",
    {
        "window-violation": "amqp:session:window-violation",
        "errant-link": "amqp:session:errant-link",
        "handle-in-use": "amqp:session:handle-in-use",
        "unattached-handle": "amqp:session:unattached-handle",
    },
    _ERR,
)
restricted(
    "link-error",
    "symbol",
    {
        "detach-forced": "amqp:link:detach-forced",
        "transfer-limit-exceeded": "amqp:link:transfer-limit-exceeded",
        "message-size-exceeded": "amqp:link:message-size-exceeded",
        "redirect": "amqp:link:redirect",
        "stolen": "amqp:link:stolen",
    },
    _ERR,
)
# --- messaging.xml ------------------------------------------------------------------
restricted("annotations", "map")
restricted("message-id-ulong", "ulong", provides="message-id")
restricted("message-id-uuid", "uuid", provides="message-id")
restricted("message-id-binary", "binary", provides="message-id")
restricted("message-id-string", "string", provides="message-id")
restricted("address-string", "string", provides="address")
restricted("terminus-durability", "uint", _choices(TerminusDurability))
restricted("terminus-expiry-policy", "symbol", _choices(ExpiryPolicy))
restricted("std-dist-mode", "symbol", _choices(StdDistMode), "distribution-mode")
restricted("filter-set", "map")
restricted("node-properties", "fields")
# --- security.xml -------------------------------------------------------------------
restricted("sasl-code", "ubyte", _choices(SaslCode))
# --- transactions.xml ---------------------------------------------------------------
restricted("transaction-id", "binary", provides="txn-id")
restricted("txn-capability", "symbol", _choices(TxnCapability), "txn-capability")
restricted(
    "transaction-error",
    "symbol",
    {
        "unknown-id": "amqp:transaction:unknown-id",
        "transaction-rollback": "amqp:transaction:rollback",
        "transaction-timeout": "amqp:transaction:timeout",
    },
    _ERR,
)

# Constants the spec defines (``<definition>`` elements).
PORT = 5672
SECURE_PORT = 5671
MAJOR = 1
MINOR = 0
REVISION = 0
MIN_MAX_FRAME_SIZE = 512
MESSAGE_FORMAT = 0
SASL_MAJOR = 1
SASL_MINOR = 0
SASL_REVISION = 0
TLS_MAJOR = 1
TLS_MINOR = 0
TLS_REVISION = 0
