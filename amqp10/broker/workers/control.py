"""Requests between workers: the control links that management of the whole broker asks over.

``$management``, the HTTP API, the console and ``/metrics`` show the whole broker at
``workers`` > 1: the worker that takes the request asks every other worker and merges
the answers (:mod:`.whole`). This module carries the questions:

- every worker listens on ``<data dir>/workers/<K>.control.sock`` (:class:`ControlPoint`),
  and answers each request with its ``answer`` function (async: a ``/metrics`` scrape may
  write its text in a thread);
- a question is one short-lived internal link (:class:`~.link.InternalLink`: our own
  AMQP 1.0 engine over the Unix socket, as the node links): the asking side opens the
  connection, a session, a receiver for the answer and a sender that carries the
  request, one pre-settled transfer of :data:`REQUEST_FORMAT`; the answer comes back as
  one transfer of :data:`ANSWER_FORMAT` and the asker closes the link. Management
  requests are rare (a console polls every few seconds, Prometheus every 15 s), so no
  link is kept open or redialled: a worker that does not answer (restarting, stuck) is
  left out of that answer after :data:`ASK_SECONDS`, and said so;
- requests and answers are JSON (the entities are plain values already): a request
  ``{"op": ..., "args": {...}}``; an answer ``{"ok": value}`` or ``{"error": [status,
  description]}`` (a management refusal, raised again on the asking worker).

Bad input on a control link (garbage, a request that does not decode, an answer that
raises) fails that link only, as for the node links.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ...transport import (
    ConnectionOpened,
    ConnectionState,
    DeliveryReceived,
    Event,
    LinkAttached,
    Receiver,
    SessionBegun,
)
from ...types import Source, Target
from ..management import ManagementError, error_of
from .link import InternalLink, listening

__all__ = [
    "ANSWER_FORMAT",
    "ASK_SECONDS",
    "REQUEST_FORMAT",
    "Answer",
    "ControlPoint",
    "Unanswered",
    "ask",
    "control_path",
]

log = logging.getLogger("amqp10.broker.workers")

REQUEST_FORMAT = 0x00A1_0010
"""The message-format of a request on a control link (JSON)."""
ANSWER_FORMAT = 0x00A1_0011
"""The message-format of its answer (JSON)."""
CONTROL_NODE = "$worker-control"
"""The address the asking side's links name."""
ASK_SECONDS = 5.0
"""How long a worker waits for another's answer before it answers without it."""

Answer = Callable[[str, Mapping[str, Any]], Awaitable[Any]]
"""What a worker answers a request with: ``answer(op, args)`` (raises ManagementError to refuse)."""


class Unanswered(Exception):
    """A worker did not answer (not listening, its link failed, or too slow)."""


def control_path(directory: Path, worker: int) -> Path:
    """Where worker ``worker`` listens for the others' requests."""
    return directory / f"{worker}.control.sock"


def _encode(value: Any) -> bytes:
    return json.dumps(value, default=str, separators=(",", ":")).encode()


def _decode(payload: bytes, message_format: int, expected: int) -> Any:
    if message_format != expected:
        raise ValueError(f"a transfer of message-format {message_format:#x} on a control link")
    return json.loads(payload)


class _Answering:
    """The answering side of one control link (a :class:`~.link.LinkHandler`)."""

    def __init__(self, answer: Answer, served: set[InternalLink]) -> None:
        self.answer = answer
        self.served = served
        """The links being served, this one among them until it goes."""
        self.link: InternalLink | None = None
        self.replies: Any = None  # our sender to the asker's receiver
        self.tasks: set[asyncio.Task[None]] = set()

    def started(self, link: InternalLink) -> None:
        self.link = link

    def on_event(self, e: Event) -> None:
        t = type(e)
        if t is ConnectionOpened:
            conn = self.link.connection if self.link is not None else None
            if conn is not None and conn.state is ConnectionState.OPEN_RCVD:
                conn.open()
        elif t is SessionBegun:
            session = e.session  # type: ignore[attr-defined]
            if not session.is_mapped:
                session.begin()
        elif t is LinkAttached:
            link = e.link  # type: ignore[attr-defined]
            link.attach(source=link.remote_source, target=link.remote_target)
            if isinstance(link, Receiver):
                link.flow(1)
            else:
                self.replies = link
        elif t is DeliveryReceived:
            d = e.delivery  # type: ignore[attr-defined]
            request = _decode(d.payload, d.message_format, REQUEST_FORMAT)
            if not isinstance(request, dict) or not isinstance(request.get("op"), str):
                raise ValueError("a control request that is not {op, args}")
            task = asyncio.ensure_future(self._answer(str(request["op"]), request.get("args") or {}))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _answer(self, op: str, args: Mapping[str, Any]) -> None:
        try:
            reply: dict[str, Any] = {"ok": await self.answer(op, args)}
        except ManagementError as exc:
            reply = {"error": [exc.status, exc.description]}
        except Exception as exc:
            log.warning("control request %r failed", op, exc_info=True)
            reply = {"error": [500, f"worker error: {type(exc).__name__}: {exc}"[:500]]}
        link = self.link
        if link is None or link.closed or self.replies is None:
            return
        self.replies.send(_encode(reply), settled=True, message_format=ANSWER_FORMAT)
        link.flush_soon()

    def after_events(self) -> None:
        pass

    def before_write(self) -> None:
        pass

    def lost(self, reason: str) -> None:
        if self.link is not None:
            self.served.discard(self.link)
        for task in self.tasks:
            task.cancel()


