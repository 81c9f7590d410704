"""The exceptions the library raises to applications (I/O driver and client API).

Every exception carries the AMQP ``condition`` and ``description`` when the
failure came with an AMQP ``error`` (a close, end or detach from the peer, or
one our engine sent), and reads as one line: ``str(exc)`` says what failed,
where, and why.

``ConnectionError`` and ``TimeoutError`` also derive from the built-in
exceptions of the same names, so ``except OSError`` / ``except TimeoutError``
keep working around network code.
"""

from __future__ import annotations

import builtins
from typing import Any, Self, TypedDict, Unpack

from .types import Error

__all__ = [
    "AMQPError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "ConnectError",
    "ConnectionClosed",
    "ConnectionError",
    "DeliveryError",
    "ForbiddenError",
    "IllegalStateError",
    "LinkDetached",
    "LinkError",
    "ManagementError",
    "NotFoundError",
    "ReconnectError",
    "SessionError",
    "TLSError",
    "TimeoutError",
]


class ErrorFields(TypedDict, total=False):
    """The AMQP error fields every exception takes as keywords (see :class:`AMQPError`)."""

    condition: str | None
    description: str | None
    info: dict[Any, Any] | None


class AMQPError(Exception):
    """Base class of the library's exceptions.

    ``condition`` is the AMQP error condition (a symbol such as
    ``amqp:not-found``) or None; ``description`` the peer's (or our) text;
    ``info`` the error's info map.
    """

    condition: str | None
    description: str | None
    info: dict[Any, Any] | None

    def __init__(
        self,
        message: str,
        *,
        condition: str | None = None,
        description: str | None = None,
        info: dict[Any, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.condition = None if condition is None else str(condition)
        self.description = description
        self.info = info

    @classmethod
    def from_error(cls, what: str, error: Error | None, default: str = "") -> Self:
        """``what: condition: description`` from an AMQP error (``default`` if none)."""
        if error is None:
            return cls(f"{what}{': ' + default if default else ''}")
        cond = str(error.condition)
        text = f"{what}: {cond}"
        if error.description:
            text += f": {error.description}"
        return cls(text, condition=cond, description=error.description, info=error.info)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConnectionError(AMQPError, builtins.ConnectionError):
    """The connection could not be used: closed by the peer, lost, or refused."""

    def __init__(self, message: str, **kwargs: Unpack[ErrorFields]) -> None:
        AMQPError.__init__(self, message, **kwargs)


class ConnectError(ConnectionError):
    """The TCP connection could not be established (refused, unreachable, no such host)."""


class ReconnectError(ConnectError):
    """Connecting (or reconnecting after a drop) gave up: the policy's attempts or time ran out.

    ``attempts`` and ``elapsed`` say how hard it tried; ``last_error`` (also the
    ``__cause__``) is the failure of the last attempt.
    """

    attempts: int
    elapsed: float
    last_error: BaseException | None

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        elapsed: float = 0.0,
        last_error: BaseException | None = None,
        **kwargs: Unpack[ErrorFields],
    ) -> None:
        super().__init__(message, **kwargs)
        self.attempts = attempts
        self.elapsed = elapsed
        self.last_error = last_error


class TLSError(ConnectionError):
    """The TLS handshake failed (certificate not trusted, wrong host name, bad protocol)."""


class AuthenticationError(ConnectionError):
    """The peer refused the SASL login (or offered no mechanism we can use)."""


class ConnectionClosed(ConnectionError):
    """The connection was closed (by us or, cleanly, by the peer): nothing more can be done on it."""


class SessionError(AMQPError):
    """A session ended: refused or ended by the peer, or torn down by a protocol error."""


class LinkError(AMQPError):
    """A link could not be attached, or was detached with an error."""


class LinkDetached(LinkError):
    """The link was detached or closed (without an error, or by us)."""


class TimeoutError(AMQPError, builtins.TimeoutError):
    """An operation did not finish within its timeout."""

    def __init__(self, message: str, **kwargs: Unpack[ErrorFields]) -> None:
        AMQPError.__init__(self, message, **kwargs)


class IllegalStateError(AMQPError, RuntimeError):
    """The object's state does not allow the call (e.g. settling a delivery twice)."""


class DeliveryError(AMQPError):
    """A message was not accepted by the peer (rejected, released or modified).

    ``outcome`` is the peer's outcome (``Rejected(...)``, ``Released()``, ...).
    """

    outcome: object

    def __init__(self, message: str, *, outcome: object = None, **kwargs: Unpack[ErrorFields]) -> None:
        super().__init__(message, **kwargs)
        self.outcome = outcome


class ManagementError(AMQPError):
    """A management request the peer refused (:meth:`amqp10.client.Connection.management`).

    ``status`` is the peer's status code (HTTP's: RabbitMQ 4's ``subject``, the OASIS
    draft's ``statusCode``) and ``description`` its reason. The common codes have
    subclasses: 400 :class:`BadRequestError`, 403 :class:`ForbiddenError`, 404
    :class:`NotFoundError`, 409 :class:`ConflictError`; :meth:`for_status` picks one.
    """

    status: int

    def __init__(self, message: str, *, status: int = 500, **kwargs: Unpack[ErrorFields]) -> None:
        super().__init__(message, **kwargs)
        self.status = status

    @classmethod
    def for_status(cls, status: int, description: str, what: str) -> ManagementError:
        """The exception for a refusal of ``what`` with ``status`` and ``description``."""
        kind = _BY_STATUS.get(status, ManagementError)
        return kind(f"{what}: {status} {description}", status=status, description=description)


class BadRequestError(ManagementError):
    """400: the request was malformed (a bad name, body or argument)."""


class ForbiddenError(ManagementError):
    """403: the user may not do this (permissions, a reserved ``amq.`` name, the default exchange)."""


class NotFoundError(ManagementError):
    """404: no such queue, exchange or binding."""


class ConflictError(ManagementError):
    """409: it exists with other properties (RabbitMQ's precondition-failed)."""


_BY_STATUS: dict[int, type[ManagementError]] = {
    400: BadRequestError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
}
