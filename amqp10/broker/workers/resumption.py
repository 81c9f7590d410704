"""Link resumption across workers: a link resumed on another worker than the one it was lost on.

A lost link's state is a :class:`~amqp10.broker.core.SuspendedLink` in the
:class:`~amqp10.broker.core.LinkRecovery` of the worker that served it. A resuming attach
(one carrying an unsettled map) that the kernel gives to another worker finds no record
there; that worker asks the others (:meth:`LinksElsewhere.ask`, installed as
``LinkRecovery.elsewhere``) with a ``take-link`` question on the control links
(:mod:`.control`), and its 1.0 front end answers the attach once they answered. The
worker that holds the record waits until its store has committed what came before (a
message received before the loss is then accepted in the record, as a resume there would
find it), takes it (``LinkRecovery.hand_over``) and hands it over, AMQP-encoded:

- a producer's as its unsettled map (tag -> the broker's state), which the new link
  resumes with: the client resends exactly what one broker would have asked for;
- a consumer's (its queue is that worker's: only a local queue's consumer is suspended)
  as its unsettled deliveries (tag, the bytes sent, states) and their messages, which
  stay acquired there, now held for the asking worker as a ``basic.get``'s are
  (``NodeServer.hand_out``: a reference each); the asking worker's stand-in for the queue
  takes them (``RemoteNode.taken_over``), so the resumed link's outcomes for them reach
  the queue as any remote consumer's do, and the engine reconciles and resends them as
  on one broker.

A worker that does not answer within the control links' bound is left out: the link is
resumed with what the others answered (nothing: as for a record that expired). A
record that cannot be handed over (another address; no internal link up to the asking
worker) is dropped: its messages go back to their queue.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...types import DecodeError, Role, codec
from ..core import Broker, Queue
from ..core.recovery import HandedOver, LinkKey, Unsettled, unsettled_map
from ..management import ManagementError
from .control import ControlPoint
from .link import RecordError, decode_record, encode_record
from .peers import Peers
from .remote import RemoteNode

__all__ = ["TAKE_LINK", "LinksElsewhere"]

log = logging.getLogger("amqp10.broker.workers")

TAKE_LINK = "take-link"
"""The control question for a suspended link's record."""


class LinksElsewhere:
    """One worker's side of link resumption across workers: asking, and answering."""

    def __init__(self, broker: Broker, point: ControlPoint, peers: Peers) -> None:
        self.broker = broker
        self.point = point
        self.peers = peers
        self._asking: set[asyncio.Future[None]] = set()  # (kept until done)

    def install(self, ops: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]) -> None:
        """Ask the other workers for the records this one lacks, and answer theirs (``ops``:
        the control operations this worker answers)."""
        self.broker.recovery.elsewhere = self.ask
        ops[TAKE_LINK] = self.answer

    # -- asking ---------------------------------------------------------------------------------
    def ask(self, key: LinkKey, address: str | None, answered: Callable[[Unsettled | None], None]) -> None:
        """Ask every other worker for the record of ``key``; ``answered`` gets the unsettled
        deliveries one handed over (None: none did)."""
        container, name, role = key
        args = {"worker": self.peers.me, "container": container, "name": name, "role": int(role), "address": address}
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
        for worker, handed in answers.items():
            if not isinstance(handed, dict):
                continue
            try:
                unsettled = self._taken(handed)
            except (DecodeError, RecordError, ValueError, KeyError, TypeError) as exc:
                log.warning("worker %d handed over a link record that does not decode: %s", worker, exc)
        answered(unsettled)

    def _taken(self, handed: Mapping[str, Any]) -> Unsettled:
        """The unsettled deliveries of a record another worker handed over: a producer's
        states; a consumer's deliveries, their messages settled through their queue's
        stand-in here (the other worker holds them for this one, as a get's)."""
        value = codec.decode(base64.b64decode(handed["deliveries"]))
        if handed.get("kind") != "consumer":
            return {bytes(tag): state for tag, state in value.items()}
        placement = self.broker.placement
        node = None if placement is None else placement(str(handed["vhost"]), str(handed["queue"]))
        if not isinstance(node, RemoteNode):
            raise ValueError(f"no stand-in here for queue {handed['queue']!r}")
        out: Unsettled = {}
        for tag, payload, message_format, state, remote_state, ref, record in value:
            msg = decode_record(bytes(record))
            node.taken_over(msg, int(ref))
            out[bytes(tag)] = HandedOver(bytes(tag), bytes(payload), int(message_format), state, remote_state, msg)
        return out

    # -- answering ------------------------------------------------------------------------------
    async def answer(self, args: Mapping[str, Any]) -> dict[str, Any] | None:
        """Another worker resumes a link: hand over the record of it this one keeps, once
        the store has committed what came before (None: none here)."""
        await self.broker.committed()
        recovery = self.broker.recovery
        key = (str(args["container"]), str(args["name"]), Role(int(args["role"])))
        address = args.get("address")
        record = recovery.hand_over(key, None if address is None else str(address))
        if record is None:
            return None
        if record.consumer is None:  # a producer's: our states
            return {"kind": "producer", "deliveries": _encoded(unsettled_map(record))}
        q = record.node
        server = self.peers.server_for(int(args["worker"]))
        if server is None or not isinstance(q, Queue):
            recovery.drop_handed(record)  # (its messages go back to the queue)
            return None
        entries = []
        in_flight = dict(record.consumer.in_flight)
        for d in record.deliveries:
            msg = in_flight.pop(bytes(d.tag), None)
            if d.settled or msg is None:
                continue
            ref = server.hand_out(q, msg)  # the other worker's now, settled there by ``ref``
            entries.append(
                [bytes(d.tag), bytes(d.payload), d.message_format, d.state, d.remote_state, ref, encode_record(msg)]
            )
        for msg in in_flight.values():  # (none: each has its delivery)
            q.release(msg, delivery_failed=True)
        return {"kind": "consumer", "vhost": q.vhost, "queue": q.name, "deliveries": _encoded(entries)}


def _encoded(value: Any) -> str:
    return base64.b64encode(codec.encode(value)).decode()