class _Asking:
    """The asking side of one control link: sends one request, takes its answer, closes."""

    def __init__(self, container_id: str, request: bytes, answered: asyncio.Future[Any]) -> None:
        self.container_id = container_id
        self.request = request
        self.answered = answered
        self.link: InternalLink | None = None
        self.replies: Receiver | None = None

    def started(self, link: InternalLink) -> None:
        self.link = link
        conn = link.connection
        conn.open()
        session = conn.session()
        session.begin()
        here, there = Source(address=self.container_id), Target(address=CONTROL_NODE)
        self.replies = session.receiver("answers", source=Source(address=CONTROL_NODE), target=Target(address=self.container_id))
        self.replies.attach()
        self.replies.flow(1)
        sender = session.sender("requests", source=here, target=there)
        sender.attach()
        sender.send(self.request, settled=True, message_format=REQUEST_FORMAT)

    def on_event(self, e: Event) -> None:
        if type(e) is DeliveryReceived and e.link is self.replies:
            d = e.delivery
            reply = _decode(d.payload, d.message_format, ANSWER_FORMAT)
            if not self.answered.done():
                self.answered.set_result(reply)
            assert self.link is not None
            self.link.fail("answered")

    def after_events(self) -> None:
        pass

    def before_write(self) -> None:
        pass

    def lost(self, reason: str) -> None:
        if not self.answered.done():
            self.answered.set_exception(Unanswered(reason))


async def ask(path: Path, container_id: str, op: str, args: Mapping[str, Any], *, timeout: float = ASK_SECONDS) -> Any:
    """Ask the worker listening at ``path``; its answer (raises :class:`Unanswered`, or the
    worker's refusal as a :class:`~amqp10.broker.management.ManagementError`)."""
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[Any] = loop.create_future()
    request = _encode({"op": op, "args": dict(args)})
    link: InternalLink | None = None
    try:
        with anyio.fail_after(timeout):
            _, link = await loop.create_unix_connection(
                lambda: InternalLink(_Asking(container_id, request, answered), container_id), path=str(path)
            )
            reply = await answered
    except OSError as exc:
        raise Unanswered(f"not listening: {exc}") from None
    except TimeoutError:
        raise Unanswered(f"no answer in {timeout:g}s") from None
    finally:
        if link is not None:
            link.fail("done")
    if not isinstance(reply, dict):
        raise Unanswered("an answer that is not a map")
    if "error" in reply:
        status, description = reply["error"]
        raise error_of(int(status), str(description))
    return reply.get("ok")


class ControlPoint:
    """Worker ``me`` of ``workers``: answers the others' requests, asks them its own."""

    def __init__(self, workers: int, me: int, directory: Path, answer: Answer) -> None:
        self.workers = workers
        self.me = me
        self.directory = directory
        self.answer = answer
        self.container_id = f"worker-{me}-control"
        self.served: set[InternalLink] = set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Answer on this worker's control socket until cancelled."""
        async with listening(control_path(self.directory, self.me), self._serve_one, self.served):
            task_status.started()
            await asyncio.Event().wait()  # until cancelled

    def _serve_one(self) -> InternalLink:
        link = InternalLink(_Answering(self.answer, self.served), self.container_id)
        self.served.add(link)
        return link

    async def ask_one(self, worker: int, op: str, args: Mapping[str, Any]) -> Any:
        """Worker ``worker``'s answer to ``op`` (its refusal raised; not answering: 503)."""
        try:
            return await ask(control_path(self.directory, worker), self.container_id, op, args)
        except Unanswered as exc:
            raise error_of(503, f"worker {worker} did not answer: {exc}") from None

    async def ask_others(self, op: str, args: Mapping[str, Any]) -> dict[int, Any]:
        """Every other worker's answer to ``op``, by worker; one that did not answer is left
        out (logged). A refusal by another worker is raised."""
        others = [k for k in range(self.workers) if k != self.me]
        answers: dict[int, Any] = {}
        refusal: list[ManagementError] = []

        async def one(k: int) -> None:
            try:
                answers[k] = await ask(control_path(self.directory, k), self.container_id, op, args)
            except Unanswered as exc:
                log.warning("worker %d did not answer %s: %s (left out)", k, op, exc)
            except ManagementError as exc:
                refusal.append(exc)

        async with anyio.create_task_group() as tg:
            for k in others:
                tg.start_soon(one, k)
        if refusal:
            raise refusal[0]
        return answers

