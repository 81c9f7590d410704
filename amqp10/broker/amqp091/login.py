"""Who a 0-9-1 ``connection.start-ok`` logs in as: PLAIN/AMQPLAIN with an OAuth 2 token as
the password ([oauth2]) or against the users file,
RabbitMQ's ``guest``/``guest`` as the anonymous user, EXTERNAL as a TLS client certificate."""

from __future__ import annotations

from ...amqp091.auth import plain_response
from ...sasl.credentials import CredentialStore
from ...sasl.mechanisms import PlainServer, ServerOutcome
from ...types import SaslCode
from ..oauth import TokenGrant, TokenLogin, TokenValidator

__all__ = ["Logins"]


class Logins:
    """One listener's login rules.

    ``users`` checks PLAIN/AMQPLAIN logins (None: no users file). With
    ``allow_anonymous``, ``guest``/``guest`` logs in as the anonymous user
    (RabbitMQ's default user), unless the users file has a ``guest`` of its own.
    ``tls_identity`` (a verified client certificate's subject) is what
    EXTERNAL logs in as. With ``tokens``, a password that is a valid OAuth 2 token logs
    in as its user, whatever the user name (:attr:`grant`: what it allows).
    """

    def __init__(
        self,
        users: CredentialStore | None,
        allow_anonymous: bool,
        tls_identity: str | None,
        tokens: TokenValidator | None = None,
    ) -> None:
        self.users = users
        self.allow_anonymous = allow_anonymous
        self.tls_identity = tls_identity
        self._tokens = None if tokens is None else TokenLogin(tokens)

    @property
    def grant(self) -> TokenGrant | None:
        """What the token of a token login allows (None: the login was not with a token)."""
        return None if self._tokens is None else self._tokens.grant

    def check(self, mechanism: str, username: str | None, password: str | None) -> tuple[bool, str | None]:
        """(ok, user): the login checked against the users file (None user: anonymous)."""
        if mechanism == "EXTERNAL":
            return self.tls_identity is not None, self.tls_identity
        if username is None or password is None:
            return False, None
        if self._tokens is not None and username and password:
            identity = self._tokens(username, password)
            if identity is not None:
                return True, identity
        if self.users is not None and username and password:
            try:
                outcome = PlainServer(self.users).step(plain_response(username, password))
            except Exception:  # a malformed name: refused like a wrong password
                outcome = None
            if isinstance(outcome, ServerOutcome) and outcome.code == SaslCode.OK:
                return True, outcome.identity
        if self.allow_anonymous and username == "guest" and password == "guest":
            if self.users is None or not any(
                self.users.lookup("guest", mech) is not None
                for mech in PlainServer._LOOKUP_ORDER
            ):
                return True, None
        return False, None
