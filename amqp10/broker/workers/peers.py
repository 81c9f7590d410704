"""One worker's internal links to the others: the wiring that makes N workers one broker.

Worker ``me`` of ``workers``:

- listens on a Unix socket of its own, ``<data dir>/workers/<me>.sock``; each worker that
  connects there gets a :class:`~.owner.NodeServer` serving this worker's nodes;
- opens one internal link to every other worker's socket (a :class:`~.remote.RemoteNodes`
  standing in for that worker's nodes), and installs
  :attr:`Broker.placement <amqp10.broker.core.Broker.placement>` =
  ``Placement(Ownership(workers, me), links)``, so the front ends' lookups answer a
  stand-in for every node another worker owns;
- re-opens a link that fails, with a back-off (:data:`REDIAL_FIRST` doubling to
  :data:`REDIAL_MAX`): a restarted worker comes back. Meanwhile what is published to its
  nodes is held for it (``worker_down_hold_messages``/``_bytes``), its publishers
  unanswered, and sent once it is back; if it is not back within ``worker_down_hold``
  seconds, it is refused (a 1.0 publisher's message released, a 0-9-1 publish nacked).
  Consumers of its nodes get nothing meanwhile. A worker that is alive but does not answer
  (stopped, hung) is down the same way: every internal link opens with an idle timeout
  (``worker_link_idle_timeout``), so a link whose peer sends nothing for that long fails,
  and a link is up again only once the peer answers its open (a stopped worker's socket
  still accepts a connection).

:meth:`Peers.run` starts serving, then waits (at most :data:`CONNECT_SECONDS`) until
every link is up before it reports itself started, so a worker's first clients find
the other workers' nodes reachable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ..core import Broker, Topic, VirtualHost
from .link import InternalLink, listening
from .owner import NodeServer
from .ownership import Ownership, Placement, dynamic_prefix, reply_prefix
from .questions import AnswerMemo
from .remote import RemoteNodes
from .transactions import Transactions

__all__ = ["CONNECT_SECONDS", "REDIAL_FIRST", "REDIAL_MAX", "UNSETTLED", "Peers", "socket_path"]

log = logging.getLogger("amqp10.broker.workers")

REDIAL_FIRST = 0.05
REDIAL_MAX = 2.0
"""The back-off between attempts to open an internal link (seconds): doubling from the first to the most."""
CONNECT_SECONDS = 10.0
"""How long a starting worker waits for its links to every other worker before it serves anyway."""
UNSETTLED = "unsettled"
"""The control question (:mod:`.control`) a worker answers with what crosses its internal
links unsettled: ``{"sent": n, "held": n}`` (:meth:`Peers.unsettled`)."""


def container_of(worker: int) -> str:
    """The container-id worker ``worker`` opens its internal links with."""
    return f"worker-{worker}"


def socket_path(directory: Path, worker: int) -> Path:
    """Where worker ``worker`` listens for the internal links of the others."""
    return directory / f"{worker}.sock"


class _Dialled(RemoteNodes):
    """The opening side of the link to one other worker, told when the link goes."""

    def __init__(self, container_id: str, peer: int) -> None:
        super().__init__(container_id)
        self.peer = peer
        self.down = asyncio.Event()
        self.up = asyncio.Event()
        self.answering = asyncio.Event()
        """The worker answered the open of the link now open (cleared when it goes)."""
        self.lost(f"worker {peer} is not connected yet")

    def opened(self) -> None:
        super().opened()
        self.answering.set()

    def lost(self, reason: str) -> None:
        super().lost(reason)
        self.answering.clear()
        self.down.set()

    async def answered(self) -> bool:
        """Wait until the worker answers the link's open (True) or the link goes first (False)."""
        waits = [asyncio.ensure_future(self.answering.wait()), asyncio.ensure_future(self.down.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return self.answering.is_set()


class Peers:
    """The internal links of worker ``me`` of ``workers``, their sockets in ``directory``."""

    def __init__(self, broker: Broker, workers: int, me: int, directory: Path) -> None:
        self.broker = broker
        self.me = me
        self.directory = directory
        self.container_id = container_of(me)
        self.links = {k: _Dialled(self.container_id, k) for k in range(workers) if k != me}
        config = broker.config
        self.idle_timeout = config.worker_link_idle_timeout
        """The idle timeout of every internal link (seconds): a peer silent that long is down."""
        self.hold_seconds = config.worker_down_hold
        """How long the messages for a worker that went down are held for it (:meth:`_dial`)."""
        for nodes in self.links.values():
            nodes.hold_messages = config.worker_down_hold_messages
            nodes.hold_bytes = config.worker_down_hold_bytes
        self.placement = Placement(Ownership(workers, me), self.links)
        self.placement.ownership.changed = broker.placement_changed  # (the virtual hosts keep its answers)
        self.memo = AnswerMemo(broker)
        """The answers this worker remembers, as the owner of nodes (:mod:`.questions`)."""
        self.served: set[InternalLink] = set()
        """The links other workers opened to this one (each served by a NodeServer)."""
        self._questions: dict[str, Callable[[NodeServer, VirtualHost, list[Any]], list[Any]]] = {}
        """Questions about nodes answered on every served link (:meth:`answer`)."""
        self.transactions = Transactions(broker, me, dict(self.links))
        """Transactions over several workers' nodes: this worker's coordinator and owner."""
        self.transactions.serve(self.answer)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve this worker's socket and keep a link open to every other worker, until cancelled."""
        async with listening(socket_path(self.directory, self.me), self._serve_one, self.served):
            self.broker.placement = self.placement
            self.broker.coordinator = self.transactions
            self.broker.dynamic_prefix = dynamic_prefix(self.me)  # (its dynamic nodes are its own)
            self.broker.replies.prefix = reply_prefix(self.me)  # (and its requesters' reply addresses)
            self.broker.copies = self.placement.copies
            for vhost in list(self.broker.vhosts.values()):  # (those recovered before the links)
                for node in list(vhost.nodes.values()):
                    if isinstance(node, Topic):
                        vhost.reach_copies(node)
                        _drop_others_subscriptions(vhost, node)
            dialers = [asyncio.ensure_future(self._dial(nodes)) for nodes in self.links.values()]
            try:
                with anyio.move_on_after(CONNECT_SECONDS):
                    for nodes in self.links.values():
                        await nodes.up.wait()
                missing = [k for k, nodes in self.links.items() if not nodes.up.is_set()]
                if missing:
                    log.warning("serving before the links to workers %s are up (after %gs)", missing, CONNECT_SECONDS)
                task_status.started()
                await asyncio.Event().wait()  # until cancelled
            finally:
                for task in dialers:
                    task.cancel()
                for nodes in self.links.values():
                    if nodes.link is not None:
                        nodes.link.fail("the worker is stopping")

    def server_for(self, worker: int) -> NodeServer | None:
        """The :class:`NodeServer` serving this worker's nodes to ``worker`` (None: its link is not up)."""
        container_id = container_of(worker)
        for link in self.served:
            remote = link.connection.remote_open
            if remote is not None and remote.container_id == container_id and isinstance(link.handler, NodeServer):
                return link.handler
        return None

    def answer(self, op: str, run: Callable[[NodeServer, VirtualHost, list[Any]], list[Any]]) -> None:
        """Answer question ``op`` about our nodes (:meth:`NodeServer.answer`) on every link
        another worker opens to this one, those open now too: ``run(server, vhost, args)``."""
        self._questions[op] = run
        for link in self.served:
            if isinstance(link.handler, NodeServer):
                link.handler.answer(op, partial(run, link.handler))

    def install(self, ops: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]) -> None:
        """Answer :data:`UNSETTLED` among this worker's control operations ``ops``."""

        async def unsettled(args: Mapping[str, Any]) -> dict[str, int]:
            return self.unsettled()

        ops[UNSETTLED] = unsettled

    def unsettled(self) -> dict[str, int]:
        """``sent``: this worker's messages that other workers' consumers hold unsettled;
        ``held``: other workers' messages that this worker's consumers hold unsettled.
        Both are 0 when nothing is unsettled (a browser's copies are not kept)."""
        sent = sum(link.handler.unsettled() for link in self.served if isinstance(link.handler, NodeServer))
        return {"sent": sent, "held": sum(nodes.unsettled() for nodes in self.links.values())}

    def after_publishes(self, then: Callable[[], None]) -> None:
        """Run ``then`` once every other worker has answered what this one published to it
        so far (the dead letters of an outcome applied here, say)."""
        links = list(self.links.values())
        left = len(links)

        def one() -> None:
            nonlocal left
            left -= 1
            if left == 0:
                then()

        if not links:
            then()
        for nodes in links:
            nodes.when_answered(one)

    def _serve_one(self) -> InternalLink:
        """A link another worker opened: this worker's nodes, served to it."""
        server = NodeServer(self.broker)
        server.memo = self.memo
        server.after_publishes = self.after_publishes
        for op, run in self._questions.items():
            server.answer(op, partial(run, server))
        link = _ServedLink(self, server, self.container_id, self.idle_timeout)
        self.served.add(link)
        return link

    async def _dial(self, nodes: _Dialled) -> None:
        """Keep the link to ``nodes.peer`` open: open it, wait until it goes, open it again."""
        loop = asyncio.get_running_loop()
        path = str(socket_path(self.directory, nodes.peer))
        delay = REDIAL_FIRST
        give_up = loop.call_later(self.hold_seconds, nodes.give_up)  # (what is held for it meanwhile)
        try:
            while True:
                nodes.down.clear()
                try:
                    await loop.create_unix_connection(
                        lambda: InternalLink(nodes, self.container_id, idle_timeout=self.idle_timeout), path=path
                    )
                    if not await nodes.answered():  # (stopped: its link timed out unanswered)
                        raise OSError(nodes.reason)
                except OSError as exc:  # not listening yet (starting, or restarting), or not answering
                    log.debug("internal link to worker %d: %s; again in %gs", nodes.peer, exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, REDIAL_MAX)
                    continue
                give_up.cancel()
                delay = REDIAL_FIRST
                log.info("internal link to worker %d is up", nodes.peer)
                nodes.up.set()
                self.transactions.linked(nodes.peer)
                await nodes.down.wait()
                log.warning("internal link to worker %d went (%s): opening it again", nodes.peer, nodes.reason)
                give_up = loop.call_later(self.hold_seconds, nodes.give_up)
        finally:
            give_up.cancel()


class _ServedLink(InternalLink):
    """A link another worker opened to this one; forgotten by its :class:`Peers` when it goes."""

    def __init__(self, peers: Peers, handler: NodeServer, container_id: str, idle_timeout: float) -> None:
        super().__init__(handler, container_id, idle_timeout=idle_timeout)
        self._peers = peers

    def fail(self, reason: str) -> None:
        super().fail(reason)
        self._peers.served.discard(self)


def _drop_others_subscriptions(vhost: VirtualHost, topic: Topic) -> None:
    """A durable subscription is one queue, on the worker that owns its name: the empty ones
    of ``topic``'s copy here whose names another worker owns are dropped before this worker
    serves (a ``[servicebus]`` topic's subscriptions are declared on every worker at start,
    before the links: else each copy's would take a copy of every message, and its
    consumers here would read this one, not the owner's). One holding messages (a store of
    before) is kept."""
    for key, q in list(topic.subscriptions.items()):
        if not q.count and vhost.subscription_elsewhere(topic.name, key) is not None:
            vhost.drop_subscription(topic, q)
