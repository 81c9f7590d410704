"""SASL layer (sans-IO), AMQP Part 5 §5.3: client and server mechanisms, credentials.

`SaslClient` / `SaslServer` run the exchange over bytes; `SaslConnection` puts one in
front of an `amqp10.transport.Connection` behind a single engine-shaped object. The
mechanisms (ANONYMOUS, PLAIN, EXTERNAL, SCRAM-SHA-1/256/512) are in `mechanisms`,
stored credentials in `credentials`.
"""

from __future__ import annotations

from ..types import SaslCode
from .connection import SaslConnection
from .credentials import CredentialStore, InMemoryCredentialStore, ScramCredential
from .events import SaslCompleted, SaslEvent, SaslFailed, SaslSkipped
from .external import tls_identity
from .layer import DEFAULT_MAX_ROUND_TRIPS, PASSWORD_MECHANISMS, SaslClient, SaslServer
from .selection import CLIENT_MECHANISMS, SERVER_MECHANISMS
from .state import SaslState

__all__ = [
    "CLIENT_MECHANISMS",
    "DEFAULT_MAX_ROUND_TRIPS",
    "PASSWORD_MECHANISMS",
    "SERVER_MECHANISMS",
    "CredentialStore",
    "InMemoryCredentialStore",
    "SaslClient",
    "SaslCode",
    "SaslCompleted",
    "SaslConnection",
    "SaslEvent",
    "SaslFailed",
    "SaslServer",
    "SaslSkipped",
    "SaslState",
    "ScramCredential",
    "tls_identity",
]
