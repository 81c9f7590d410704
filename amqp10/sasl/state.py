"""The SASL negotiation state machines (AMQP Part 5 §5.3.2), one table per role.

Everything that moves a SASL layer from one state to the next is in these two tables:
``(state, input) -> new state``. A pair that is not in the table is a protocol error (the
peer sent a frame it may not send now), which the layer turns into a failed exchange.
Which frames each role sends, and when, is the layer's business (`amqp10.sasl.layer`).

    client                                      server
    HEADER   --sasl header-->     MECHANISMS    HEADER  --sasl header--> INIT
    MECHANISMS --sasl-mechanisms--> EXCHANGE    HEADER  --amqp header--> BYPASSED (require=False)
    EXCHANGE --sasl-challenge-->  EXCHANGE      INIT    --sasl-init-->   EXCHANGE
    EXCHANGE --sasl-outcome-->    EXCHANGE      EXCHANGE --sasl-response--> EXCHANGE
    EXCHANGE --succeed-->  AUTHENTICATED        EXCHANGE --succeed-->  AUTHENTICATED
    any non-terminal state --fail--> FAILED
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "CLIENT_TRANSITIONS",
    "SERVER_TRANSITIONS",
    "TERMINAL_STATES",
    "SaslInput",
    "SaslState",
    "next_state",
]


class SaslState(enum.Enum):
    """Where a SASL layer is in the exchange."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call; ``done`` looks the state up in a set)
    __hash__ = object.__hash__

    HEADER = "header"
    """Waiting for the peer's protocol header."""
    MECHANISMS = "mechanisms"
    """Client: headers exchanged, waiting for sasl-mechanisms."""
    INIT = "init"
    """Server: sasl-mechanisms sent, waiting for sasl-init."""
    EXCHANGE = "exchange"
    """The mechanism runs: challenges and responses until the outcome."""
    AUTHENTICATED = "authenticated"
    """Terminal: the outcome was ok; what follows on the stream is AMQP."""
    BYPASSED = "bypassed"
    """Terminal (server): the peer sent the plain AMQP header and SASL is optional."""
    FAILED = "failed"
    """Terminal: the exchange failed; the stream must end."""


class SaslInput(enum.Enum):
    """What can happen to a SASL layer: something received, or the mechanism's verdict."""

    RECV_SASL_HEADER = "receive the SASL protocol header"
    RECV_AMQP_HEADER = "receive the AMQP protocol header"
    RECV_MECHANISMS = "receive sasl-mechanisms"
    RECV_INIT = "receive sasl-init"
    RECV_CHALLENGE = "receive sasl-challenge"
    RECV_RESPONSE = "receive sasl-response"
    RECV_OUTCOME = "receive sasl-outcome"
    SUCCEED = "succeed"
    FAIL = "fail"


S = SaslState
I = SaslInput  # noqa: E741

TERMINAL_STATES: frozenset[SaslState] = frozenset({S.AUTHENTICATED, S.BYPASSED, S.FAILED})
"""States the exchange never leaves."""

_FAILABLE = (S.HEADER, S.MECHANISMS, S.INIT, S.EXCHANGE)

CLIENT_TRANSITIONS: Mapping[tuple[SaslState, SaslInput], SaslState] = MappingProxyType(
    {
        (S.HEADER, I.RECV_SASL_HEADER): S.MECHANISMS,
        (S.MECHANISMS, I.RECV_MECHANISMS): S.EXCHANGE,
        (S.EXCHANGE, I.RECV_CHALLENGE): S.EXCHANGE,
        # the outcome is checked (e.g. SCRAM's server signature) before SUCCEED or FAIL
        (S.EXCHANGE, I.RECV_OUTCOME): S.EXCHANGE,
        (S.EXCHANGE, I.SUCCEED): S.AUTHENTICATED,
        **{(state, I.FAIL): S.FAILED for state in _FAILABLE},
    }
)
"""The client's table. Receiving the AMQP header is absent: a client that asked for SASL
cannot go on without it."""

SERVER_TRANSITIONS: Mapping[tuple[SaslState, SaslInput], SaslState] = MappingProxyType(
    {
        (S.HEADER, I.RECV_SASL_HEADER): S.INIT,
        # only allowed when SASL is optional; the layer fails the exchange otherwise
        (S.HEADER, I.RECV_AMQP_HEADER): S.BYPASSED,
        (S.INIT, I.RECV_INIT): S.EXCHANGE,
        (S.EXCHANGE, I.RECV_RESPONSE): S.EXCHANGE,
        (S.EXCHANGE, I.SUCCEED): S.AUTHENTICATED,
        **{(state, I.FAIL): S.FAILED for state in _FAILABLE},
    }
)
"""The server's table."""


def next_state(
    table: Mapping[tuple[SaslState, SaslInput], SaslState], state: SaslState, event: SaslInput
) -> SaslState | None:
    """The state after `event`, or None when the table does not allow it."""
    return table.get((state, event))
