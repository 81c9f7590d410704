"""The other workers, asked what a part above the core keeps (:mod:`amqp10.broker.core.others`).

Installed as :attr:`Broker.others <amqp10.broker.core.Broker.others>`: a question of a
front end (0-10's ``dtx`` branches: which worker holds one, its prepare, commit or
rollback there; the prepared ones of every worker) goes to each other worker over the
control links (:mod:`.control`) as the control operation :data:`QUESTION`, which that
worker answers with the front end's registered :attr:`Broker.questions
<amqp10.broker.core.Broker.questions>` (None when it has no such question). A worker
that does not answer within the control links' bound is left out, as for management.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core import Broker
from ..management import ManagementError
from .control import ControlPoint

__all__ = ["QUESTION", "OtherWorkers"]

log = logging.getLogger("amqp10.broker.workers")

QUESTION = "front-end-question"
"""The control operation that carries a front end's question: ``{"op": name, "args": ...}``."""


class OtherWorkers:
    """One worker's side of the front ends' questions: asking the others, and answering."""

    def __init__(self, broker: Broker, point: ControlPoint) -> None:
        self.broker = broker
        self.point = point
        self.count = point.workers - 1
        """:attr:`amqp10.broker.core.others.Others.count`."""
        self._asking: set[asyncio.Future[None]] = set()  # (kept until done)

    def install(self, ops: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]) -> None:
        """Be the broker's :attr:`~amqp10.broker.core.Broker.others`, and answer theirs
        (``ops``: the control operations this worker answers)."""
        self.broker.others = self
        ops[QUESTION] = self.answer

    def ask(self, op: str, args: Mapping[str, Any], answered: Callable[[list[Any]], None]) -> None:
        """:meth:`amqp10.broker.core.others.Others.ask`."""
        future = asyncio.ensure_future(self._ask(op, args, answered))
        self._asking.add(future)
        future.add_done_callback(self._asking.discard)

    async def _ask(self, op: str, args: Mapping[str, Any], answered: Callable[[list[Any]], None]) -> None:
        try:
            answers = await self.point.ask_others(QUESTION, {"op": op, "args": dict(args)})
        except ManagementError as exc:  # (refused: not one of ours)
            log.warning("asking the other workers %s: %s", op, exc)
            answers = {}
        answered([a for _, a in sorted(answers.items()) if a is not None])

    async def answer(self, args: Mapping[str, Any]) -> Any:
        """Another worker asks: the registered question's reply (None: no such question here)."""
        run = self.broker.questions.get(str(args.get("op")))
        if run is None:
            return None
        replied: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def reply(value: Any) -> None:
            if not replied.done():
                replied.set_result(value)

        run(args.get("args") or {}, reply)
        return await replied
