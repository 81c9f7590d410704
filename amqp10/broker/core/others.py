"""The broker's other processes (``workers`` > 1), asked about what a part above the core keeps.

Some state of a front end lives in the process that made it (0-10's ``dtx`` branches are
kept by the worker whose session did their work), yet a client on any process may name it.
Such a part registers the questions it answers in :attr:`Broker.questions
<amqp10.broker.core.Broker.questions>` (by name: ``run(args, reply)``, which replies
once, now or later); a process that lacks what a client names puts the question to every
other one with :attr:`Broker.others <amqp10.broker.core.Broker.others>` (set by
``broker/workers/others.py``; None with one process). Arguments and answers are JSON
values (a mapping, lists, strings, numbers, None).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["Others", "Question"]

Question = Callable[[Mapping[str, Any], Callable[[Any], None]], None]
"""A question a part above the core answers the other processes: ``run(args, reply)``;
``reply(None)``: nothing of it here."""


class Others(Protocol):
    """The broker's other processes."""

    count: int
    """How many there are (so an asker knows when every one answered)."""

    def ask(self, op: str, args: Mapping[str, Any], answered: Callable[[list[Any]], None]) -> None:
        """Put question ``op`` with ``args`` to every other process; ``answered`` (later,
        from the event loop) with their answers that are not None. A process that does not
        answer in time is left out."""
        ...
