"""Engine exceptions: misuse by the local application, and peer violations."""

from __future__ import annotations

from ..types import Error, ErrorCondition

__all__ = ["AMQPEngineError", "IllegalStateError", "ProtocolViolation"]


class AMQPEngineError(Exception):
    """Base class of the engine's exceptions."""


class IllegalStateError(AMQPEngineError):
    """The application asked for something the endpoint's state does not allow.

    Raised before anything changes: the engine is left as it was.
    """


class ProtocolViolation(AMQPEngineError):
    """A peer broke the protocol; ``scope`` says what must be torn down.

    Raised inside the engine's frame handlers and turned into a close, end or
    detach carrying ``condition`` (never seen by the application as an exception).
    """

    def __init__(
        self,
        condition: ErrorCondition,
        description: str,
        scope: str = "connection",
        target: object = None,
    ) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description
        self.scope = scope  # "connection" | "session" | "link"
        self.target = target  # the Session or Link for narrower scopes

    def to_error(self) -> Error:
        return Error(condition=self.condition, description=self.description)
