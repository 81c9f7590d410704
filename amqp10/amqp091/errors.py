"""Errors that carry a reply code, and reply texts in RabbitMQ's form.

Applications (and client libraries' tests) match on RabbitMQ's reply texts,
``"NOT_FOUND - no queue 'x' in vhost '/'"``: the code's name, `` - ``, then the
explanation. ``reply_text`` builds that form; ``not_found`` and friends are
RabbitMQ's most common explanations.
"""

from __future__ import annotations

from .methods import HARD_ERRORS, ReplyCode

__all__ = [
    "AMQPError",
    "ChannelException",
    "ConnectionException",
    "IllegalStateError",
    "not_found",
    "reply_text",
]


def reply_text(code: int, explanation: str) -> str:
    """``NOT_FOUND - explanation`` (RabbitMQ's form); 200 is ``"OK"`` without an explanation."""
    if code == 200 and not explanation:
        return "OK"
    try:
        name = ReplyCode(code).name
    except ValueError:
        return explanation
    return f"{name} - {explanation}"


def not_found(kind: str, name: str, vhost: str) -> str:
    """``NOT_FOUND - no queue 'x' in vhost '/'`` (``kind``: queue, exchange)."""
    return reply_text(ReplyCode.NOT_FOUND, f"no {kind} '{name}' in vhost '{vhost}'")


class IllegalStateError(Exception):
    """The application asked for something the engine's state does not allow.

    Raised before anything changes.
    """


class AMQPError(Exception):
    """A protocol error with its reply code; ``class_id``/``method_id`` name the failing method.

    Inside the engine it becomes a ``channel.close`` (soft errors) or a
    ``connection.close`` (hard errors); it never escapes ``receive_data``.
    """

    def __init__(
        self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        super().__init__(reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def hard(self) -> bool:
        """A connection-level error (the spec's ``hard-error``)."""
        return self.reply_code in HARD_ERRORS


class ConnectionException(AMQPError):
    """A connection exception (the spec's term): it closes the connection."""


class ChannelException(AMQPError):
    """A channel exception: it closes one channel."""
