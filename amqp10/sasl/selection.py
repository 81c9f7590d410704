"""Choosing and building SASL mechanisms (Part 5 §5.3.3.1): which name a client puts in
sasl-init, which names a server offers, and the mechanism object for a name.

The mechanisms themselves are in :mod:`amqp10.sasl.mechanisms`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from ..types import SaslCode
from .credentials import CredentialStore
from .mechanisms import (
    DEFAULT_MIN_ITERATIONS,
    MAX_RESPONSE_SIZE,
    AnonymousClient,
    AnonymousServer,
    CbsServer,
    ClientMechanism,
    ExternalClient,
    ExternalServer,
    PasswordCheck,
    PlainClient,
    PlainServer,
    RejectingServer,
    SaslMechanismError,
    ScramClient,
    ScramServer,
    ServerMechanism,
)

__all__ = [
    "CLIENT_MECHANISMS",
    "SERVER_MECHANISMS",
    "client_choose",
    "make_client_mechanism",
    "make_server_mechanism",
    "server_offer",
]

_SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1")

CLIENT_MECHANISMS: tuple[str, ...] = (*_SCRAM_MECHANISMS, "PLAIN", "EXTERNAL", "ANONYMOUS")
"""Mechanisms `make_client_mechanism` can build, strongest password mechanism first."""

SERVER_MECHANISMS: tuple[str, ...] = (*CLIENT_MECHANISMS, "MSSBCBS")
"""Mechanisms `make_server_mechanism` can build."""


def client_choose(
    offered: Sequence[str],
    preferred: Sequence[str] | None = None,
    *,
    has_credentials: bool = True,
    has_client_certificate: bool = False,
) -> str:
    """Pick the mechanism to name in sasl-init from the server's sasl-mechanisms.

    With `preferred`, the first of those the server offers wins. Otherwise: EXTERNAL if
    the client presents a TLS certificate, then (with a username and password)
    SCRAM-SHA-512 > SCRAM-SHA-256 > SCRAM-SHA-1 > PLAIN, and ANONYMOUS only for a client
    without credentials, so a server cannot quietly downgrade a client that means to log
    in. Raises `SaslMechanismError` when nothing matches.
    """
    if preferred is None:
        ranking: list[str] = []
        if has_client_certificate:
            ranking.append("EXTERNAL")
        if has_credentials:
            ranking.extend((*_SCRAM_MECHANISMS, "PLAIN"))
        else:
            ranking.append("ANONYMOUS")
    else:
        ranking = list(preferred)
        unknown = [name for name in ranking if name not in CLIENT_MECHANISMS]
        if unknown:
            raise SaslMechanismError(
                f"unsupported SASL mechanism(s) preferred: {', '.join(unknown)}"
            )
    available = set(offered)
    for name in ranking:
        if name in available:
            return name
    raise SaslMechanismError(
        f"no SASL mechanism in common: server offers [{', '.join(offered)}],"
        f" client accepts [{', '.join(ranking)}]"
    )


def make_client_mechanism(
    name: str,
    *,
    username: str | None = None,
    password: str | None = None,
    authzid: str = "",
    trace: str = "",
    min_iterations: int = DEFAULT_MIN_ITERATIONS,
) -> ClientMechanism:
    """Build the client side of `name`; raises `SaslMechanismError` if it cannot."""
    if name == "ANONYMOUS":
        return AnonymousClient(trace)
    if name == "EXTERNAL":
        return ExternalClient(authzid)
    if name not in ("PLAIN", *_SCRAM_MECHANISMS):
        raise SaslMechanismError(f"unsupported SASL mechanism {name!r}")
    if not username or not password:
        raise SaslMechanismError(f"{name} needs a username and a password")
    if name == "PLAIN":
        return PlainClient(username, password, authzid)
    return ScramClient(name, username, password, authzid=authzid, min_iterations=min_iterations)


def server_offer(allowed: Iterable[str], *, tls_identity: str | None = None) -> tuple[str, ...]:
    """The sasl-server-mechanisms to advertise: `allowed` in its order, minus names we
    cannot serve, and minus EXTERNAL when TLS gave no client identity."""
    return tuple(
        name
        for name in dict.fromkeys(allowed)
        if name in SERVER_MECHANISMS and (name != "EXTERNAL" or tls_identity is not None)
    )


def make_server_mechanism(
    name: str,
    *,
    allowed: Collection[str],
    store: CredentialStore | None,
    tls_identity: str | None = None,
    max_response_size: int = MAX_RESPONSE_SIZE,
    password_check: PasswordCheck | None = None,
) -> ServerMechanism:
    """Build the server side of the mechanism a client named in sasl-init.

    Never raises: a name outside `allowed` (or unknown) yields a `RejectingServer` with
    `auth`; PLAIN or SCRAM without a store yields one with `sys-perm` (a configuration
    error, not the client's fault).
    """
    if name not in allowed or name not in SERVER_MECHANISMS:
        return RejectingServer(
            name, SaslCode.AUTH, f"mechanism {name[:40]!r} is not offered by this server"
        )
    if name == "ANONYMOUS":
        return AnonymousServer(max_response_size=max_response_size)
    if name == "MSSBCBS":
        return CbsServer(max_response_size=max_response_size)
    if name == "EXTERNAL":
        return ExternalServer(tls_identity, max_response_size=max_response_size)
    if store is None:
        return RejectingServer(
            name, SaslCode.SYS_PERM, f"{name} is allowed but no credential store is set"
        )
    if name == "PLAIN":
        return PlainServer(store, max_response_size=max_response_size, password_check=password_check)
    return ScramServer(name, store, max_response_size=max_response_size)
