"""What the 0-10 engine tells its application (the broker's front end)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codec import SequenceSet
from .model import Compound

__all__ = [
    "CommandReceived",
    "ConnectionEnded",
    "ConnectionOpened",
    "Event",
    "LoginRequested",
    "OpenRequested",
    "SecureResponse",
    "SessionAttached",
    "SessionDetached",
    "TransfersCompleted",
]


class Event:
    """Base of the engine's events."""

    __slots__ = ()


@dataclass(slots=True)
class LoginRequested(Event):
    """``connection.start-ok``: answer with ``accept_login``, ``challenge`` or ``reject_login``."""

    mechanism: str
    response: bytes
    client_properties: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SecureResponse(Event):
    """``connection.secure-ok``: the answer to a ``challenge``."""

    response: bytes


@dataclass(slots=True)
class OpenRequested(Event):
    """``connection.open``: answer with ``accept_open`` or ``refuse_open``."""

    virtual_host: str


@dataclass(slots=True)
class ConnectionOpened(Event):
    """``connection.open-ok`` went out: sessions may attach."""


@dataclass(slots=True)
class SessionAttached(Event):
    """A session attached on ``channel``: a new one, or (``resumed``) one the application
    kept, offered back through :attr:`~.connection.Connection.resumable`."""

    channel: int
    name: bytes
    resumed: bool = False


@dataclass(slots=True)
class SessionDetached(Event):
    """The session on ``channel`` ended (detached by either side, or by an error)."""

    channel: int
    name: bytes


@dataclass(slots=True)
class CommandReceived(Event):
    """A command for the application (``command.id`` its id in the session): carry it
    out, then ``complete`` it (or ``exception``)."""

    channel: int
    command: Compound


@dataclass(slots=True)
class TransfersCompleted(Event):
    """The peer completed these of the commands sent to it (``session.completed``)."""

    channel: int
    commands: SequenceSet


@dataclass(slots=True)
class ConnectionEnded(Event):
    """The connection is over: closed by either side (``code`` 200: normally), or the stream ended."""

    code: int
    text: str
