"""Who an HTTP request comes from: a password checked as SASL PLAIN checks it, or the
loopback guest of a broker without a users file.

Both HTTP front ends of management — the web console (:mod:`.console`) and RabbitMQ's
HTTP API (:mod:`.rabbitmq_api`) — log people in here, so the rules are the same:

- with a users file (``[sasl] users_file``), a user name and password are checked by
  the SASL PLAIN mechanism against it, with the same back-off after failed logins as
  AMQP logins (:mod:`.guard`);
- without one, on a broker that allows anonymous connections (the quick start), a
  request from a loopback address (127.0.0.0/8, ::1) is let in as the anonymous caller,
  who may do everything there, as AMQP's anonymous connections may: RabbitMQ's
  ``guest`` works only from localhost in the same way. From any other address such a
  broker lets nobody in over HTTP;
- with ``[oauth2]``, an OAuth 2 token (JWT) logs in as the token's user, checked as AMQP
  logins check it (:class:`~.oauth.TokenValidator`: signature, audience, expiry): its
  ``tag:`` scopes (``rabbitmq.tag:administrator``) are the user's tags, its other
  scopes the permissions, as RabbitMQ's management plug-in takes them.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

import anyio

from ..sasl.credentials import CredentialStore
from ..sasl.mechanisms import PlainServer, ServerOutcome
from ..types import SaslCode
from .guard import ConnectionGuard, source_of
from .oauth import GUEST, InvalidToken, TokenGrant, TokenValidator

__all__ = ["GUEST", "HttpLogin", "is_loopback"]

log = logging.getLogger("amqp10.broker.http")


def is_loopback(peer: str) -> bool:
    """Whether ``peer`` (``host:port``) is a loopback address."""
    try:
        return ipaddress.ip_address(source_of(peer)).is_loopback
    except ValueError:
        return False


class HttpLogin:
    """The login rules of one broker: ``users()`` is the users file's credential store
    (None: no users file), ``allow_anonymous`` the broker's ``[sasl] allow_anonymous``,
    ``tokens`` checks OAuth 2 tokens (None: ``[oauth2]`` is not set)."""

    def __init__(
        self,
        users: Callable[[], CredentialStore | None],
        guard: ConnectionGuard,
        *,
        allow_anonymous: bool,
        tokens: TokenValidator | None = None,
    ) -> None:
        self.users = users
        self.guard = guard
        self.allow_anonymous = allow_anonymous
        self.tokens = tokens

    def check_token(self, token: str, peer: str) -> TokenGrant | None:
        """What the OAuth 2 ``token`` allows; None if it does not log in (no ``[oauth2]``,
        or a token that is not valid now: logged with why)."""
        if self.tokens is None:
            log.info("token login from %s refused: [oauth2] is not set", source_of(peer))
            return None
        try:
            return self.tokens.validate(token)
        except InvalidToken as exc:
            log.info("token login from %s refused: %s", source_of(peer), exc)
            return None

    def token_expired(self, grant: TokenGrant) -> bool:
        """Whether ``grant``'s token has run out (by the validator's clock)."""
        return self.tokens is None or grant.expired(self.tokens.now())

    @property
    def has_users(self) -> bool:
        return self.users() is not None

    def loopback_guest(self, peer: str) -> bool:
        """Whether ``peer`` gets in without a password: no users file, anonymous allowed,
        and a loopback address."""
        return not self.has_users and self.allow_anonymous and is_loopback(peer)

    async def check_password(self, username: str, password: str, peer: str) -> str | None:
        """The user ``username`` logs in as if ``password`` is theirs; None if it is not
        (or there is no users file). Failed and good logins pause as the guard says."""
        store = self.users()
        if store is None:
            return None
        addr = source_of(peer)
        if "\0" in username or "\0" in password:
            outcome = ServerOutcome(code=SaslCode.AUTH, reason="a NUL in the user name or password")
        else:
            response = b"\0" + username.encode() + b"\0" + password.encode()
            # PBKDF2 takes a while: off the event loop
            outcome = await anyio.to_thread.run_sync(_plain_check, store, response)
        if outcome.code is not SaslCode.OK or outcome.identity is None:
            await anyio.sleep(self.guard.login_failed(addr, username or None, outcome.reason))
            return None
        await anyio.sleep(self.guard.login_ok(addr, outcome.identity))
        return outcome.identity


def _plain_check(store: CredentialStore, response: bytes) -> ServerOutcome:
    step = PlainServer(store).step(response)
    if isinstance(step, ServerOutcome):
        return step
    return ServerOutcome(code=SaslCode.AUTH, reason="PLAIN: incomplete exchange")
