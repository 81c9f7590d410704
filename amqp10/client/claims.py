"""Claims-based security: ``$cbs`` put-token, as Azure Service Bus and Event Hubs require.

``connect(url, claims=Claims(SasCredential(key_name, key)))`` (or an Azure connection
string, which sets this up itself): before a link to an entity attaches, the
connection puts a token for the entity's audience (``sb://NAMESPACE/ENTITY``, or one
namespace-wide token with ``per_entity=False``) on ``$cbs`` and waits for the answer;
the link waits for it. Each token is put again before it expires (at ``renew_at`` of
its lifetime, by a task in the connection's event loop), and after a reconnect every
token is put again before the links that need one re-attach. A refused token is an
:class:`~amqp10.errors.AuthenticationError` naming the audience and the peer's status
description.

The request/response runs on a sender to ``$cbs`` and a receiver from ``$cbs`` whose
target is the reply address (as Service Bus wants: no dynamic nodes); the messages
themselves are :mod:`amqp10.cbs`'s, shared with the broker.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from .. import errors
from ..cbs import (
    ACCEPTED,
    CBS_ADDRESS,
    JWT,
    SAS_TOKEN,
    PutToken,
    make_sas_token,
    parse_put_token_reply,
    parse_sas_token,
    put_token_request,
)
from ..types import Target
from ._common import deadline
from .azure import ConnectionString
from .receiver import Receiver
from .request import Requests

__all__ = [
    "Claims",
    "ClaimsLayer",
    "Credential",
    "JwtCredential",
    "SasCredential",
    "StaticCredential",
    "Token",
    "connection_string_claims",
]

log = logging.getLogger("amqp10.client")

RETRY_AFTER = 1.0
"""Seconds before a failed renewal (not a refusal) is tried again, while the token lasts."""
MIN_RENEW = 0.5
"""Seconds a token is kept at least before it is renewed (a short-lived token is not put in a loop)."""


@dataclass(frozen=True)
class Token:
    """A token to put: its text, when it expires (seconds since the epoch), its type."""

    token: str
    expires: float
    token_type: str = JWT


class Credential(Protocol):
    """What makes tokens: ``await credential.get_token(audience)``."""

    async def get_token(self, audience: str) -> Token: ...


class SasCredential:
    """Service Bus SAS tokens signed with a shared access key, each valid for ``lifetime`` seconds."""

    def __init__(
        self,
        key_name: str,
        key: str,
        *,
        lifetime: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not key_name or not key:
            raise ValueError("a SAS credential needs a key name and a key")
        if lifetime <= 0:
            raise ValueError("a SAS token's lifetime must be positive")
        self.key_name = key_name
        self._key = key
        self.lifetime = lifetime
        self._clock = clock

    def __repr__(self) -> str:
        return f"SasCredential({self.key_name!r}, lifetime={self.lifetime:g})"

    async def get_token(self, audience: str) -> Token:
        expiry = math.ceil(self._clock() + self.lifetime)
        return Token(
            make_sas_token(audience, self.key_name, self._key, expiry), float(expiry), SAS_TOKEN
        )


TokenSource = Callable[[str], "tuple[str, float] | Token | Awaitable[tuple[str, float] | Token]"]


class JwtCredential:
    """JWTs from ``fetch(audience)``: ``(token, expires)`` (seconds since the epoch) or a
    :class:`Token`. A coroutine function is awaited; a plain function runs in a worker
    thread (it may call an identity provider), so it never blocks the event loop."""

    def __init__(self, fetch: TokenSource) -> None:
        self._fetch = fetch

    async def get_token(self, audience: str) -> Token:
        if inspect.iscoroutinefunction(self._fetch):
            got = await self._fetch(audience)
        else:
            got = await anyio.to_thread.run_sync(self._fetch, audience)
            if inspect.isawaitable(got):
                got = await got
        if isinstance(got, Token):
            return got
        token, expires = got
        return Token(token, float(expires), JWT)


@dataclass(frozen=True)
class Claims:
    """How a connection authorizes its links with ``$cbs``.

    ``resource``: the base of every audience (``sb://NAMESPACE``; ``connect`` fills it
    in from the URL's host when None). ``per_entity``: one token per entity
    (``RESOURCE/ENTITY``, as the Azure SDKs do) or one for the whole namespace
    (``RESOURCE/``). ``renew_at``: the fraction of a token's lifetime after which it is
    put again.
    """

    credential: Credential
    resource: str | None = None
    per_entity: bool = True
    renew_at: float = 0.8
    timeout: float | None = None
    """Bound on one put-token (the connection's timeout when None)."""

    def __post_init__(self) -> None:
        if not 0 < self.renew_at < 1:
            raise ValueError("renew_at is a fraction of the token's lifetime, between 0 and 1")

    def audience_for(self, address: str | None) -> str | None:
        """The audience a link to ``address`` needs a token for (None: none needed)."""
        if address is None or self.resource is None:
            return None
        entity = address
        scheme, sep, rest = address.partition("://")
        if sep and scheme.lower() in ("amqp", "amqps", "sb"):
            entity = rest.partition("/")[2]
        if entity.startswith(CBS_ADDRESS) or not entity:
            return None
        base = self.resource.rstrip("/")
        if not self.per_entity:
            return base + "/"
        entity = entity.removesuffix("/$management")
        return f"{base}/{entity}"


class StaticCredential:
    """One ready-made token (a connection string's ``SharedAccessSignature``), put as it is."""

    def __init__(self, token: Token) -> None:
        self._token = token

    async def get_token(self, audience: str) -> Token:
        return self._token


def connection_string_claims(cs: ConnectionString) -> Claims:
    """The claims an Azure connection string sets up: SAS tokens from its key, per entity
    (or its ready-made signature, for the namespace)."""
    if cs.signature is not None:
        sas = parse_sas_token(cs.signature)
        return Claims(
            StaticCredential(Token(cs.signature, float(sas.expiry), SAS_TOKEN)),
            cs.resource,
            per_entity=False,
        )
    assert cs.key_name is not None and cs.key is not None
    return Claims(SasCredential(cs.key_name, cs.key), cs.resource)


@dataclass
class _Audience:
    """One audience's token on this connection."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    expires: float = 0.0  # epoch seconds
    renew_due: float = math.inf  # anyio clock
    epoch: int = -1  # the connection (reconnect count) it was put on
    refused: errors.AuthenticationError | None = None


class ClaimsLayer(Requests):
    """The layer of :class:`~amqp10.client.Connection` that puts tokens on ``$cbs``."""

    def _init_layer(self) -> None:
        super()._init_layer()
        self._claims: Claims | None = None
        self._audiences: dict[str, _Audience] = {}
        self._cbs_replies: Receiver | None = None
        self._renewing = False
        self._tg: TaskGroup | None = None
        """The connection's tasks (the driver's, the renewal's); set by ``connect``."""

    def use_claims(self, claims: Claims) -> None:
        """Authorize every later link with ``claims`` (``connect(claims=...)`` calls this)."""
        self._claims = claims

    @property
    def claims(self) -> Claims | None:
        return self._claims

    async def put_token(self, audience: str, *, timeout: float | None = None) -> float:
        """Put a fresh token for ``audience`` now (and keep it renewed); return its expiry
        (seconds since the epoch). Raises :class:`~amqp10.errors.AuthenticationError`
        when the peer refuses it."""
        if self._claims is None:
            raise errors.IllegalStateError(
                "the connection has no claims-based security (connect(claims=...))"
            )
        limit = self._timeout_for(timeout)
        await self._until_usable(limit, f"putting a token for {audience!r}")
        state = self._audiences.setdefault(audience, _Audience())
        async with state.lock:
            await self._put(audience, state, limit)
        return state.expires

    async def _authorize(self, address: str | None, timeout: float) -> None:
        claims = self._claims
        audience = claims.audience_for(address) if claims is not None else None
        if audience is None:
            return
        state = self._audiences.setdefault(audience, _Audience())
        async with state.lock:
            if not self._valid(state):
                await self._put(audience, state, timeout)

    def _valid(self, state: _Audience) -> bool:
        return (
            state.epoch == self.reconnects and state.expires > time.time() and state.refused is None
        )

    def _needs_token(self, address: str | None) -> bool:
        """Whether a link to ``address`` must wait for a token after a reconnect."""
        return self._claims is not None and self._claims.audience_for(address) is not None

    async def _put(self, audience: str, state: _Audience, limit: float) -> None:
        """Get a token from the credential and put it, within ``limit`` seconds."""
        claims = self._claims
        assert claims is not None
        what = f"putting the token for {audience!r} on {CBS_ADDRESS}"
        with deadline(limit, what):
            token = await claims.credential.get_token(audience)
            sender = await self._cached_sender(CBS_ADDRESS)
            replies = await self._cbs_reply_receiver()
            assert replies.address is not None
            request = put_token_request(
                PutToken(token.token_type, audience, token.token, token.expires)
            )
            reply = await self._exchange(sender, replies.address, request)
        status, description = parse_put_token_reply(reply.application_properties)
        if status != ACCEPTED:
            err = errors.AuthenticationError(
                f"{self.peer} refused the token for {audience!r}: {description} (status {status})"
            )
            err.condition = "amqp:unauthorized-access"
            state.refused = err
            raise err
        now = time.time()
        lifetime = max(token.expires - now, 0.0)
        state.expires = token.expires
        state.epoch = self.reconnects
        state.refused = None
        state.renew_due = anyio.current_time() + max(lifetime * claims.renew_at, MIN_RENEW)
        log.debug("token for %r put, expires in %.1fs", audience, lifetime)
        self._start_renewing()

    async def _cbs_reply_receiver(self) -> Receiver:
        async with self._lock():
            r = self._cbs_replies
            if r is None or r.error is not None:
                reply_to = f"{CBS_ADDRESS}-replies-{uuid.uuid4()}"
                r = await self.open_receiver(
                    CBS_ADDRESS, target=Target(address=reply_to), credit=10
                )
                r._address = reply_to  # replies are addressed to the target, not the source
                r._on_delivery = self._on_reply
                self._cbs_replies = r
            return r

    # -- renewing ---------------------------------------------------------------------------
    def _start_renewing(self) -> None:
        tg = self._tg
        if not self._renewing and tg is not None:
            self._renewing = True
            tg.start_soon(self._renew_tokens)

    async def _renew_tokens(self) -> None:
        """Put each token again once it reaches its renewal time; ends with the connection."""
        try:
            while self._error is None and not self._closing:
                now = anyio.current_time()
                due = [
                    a
                    for a, s in self._audiences.items()
                    if s.refused is None and s.renew_due <= now
                ]
                if not due or not self._usable():
                    wake = min(
                        (s.renew_due for s in self._audiences.values() if s.refused is None),
                        default=math.inf,
                    )
                    with anyio.move_on_after(max(wake - now, 0.0) if self._usable() else math.inf):
                        await self._changed.wait()
                    continue
                for audience in due:
                    await self._renew(audience)
        finally:
            self._renewing = False

    async def _renew(self, audience: str) -> None:
        state = self._audiences[audience]
        async with state.lock:
            if state.renew_due > anyio.current_time():
                return  # put meanwhile (by a link, or after a reconnect)
            try:
                await self._put(audience, state, self._claims_timeout())
            except errors.AuthenticationError as exc:
                log.warning("renewing the token failed: %s", exc)
            except Exception as exc:  # a failed request, or the credential's own failure
                left = state.expires - time.time()
                state.renew_due = anyio.current_time() + (
                    RETRY_AFTER if left > RETRY_AFTER else math.inf
                )
                log.info(
                    "renewing the token for %r failed (%s): retrying while it lasts", audience, exc
                )

    def _claims_timeout(self) -> float:
        claims = self._claims
        return self.timeout if claims is None or claims.timeout is None else claims.timeout

    # -- after a reconnect ----------------------------------------------------------------------
    async def _reauthorize(self, audiences: set[str]) -> dict[str, errors.AMQPError] | None:
        """Put every token again on the new connection (those of ``audiences`` and all put
        before): the failures, by audience; None when the connection dropped again meanwhile
        (the next reconnect starts over)."""
        epoch = self.reconnects
        failed: dict[str, errors.AMQPError] = {}
        for audience in sorted(audiences | set(self._audiences)):
            state = self._audiences.setdefault(audience, _Audience())
            try:
                async with state.lock:
                    await self._put(audience, state, self._claims_timeout())
            except errors.AMQPError as exc:
                failed[audience] = exc
            except Exception as exc:  # the credential's own failure
                failed[audience] = errors.AuthenticationError(
                    f"the credential gave no token for {audience!r}: {exc!r}"
                )
            if self.reconnects != epoch or self._outage is not None or self._error is not None:
                return None
        return failed
