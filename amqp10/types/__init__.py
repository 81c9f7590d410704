"""The AMQP 1.0 type system (Part 1) and every composite type of Parts 2-5.

``encode(value) -> bytes`` and ``decode(data) -> value`` convert between Python
values and AMQP encodings; ``encode_into`` and ``decode_at`` are the streaming
forms the engine uses. Plain Python values map to AMQP types the obvious way;
the exact types below say which AMQP type a value must travel as.
"""

from __future__ import annotations

from .codec import DEFAULT_LIMITS, Limits, decode, decode_at, encode, encode_into
from .composite import Composite, DescribedType, Field
from .definitions import (
    ExpiryPolicy,
    ReceiverSettleMode,
    Role,
    SaslCode,
    SenderSettleMode,
    StdDistMode,
    TerminusDurability,
    TxnCapability,
)
from .errors import AMQPTypeError, DecodeError, EncodeError, ErrorCondition
from .messaging import (
    Accepted,
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    DeleteOnClose,
    DeleteOnNoLinks,
    DeleteOnNoLinksOrMessages,
    DeleteOnNoMessages,
    DeliveryAnnotations,
    Footer,
    Header,
    MessageAnnotations,
    Modified,
    Properties,
    Received,
    Rejected,
    Released,
    Source,
    Target,
)
from .primitives import (
    Array,
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    long,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from .security import SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse
from .transactions import Coordinator, Declare, Declared, Discharge, TransactionalState
from .transport import Attach, Begin, Close, Detach, Disposition, End, Error, Flow, Open, Transfer

__all__ = [
    "DEFAULT_LIMITS", "AMQPTypeError", "Accepted", "AmqpSequence", "AmqpValue",
    "ApplicationProperties", "Array", "Attach", "Begin", "Close", "Composite", "Coordinator",
    "Data", "DecodeError", "Declare", "Declared", "DeleteOnClose", "DeleteOnNoLinks",
    "DeleteOnNoLinksOrMessages", "DeleteOnNoMessages", "DeliveryAnnotations", "Described",
    "DescribedType", "Detach", "Discharge", "Disposition", "EncodeError", "End", "Error",
    "ErrorCondition", "ExpiryPolicy", "Field", "Flow", "Footer", "Header", "Limits",
    "MessageAnnotations", "Modified", "Open", "Properties", "ReceiverSettleMode", "Received",
    "Rejected", "Released", "Role", "SaslChallenge", "SaslCode", "SaslInit", "SaslMechanisms",
    "SaslOutcome", "SaslResponse", "SenderSettleMode", "Source", "StdDistMode", "Target",
    "TerminusDurability", "TransactionalState", "Transfer", "TxnCapability", "byte", "char",
    "decimal32", "decimal64", "decimal128", "decode", "decode_at", "encode", "encode_into",
    "float32", "int32", "long", "short", "symbol", "timestamp", "ubyte", "uint", "ulong",
    "ushort",
]
