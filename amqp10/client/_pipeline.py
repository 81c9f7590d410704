"""The async :meth:`Sender.pipeline <amqp10.client.Sender.pipeline>`'s generator.

Its own module, interpreted: mypyc compiles no async generator, and the compiled build
(setup.py's ``COMPILED``) compiles ``sender.py``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Iterable
from functools import partial
from typing import TYPE_CHECKING

from ._common import Outcome, Payload, windowed

if TYPE_CHECKING:
    from .sender import Sender, Tracker


async def pipeline(
    sender: Sender,
    messages: Iterable[Payload],
    window: int,
    settled: bool | None,
    timeout: float | None,
) -> AsyncGenerator[Outcome | None, None]:
    """``sender``'s :meth:`~amqp10.client.Sender.pipeline` (see there)."""
    in_flight: deque[Tracker] = deque()
    submit = partial(sender.submit, settled=settled)
    try:
        for tracker in windowed(messages, window, submit, in_flight):
            yield await tracker.wait(timeout)
    finally:
        for tracker in in_flight:  # nobody will wait for these: withdraw what did not go out
            sender._withdraw(tracker)
