"""What a management operation answers when it cannot do what was asked: a status code and a reason.

The codes are the OASIS AMQP Management draft's (HTTP's): 400 bad request, 401 no
identity where one is needed, 403 refused, 404 no such entity, 409 exists with other
attributes, 501 an operation or entity type this broker does not offer. Every front
end (``$management`` over AMQP, the web console) shows ``status`` and ``description``
as they are.
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "Conflict",
    "Forbidden",
    "ManagementError",
    "NotImplementedOperation",
    "NotFoundError",
    "Unauthorized",
    "error_of",
]


class ManagementError(Exception):
    """A refused management operation: ``status`` (the draft's code) and a one-line reason."""

    status = 500

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class BadRequest(ManagementError):
    status = 400


class Unauthorized(ManagementError):
    status = 401


class Forbidden(ManagementError):
    status = 403


class NotFoundError(ManagementError):
    status = 404


class Conflict(ManagementError):
    status = 409


class NotImplementedOperation(ManagementError):
    status = 501


def error_of(status: int, description: str) -> ManagementError:
    """The error of ``status`` (a refusal made elsewhere, another worker's, raised again here)."""
    for kind in (BadRequest, Unauthorized, Forbidden, NotFoundError, Conflict, NotImplementedOperation):
        if kind.status == status:
            return kind(description)
    return ManagementError(description)
