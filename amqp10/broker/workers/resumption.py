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
- a consumer's as its unsettled deliveries (tag, the bytes sent, states) and their
  messages, which stay acquired on the queue's owner, now held there for the asking
  worker, each under a reference (the answer names the owner):

  - a consumer of the holder's own queue: its messages are held for the asker as a
    ``basic.get``'s are (``NodeServer.hand_out``); the asker's stand-in for the queue
    takes them (``RemoteNode.taken_over``);
  - a consumer of a queue another worker owns (its stand-in kept what it held acquired
    on the owner): the holder asks the owner, on the internal link, after the outcomes
    it sent before (:data:`HAND_OVER`), to move those messages from its consumer there
    to the asker: held for it as a ``basic.get``'s, or, when the asker is the owner,
    kept here until the asker's answer claims them (:meth:`LinksElsewhere.hand_out`);

  so the resumed link's outcomes reach the queue as any consumer's do, and the engine
  reconciles and resends as on one broker.

A worker that does not answer within the control links' bound is left out: the link is
resumed with what the others answered (nothing: as for a record that expired). A
record that cannot be handed over (another address; no internal link up to the asking
worker, or to the queue's owner) is dropped: its messages go back to their queue.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from ...types import DecodeError, Role, codec
from ..core import Broker, Node, Queue, QueuedMessage, VirtualHost
from ..core.recovery import HandedOver, LinkKey, SuspendedLink, Unsettled, unsettled_map
from ..management import ManagementError
from .control import ASK_SECONDS, ControlPoint
from .link import RecordError, decode_record, encode_record
from .owner import NodeServer
from .peers import Peers
from .remote import RemoteNode, worker_of

__all__ = ["HAND_OVER", "KEPT_SECONDS", "TAKE_LINK", "LinksElsewhere"]

log = logging.getLogger("amqp10.broker.workers")

TAKE_LINK = "take-link"
"""The control question for a suspended link's record."""
HAND_OVER = "hand-over"
"""The question to a queue's owner, on the internal link, that moves what a consumer of it
lost on the asking worker held there to the worker that resumes it: ``[worker, consumer
id, reference, ...]``, answered with the reference of each there (0: no longer held)."""
KEPT_SECONDS = 2 * ASK_SECONDS
"""How long an owner keeps the messages handed over to itself for the answer that claims
them (the asker waited at most :data:`~.control.ASK_SECONDS` for it): then they go back."""


class LinksElsewhere:
    """One worker's side of link resumption across workers: asking, and answering."""

    def __init__(self, broker: Broker, point: ControlPoint, peers: Peers) -> None:
        self.broker = broker
        self.point = point
        self.peers = peers
        self._asking: set[asyncio.Future[None]] = set()  # (kept until done)
        self._kept: dict[int, tuple[Node, QueuedMessage]] = {}
        """Messages of our queues handed over to this worker's resuming link, by reference,
        until its answer claims them."""
        self._refs = itertools.count(1)

    def install(self, ops: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]) -> None:
        """Ask the other workers for the records this one lacks, and answer theirs (``ops``:
        the control operations this worker answers); move, as a queue's owner, what another
        worker's lost consumer held here (:data:`HAND_OVER`)."""
        self.broker.recovery.elsewhere = self.ask
        ops[TAKE_LINK] = self.answer
        self.peers.answer(HAND_OVER, self._move)

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
        states; a consumer's deliveries, their messages held for this worker by the queue's
        owner: settled through its stand-in here, or, when this worker owns the queue,
        those it kept (:meth:`hand_out`)."""
        value = codec.decode(base64.b64decode(handed["deliveries"]))
        if handed.get("kind") != "consumer":
            return {bytes(tag): state for tag, state in value.items()}
        stand_in: RemoteNode | None = None  # (None: this worker owns the queue)
        if int(handed["owner"]) != self.peers.me:
            placement = self.broker.placement
            node = None if placement is None else placement(str(handed["vhost"]), str(handed["queue"]))
            if not isinstance(node, RemoteNode):
                raise ValueError(f"no stand-in here for queue {handed['queue']!r}")
            stand_in = node
        out: Unsettled = {}
        for tag, payload, message_format, state, remote_state, ref, record in value:
            if stand_in is None:
                kept = self._kept.pop(int(ref), None)
                if kept is None:  # (too late: back on the queue)
                    continue
                msg = kept[1]
            else:
                msg = decode_record(bytes(record))
                stand_in.taken_over(msg, int(ref))
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
        asker = int(args["worker"])
        q = record.node
        if isinstance(q, RemoteNode) and q.unavailable is None:  # a consumer of another worker's queue
            owner = worker_of(self.peers.links, q)
            held = _held(record)
            refs = await self._moved(q, asker, [msg for _, msg in held])
        elif isinstance(q, Queue) and self.peers.server_for(asker) is not None:
            owner = self.peers.me
            held = _held(record)
            refs = [self.hand_out(asker, q, msg) for _, msg in held]
        else:
            recovery.drop_handed(record)  # (its messages go back to the queue)
            return None
        entries = [
            [bytes(d.tag), bytes(d.payload), d.message_format, d.state, d.remote_state, ref, encode_record(msg)]
            for (d, msg), ref in zip(held, refs, strict=True)
            if ref
        ]
        return {"kind": "consumer", "vhost": q.vhost, "queue": q.name, "owner": owner, "deliveries": _encoded(entries)}

    async def _moved(self, q: RemoteNode, asker: int, msgs: Sequence[QueuedMessage]) -> list[int]:
        """Ask ``q``'s owner to move the messages of it that this worker's lost consumer
        held (``msgs``) to worker ``asker``: their references there (0: not moved; those
        go back to the queue). The question goes after the outcomes sent so far, on the
        one internal link; what this worker holds of them is forgotten once it is answered
        (so the feed's link, closed once it holds nothing, releases none of them)."""
        held = [(msg, q.held_ref(msg)) for msg in msgs]
        asked = [(msg, ref) for msg, ref in held if ref is not None]
        moved: list[int] = []
        if asked:
            answer: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()

            def replied(error: str | None, text: str, values: list[Any]) -> None:
                if error is not None:
                    log.warning("the owner of %r did not hand over what a lost consumer held: %s", q.name, text)
                if not answer.done():
                    answer.set_result([] if error is not None else [int(v) for v in values])

            pairs = [n for _, ref in asked for n in ref]
            q.via.ask(q, [HAND_OVER, q.vhost, q.name, asker, *pairs], replied)
            with anyio.move_on_after(ASK_SECONDS):
                moved = await answer
        if len(moved) != len(asked):
            moved = [0] * len(asked)
        refs = dict(zip((id(msg) for msg, _ in asked), moved, strict=True))
        out = []
        for msg in msgs:
            ref = refs.get(id(msg), 0)
            if ref:
                q.forget_held(msg)  # (the asker's now)
            else:
                q.release(msg, delivery_failed=True)  # (if the owner still holds it for us)
            out.append(ref)
        return out

    def _move(self, server: NodeServer, vhost: VirtualHost, args: list[Any]) -> list[Any]:
        """:data:`HAND_OVER`, from the worker ``server`` serves: what its lost consumer (or
        its ``basic.get``) held of our queue, by (consumer id, reference), held for worker
        ``args[1]`` now: its reference there, each (0: no longer held here)."""
        _, asker, *pairs = args
        moved = []
        for i in range(0, len(pairs) - 1, 2):
            held = server.delivered(int(pairs[i]), int(pairs[i + 1]), forget=True)
            moved.append(0 if held is None else self.hand_out(int(asker), *held))
        return moved

    def hand_out(self, worker: int, node: Node, msg: QueuedMessage) -> int:
        """``msg``, acquired on our ``node``, is held for worker ``worker``'s resumed link now:
        its reference, which that worker's outcome (or its claim, :meth:`_taken`, when it
        is this one) names (0: no internal link up to it: the message goes back)."""
        if worker == self.peers.me:
            ref = next(self._refs)
            self._kept[ref] = (node, msg)
            asyncio.get_running_loop().call_later(KEPT_SECONDS, self._unclaimed, ref)
            return ref
        server = self.peers.server_for(worker)
        if server is None:
            node.release(msg, delivery_failed=True)
            return 0
        return server.hand_out(node, msg)

    def _unclaimed(self, ref: int) -> None:
        kept = self._kept.pop(ref, None)
        if kept is not None:
            node, msg = kept
            log.info("a message handed over for a resumed link was not claimed: back to %r", node.name)
            node.release(msg, delivery_failed=True)


def _held(record: SuspendedLink) -> list[tuple[Any, QueuedMessage]]:
    """A consumer's record's unsettled deliveries, each with its message (what its consumer
    held without a delivery goes back to the queue: none should)."""
    assert record.consumer is not None
    in_flight = dict(record.consumer.in_flight)
    held = []
    for d in record.deliveries:
        msg = in_flight.pop(bytes(d.tag), None)
        if not d.settled and msg is not None:
            held.append((d, msg))
    for msg in in_flight.values():
        record.node.release(msg, delivery_failed=True)
    return held


def _encoded(value: Any) -> str:
    return base64.b64encode(codec.encode(value)).decode()
