"""Link resumption across workers: a link resumed on another worker than the one it was lost on.

A lost link's state is a :class:`~amqp10.broker.core.SuspendedLink` in the
:class:`~amqp10.broker.core.LinkRecovery` of the worker that served it. A resuming attach
(one carrying an unsettled map) that the kernel gives to another worker finds no record
there; that worker asks the others (:meth:`LinksElsewhere.ask`, installed as
``LinkRecovery.elsewhere``) with a ``take-link`` question on the control links
(:mod:`.control`), and its front end answers the attach once they answered:

- the worker that holds the record waits until its store has committed what came before
  (a message received before the loss is then accepted in the record, as a resume on that
  worker would find it), takes it and hands it over (``LinkRecovery.hand_over``): a
  producer's as its unsettled map (tag -> the broker's state), AMQP-encoded, which the new
  link resumes with, so the client resends exactly what one broker would have asked for;
  a consumer's record is dropped there (its messages go back to their queue and are
  redelivered: at least once, no loss) and nothing comes back;
- a worker that does not answer within the control links' bound is left out: the link
  is resumed with what the others answered (nothing: an empty map, as for a record that
  expired).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...types import DecodeError, Role, codec
from ..core import Broker
from ..core.recovery import LinkKey, Unsettled
from ..management import ManagementError
from .control import ControlPoint

__all__ = ["TAKE_LINK", "LinksElsewhere"]

log = logging.getLogger("amqp10.broker.workers")

TAKE_LINK = "take-link"
"""The control question for a suspended link's record."""


class LinksElsewhere:
    """One worker's side of link resumption across workers: asking, and answering."""

    def __init__(self, broker: Broker, point: ControlPoint) -> None:
        self.broker = broker
        self.point = point
        self._asking: set[asyncio.Future[None]] = set()  # (kept until done)

    def install(self, ops: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]) -> None:
        """Ask the other workers for the records this one lacks, and answer theirs (``ops``:
        the control operations this worker answers)."""
        self.broker.recovery.elsewhere = self.ask
        ops[TAKE_LINK] = self.answer

    def ask(self, key: LinkKey, address: str | None, answered: Callable[[Unsettled | None], None]) -> None:
        """Ask every other worker for the record of ``key``; ``answered`` gets a producer's
        unsettled map (None: no worker had one to hand over)."""
        container, name, role = key
        args = {"container": container, "name": name, "role": int(role), "address": address}
        future = asyncio.ensure_future(self._ask(args, answered))
        self._asking.add(future)
        future.add_done_callback(self._asking.discard)

    async def _ask(self, args: dict[str, Any], answered: Callable[[Unsettled | None], None]) -> None:
        unsettled: Unsettled | None = None
        try:
            answers = await self.point.ask_others(TAKE_LINK, args)
        except ManagementError as exc:  # (not one of ours: an older worker)
            log.warning("asking for a suspended link: %s", exc)
            answers = {}
        for worker, encoded in answers.items():
            if encoded is None:
                continue
            try:
                value = codec.decode(base64.b64decode(encoded))
            except (DecodeError, ValueError) as exc:
                log.warning("worker %d handed over a link record that does not decode: %s", worker, exc)
                continue
            if isinstance(value, dict):
                unsettled = {bytes(tag): state for tag, state in value.items()}
        answered(unsettled)

    async def answer(self, args: Mapping[str, Any]) -> str | None:
        """Another worker resumes a link: hand over the record of it this one keeps, once
        the store has committed what came before (None: none here)."""
        await self.broker.committed()
        key = (str(args["container"]), str(args["name"]), Role(int(args["role"])))
        address = args.get("address")
        unsettled = self.broker.recovery.hand_over(key, None if address is None else str(address))
        if unsettled is None:
            return None
        return base64.b64encode(codec.encode(unsettled)).decode()
