"""Metadata the same on every worker: one order, stored before it is answered (issue 31).

Virtual hosts, exchanges, bindings, queues' existence and arguments, policies, users and
permissions are the same on every worker. **The parent is the sequencer**
(:class:`Sequencer`, run inside the supervisor's loop): it is the one process that
outlives the workers.

- A worker makes a change as a broker of one worker does (the core's
  :class:`~amqp10.broker.core.VirtualHost` operations that every front end and management
  go through), and the core tells it to this worker's :class:`SharedMetadata`
  (:attr:`Broker.metadata <amqp10.broker.core.Broker.metadata>`), which sends it to the
  parent over the *control link*: AMQP 1.0 on a Unix socket,
  ``<data dir>/workers/control.sock``, spoken by our engine as the internal links are
  (:class:`~.link.InternalLink`).
- The parent applies it to its own copy of the metadata (a core
  :class:`~amqp10.broker.core.Broker` holding nothing else), where a declaration that is
  not equivalent to what an earlier change declared is refused; otherwise it gives the
  change the next sequence number, commits it to ``metadata.sqlite3`` (beside the
  workers' store files; on PostgreSQL a table in the database, :mod:`.shared_database`)
  and sends it to every worker.
- Each worker applies the changes strictly in sequence order (and stores them in its own
  store file, as its own declarations are) and tells the parent it has. The worker that
  made a change holds every answer that reports a change (:meth:`Broker.after_commit
  <amqp10.broker.core.Broker.after_commit>`: 0-9-1's declare-ok, bind-ok, ``$management``,
  the HTTP API) until the parent says every running worker has applied it: an answered
  change is stored by the parent and made on every worker (a client that goes on to
  another worker finds it there).
- A worker that starts (or restarts after a SIGKILL) recovers its store, then asks for
  the changes after the last number it applied (``<data dir>/workers/<K>.applied``, or on
  PostgreSQL a table beside the log: :class:`AppliedMarks`; written once the worker's
  store has committed that change) and applies them before its
  listeners accept.

Users and permissions live in the users file every worker reads: a change to it (the
HTTP API, ``$management``, an import) is a ``users`` change, and every other worker
reads the file again when it applies it.

With one worker none of this exists: :attr:`Broker.metadata` is None and the core tells
nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import sqlite3
from collections.abc import Callable, Mapping
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
    Sender,
    SessionBegun,
)
from ...types import Source, Target, decode, encode
from ..config import BrokerConfig
from ..core import (
    ArgumentError,
    Binding,
    Broker,
    DefinitionsPort,
    ModelError,
    NotFound,
    PreconditionFailed,
    Queue,
    RuntimePolicy,
    Stream,
    Topic,
    VirtualHost,
)
from ..core.equivalence import check_redeclared
from ..core.store import BARRIER
from ..core.typed_values import carried, restored
from ..topology import LiveDefinitions
from ..users import read_users_file
from .compaction import compacted
from .link import InternalLink
from .ownership import Ownership
from .placing import (
    PLACE,
    PLACEMENT_OPS,
    UNPLACE_WORKER,
    PlacementTaken,
    apply_placement,
    bind_placed,
    check_placement,
    placed_here,
    unbind_unplaced,
)

__all__ = [
    "CONTROL_SOCKET",
    "AppliedMarks",
    "METADATA_FILE",
    "Inequivalent",
    "MetadataLog",
    "Sequencer",
    "SharedMetadata",
    "apply_change",
    "rebind_to_owners",
]

log = logging.getLogger("amqp10.broker.workers")

CONTROL_SOCKET = "control.sock"
"""The parent's control socket, in the workers' socket directory."""
METADATA_FILE = "metadata.sqlite3"
"""The parent's log of every change, beside the workers' store files."""
ADDRESS = "$metadata"
"""The address of both control links (the changes to the parent, the order from it)."""
CREDIT = 1000
"""The credit each end of a control link grants (topped up when half is used)."""
CATCH_UP_SECONDS = 10.0
"""How long a starting worker waits for the parent's changes before it serves anyway."""
SEND_TIMEOUT = 10.0
"""How long the parent waits for a worker to take what it writes before it drops the link."""
COMPACT_AFTER = 10_000
"""The fewest changes since the last compaction of the log that make the next one."""

Change = tuple[Any, ...]
"""An operation and its arguments, as :func:`apply_change` reads them (the core's
:meth:`VirtualHost.share <amqp10.broker.core.VirtualHost.share>` names them)."""


class Inequivalent(PreconditionFailed):
    """A declaration that differs from what an earlier change declared under that name."""


# -- changes ----------------------------------------------------------------------------------
def _encode(message: list[Any]) -> bytes:
    return encode(carried(message))


def _decode(payload: bytes) -> list[Any]:
    return list(restored(decode(payload)))


def apply_change(broker: Broker, vhost_name: str, change: Change, *, check: bool) -> None:
    """Make ``change`` in ``broker`` (through the core's own operations, as a front end
    would). ``check``: a declaration that differs from what is there raises
    :class:`Inequivalent` (the parent's copy); else what is there stays (a worker). Raises
    the core's ModelError or ArgumentError for a change that cannot be made."""
    op, args = change[0], change[1:]
    if op in PLACEMENT_OPS:  # (the override table: the worker's Ownership, placing.py)
        return
    if op == "vhost":
        broker.add_vhost(vhost_name)
        return
    if op == "drop-vhost":
        if vhost_name in broker.vhosts:
            broker.delete_vhost(vhost_name)
        return
    vhost = broker.vhost(vhost_name) if vhost_name else broker.default
    if vhost is None:
        raise NotFound(f"no virtual host {vhost_name!r}")
    if op == "vhost-metadata":
        vhost.set_metadata(args[0])
    elif op == "exchange":
        name, type_, durable, auto_delete, internal, alternate, arguments = args
        x = vhost.exchange(name)
        if x is None:
            vhost.declare_exchange(
                name,
                type_,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                alternate=alternate,
                arguments=arguments,
            )
        elif check and (x.type, x.durable, x.auto_delete, x.internal) != (type_, durable, auto_delete, internal):
            raise Inequivalent(
                f"exchange {name!r} in vhost {vhost_name!r} is a {'durable ' if x.durable else ''}{x.type} "
                f"exchange (auto-delete {x.auto_delete}, internal {x.internal})"
            )
    elif op == "drop-exchange":
        if vhost.exchange(args[0]) is not None:
            vhost.delete_exchange(args[0])
    elif op == "queue":
        name, kind, durable, auto_delete, arguments = args
        q = vhost.nodes.get(name)
        if q is None:
            vhost.declare_queue(
                name, kind=kind, durable=durable, auto_delete=auto_delete, arguments=arguments or None, checked=True
            )  # (checked on the worker that declared it; a logged one, when it was logged)
        elif check:
            _check_queue(vhost, q, kind, durable, auto_delete, arguments)
    elif op == "topic":  # (a 1.0 topic: a copy on every worker, Topic.copies)
        if args[0] not in vhost.nodes:
            vhost.create_node(args[0], "topic")
    elif op == "drop-topic":  # (every worker's copy, with its subscriptions)
        if isinstance(vhost.nodes.get(args[0]), Topic):
            vhost.delete_node(args[0])
    elif op == "drop-queue":
        if args[0] in vhost.nodes:
            vhost.delete_node(args[0])
    elif op == "bind":
        source, destination, key, arguments, kind = args
        vhost.bind(source, destination, key, arguments, destination_kind=kind)
    elif op == "unbind":
        source, destination, key, arguments, kind = args
        with contextlib.suppress(NotFound):
            vhost.unbind(source, destination, key, arguments, destination_kind=kind)
    elif op == "policy":
        name, pattern, apply_to, definition, priority = args
        vhost.declare_policy(RuntimePolicy(name, pattern, apply_to, dict(definition), priority))
    elif op == "drop-policy":
        with contextlib.suppress(NotFound):
            vhost.delete_policy(args[0])
    elif op != "users":  # (users live in the users file: a worker reads it again)
        raise ValueError(f"unknown metadata change {op!r}")


def _check_queue(  # the parent's check of a queue declared again under a name it knows
    vhost: VirtualHost, node: object, kind: str, durable: bool, auto_delete: bool, arguments: Mapping[str, Any]
) -> None:
    where = f"queue {getattr(node, 'name', '?')!r} in vhost {vhost.name!r}"
    if isinstance(node, (Queue, Stream)):  # equivalent as RabbitMQ has it, as every front end checks it
        try:
            check_redeclared(
                vhost, node, durable=bool(durable), auto_delete=bool(auto_delete), exclusive=False, arguments=arguments or {}
            )
        except ModelError as exc:
            raise Inequivalent(str(exc)) from None
    if not isinstance(node, Stream if kind == "stream" else Queue):
        raise Inequivalent(f"{where} is a {getattr(node, 'kind', '?')}, not a {kind}")


def rebind_to_owners(broker: Broker) -> None:
    """Bindings to queues another worker owns go to the owner's stand-in (what the core's
    ``bind`` does once :attr:`Broker.placement` is installed; bindings recovered from the
    store before it was were made to the local record of the queue)."""
    placement = broker.placement
    if placement is None:
        return
    for vhost in broker.vhosts.values():
        for x in vhost.exchanges.values():
            if isinstance(x, Topic):
                continue
            for b in list(x.bindings.values()):
                d = b.destination
                remote = placement(vhost.name, d.name) if isinstance(d, (Queue, Stream)) else None
                if remote is not None:
                    x.unbind(b.identity)
                    x.bind(Binding(x, remote, b.key, b.arguments))  # type: ignore[arg-type]


# -- the parent: the log and the sequencer -----------------------------------------------------
class MetadataLog:
    """The parent's ``metadata.sqlite3``: every change in order, each committed when added;
    compacted (:mod:`.compaction`) once the changes since the last compaction outnumber what
    it kept (at least :data:`COMPACT_AFTER`), so it grows with the metadata, not its history."""

    PARAM = "?"
    BEGIN = "BEGIN IMMEDIATE"
    TYPES: Mapping[str, str] = {"int": "INTEGER", "blob": "BLOB"}

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        self._open(db, str(path))

    def _open(self, db: Any, location: str) -> None:
        """Use ``db`` (a DB-API connection that commits each statement unless in a BEGIN)."""
        self.db = db
        self.location = location
        """Where the log is, for the log lines."""
        self._execute(
            "CREATE TABLE IF NOT EXISTS changes (seq {int} PRIMARY KEY, vhost TEXT NOT NULL, change {blob} NOT NULL)"
        )
        self._execute("CREATE TABLE IF NOT EXISTS snapshot (seq {int} NOT NULL)")
        row = self._execute("SELECT MAX(seq) FROM snapshot").fetchone()
        self.snapshot = int(row[0] or 0)
        """The number of the last change the latest compaction saw (0: never compacted)."""
        self._last = int(self._execute("SELECT COALESCE(MAX(seq), 0) FROM changes").fetchone()[0])
        self._last = max(self._last, self.snapshot)
        self.kept = int(self._execute("SELECT COUNT(*) FROM changes WHERE seq <= ?", (self.snapshot,)).fetchone()[0])
        """How many changes the latest compaction kept."""

    def _begin(self) -> None:
        """Begin a transaction of more than one statement."""
        self._execute(self.BEGIN)

    def _sql(self, sql: str) -> str:
        """``sql`` (written for SQLite, ``{int}`` and ``{blob}`` for its column types) as this
        database spells it: its column types and parameter marks (:attr:`PARAM`)."""
        return sql.format(**self.TYPES).replace("?", self.PARAM)

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.db.execute(self._sql(sql), params)

    def append(self, vhost: str, change: Change) -> int:
        """Store ``change`` (committed on return); its sequence number."""
        seq = self._last + 1  # (numbered here: a compaction may have left out the last change)
        self._execute("INSERT INTO changes (seq, vhost, change) VALUES (?, ?, ?)", (seq, vhost, _encode(list(change))))
        self._last = seq
        return seq

    def after(self, seq: int) -> list[tuple[int, str, Change]]:
        """The changes numbered after ``seq``, in order."""
        rows = self._execute("SELECT seq, vhost, change FROM changes WHERE seq > ? ORDER BY seq", (seq,))
        return [(n, vhost, tuple(_decode(bytes(blob)))) for n, vhost, blob in rows]

    def last(self) -> int:
        return self._last

    def compact_due(self) -> bool:
        return self._last - self.snapshot >= max(COMPACT_AFTER, self.kept)

    def compact(self, applied_by_all: int = 0) -> None:
        """Leave out every change a catch-up no longer needs (:func:`.compaction.compacted`),
        in one transaction; ``applied_by_all``: the number every worker has applied."""
        rows = self.after(0)
        kept = compacted(rows, applied_by_all)
        keep = {seq for seq, _, _ in kept}
        self._begin()
        try:
            gone = [(n,) for n, _, _ in rows if n not in keep]
            self.db.cursor().executemany(self._sql("DELETE FROM changes WHERE seq = ?"), gone)
            self._execute("DELETE FROM snapshot")
            self._execute("INSERT INTO snapshot (seq) VALUES (?)", (self._last,))
            self._execute("COMMIT")
        except BaseException:
            self._execute("ROLLBACK")
            raise
        self.snapshot, self.kept = self._last, len(kept)
        log.info("metadata: the log compacted at change %d: %d of %d changes kept", self._last, len(kept), len(rows))

    def marks(self, directory: Path) -> AppliedMarks:
        """Where the workers keep what they applied of this log: files in ``directory``."""
        return AppliedMarks(directory)

    def close_in_child(self) -> None:
        """In a forked worker: the log stays the parent's (nothing to do for a file)."""

    def close(self) -> None:
        self.db.close()


class _SocketTransport(asyncio.Transport):
    """What an :class:`~.link.InternalLink` writes to in the parent, whose loop is not
    asyncio's: a blocking write to the worker's socket, bounded by :data:`SEND_TIMEOUT`."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            return
        try:
            self.sock.sendall(data)
        except OSError as exc:  # the worker went, or takes nothing: the next read fails the link
            log.warning("control link: a write failed (%s)", exc)
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)

    def is_closing(self) -> bool:
        return self.closed


class _Peer:
    """The parent's end of one worker's control link."""

    def __init__(self, sequencer: Sequencer, sock: socket.socket) -> None:
        self.sequencer = sequencer
        self.sock = sock
        self.link: InternalLink | None = None
        self.sender: Sender | None = None
        self.receiver: Receiver | None = None
        self.worker: int | None = None
        """The worker at the other end (from its hello)."""
        self.live = False
        """Caught up: every new change goes to it."""

    def send(self, message: list[Any]) -> None:
        if self.sender is not None and self.link is not None and not self.link.closed:
            self.sender.send(_encode(message), settled=True)
            self.link.flush_soon()

    # -- LinkHandler --------------------------------------------------------------------------
    def started(self, link: InternalLink) -> None:
        self.link = link

    def on_event(self, event: Event) -> None:
        t = type(event)
        if t is DeliveryReceived:
            self.sequencer.received(self, _decode(event.delivery.payload))  # type: ignore[attr-defined]
        elif t is LinkAttached:
            link = event.link  # type: ignore[attr-defined]
            link.attach(source=link.remote_source, target=link.remote_target)
            if isinstance(link, Receiver):
                self.receiver = link
                link.flow(CREDIT)
            else:
                self.sender = link
        elif t is SessionBegun:
            session = event.session  # type: ignore[attr-defined]
            if not session.is_mapped:
                session.begin()
        elif t is ConnectionOpened:
            conn = self.link.connection if self.link is not None else None
            if conn is not None and conn.state is ConnectionState.OPEN_RCVD:
                conn.open()

    def after_events(self) -> None:
        _top_up(self.receiver)

    def before_write(self) -> None:
        pass

    def lost(self, reason: str) -> None:
        self.sequencer.forget(self, reason)


class Sequencer:
    """The parent's side: puts every worker's changes in one order, stores them, sends them.

    Runs inside the supervisor's ``select`` loop: :meth:`fds` to wait on, :meth:`ready`
    for each that is readable."""

    def __init__(self, config: BrokerConfig, directory: Path, metadata_log: MetadataLog) -> None:
        self.mirror = Broker(config)
        """The metadata as the changes so far made it: what each new one is checked against."""
        self.log = metadata_log
        self.marks = metadata_log.marks(directory)
        self.placed = Ownership(config.worker_count())
        """The override table (placing.py): sent whole to a worker that starts."""
        self.directory = directory
        self.workers = config.worker_count()
        self._compact_if_due()
        for seq, vhost, change in self.log.after(0):
            try:
                if not apply_placement(self.placed, vhost, change):
                    apply_change(self.mirror, vhost, change, check=False)
            except (ModelError, ArgumentError, ValueError) as exc:
                log.debug("metadata change %d (%s) not made in the parent's copy: %s", seq, change[0], exc)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / CONTROL_SOCKET
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        self.peers: dict[int, _Peer] = {}
        self.unanswered: dict[int, tuple[_Peer, int, set[_Peer]]] = {}
        """Change number -> the worker that made it, its request, and the workers that have
        not applied it yet: that worker is answered once every worker has."""
        self._soon: list[Callable[[], None]] = []
        for worker in self.placed.owners():  # placed by workers of an earlier run: gone with them
            self.announce((UNPLACE_WORKER, worker))
        log.info("metadata: %d changes in %s", self.log.last(), self.log.location)

    def fds(self) -> list[int]:
        return [self.listener.fileno(), *self.peers]

    def ready(self, fd: int) -> None:
        """``fd`` (one of :meth:`fds`) is readable."""
        if fd == self.listener.fileno():
            sock, _ = self.listener.accept()
            sock.settimeout(SEND_TIMEOUT)
            accepted = _Peer(self, sock)
            self.peers[sock.fileno()] = accepted
            link = InternalLink(accepted, "parent", call_soon=self._later)
            link.connection_made(_SocketTransport(sock))
        else:
            peer = self.peers.get(fd)
            if peer is None or peer.link is None:
                return  # (gone while an earlier one was handled)
            try:
                data = peer.sock.recv(1 << 16)
            except OSError as exc:
                peer.link.connection_lost(exc)
            else:
                if data:
                    peer.link.data_received(data)
                else:
                    peer.link.connection_lost(None)
        while self._soon:
            soon, self._soon = self._soon, []
            for callback in soon:
                callback()

    def _later(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once what :meth:`ready` is handling is done (a link's write)."""
        self._soon.append(callback)

    def received(self, peer: _Peer, message: list[Any]) -> None:
        kind = message[0]
        if kind == "hello":  # a worker started: what it missed, then every new change
            _, peer.worker, after = message
            missed = self.log.after(int(after))
            peer.send(["placed", self.placed.placed()])  # (kept by no store: whole, then what follows)
            for seq, vhost, change in missed:
                peer.send(["change", seq, None, vhost, list(change)])
            peer.send(["caught-up", self.log.last()])
            peer.live = True
            log.info("metadata: worker %s caught up from %d (%d changes)", peer.worker, after, len(missed))
        elif kind == "change":
            _, request, vhost, change = message
            self.sequence(peer, request, vhost, tuple(change))
        elif kind == "applied":
            self.applied(peer, int(message[1]))

    def sequence(self, peer: _Peer, request: int, vhost: str, change: Change) -> None:
        """Check ``change`` against the changes before it; number it, store it, send it."""
        try:
            check_placement(self.placed, vhost, change)
            if not apply_placement(self.placed, vhost, change):
                apply_change(self.mirror, vhost, change, check=True)
        except (Inequivalent, PlacementTaken) as exc:
            log.warning("metadata: worker %s's change refused: %s", peer.worker, exc)
            peer.send(["refused", request, str(exc)])
            return
        except (ModelError, ArgumentError, ValueError) as exc:  # made there: in the order all the same
            log.debug("metadata change (%s) not made in the parent's copy: %s", change[0], exc)
        seq = self.log.append(vhost, change)
        self._compact_if_due()
        live = {p for p in self.peers.values() if p.live}
        self.unanswered[seq] = (peer, request, live)
        for p in live:
            p.send(["change", seq, request if p is peer else None, vhost, list(change)])

    def announce(self, change: Change) -> None:
        """A change the parent makes (no worker waits for its answer): stored, sent to all."""
        apply_placement(self.placed, "", change)
        seq = self.log.append("", change)
        for p in self.peers.values():
            if p.live:
                p.send(["change", seq, None, "", list(change)])

    def _compact_if_due(self) -> None:
        if self.log.compact_due():
            every = min(self.marks.read(k) for k in range(self.workers))
            self.log.compact(applied_by_all=every)

    def applied(self, peer: _Peer | None, seq: int) -> None:
        """``peer`` applied every change up to ``seq`` (None: a worker went); answer each
        change every worker has applied."""
        for n in sorted(self.unanswered):
            origin, request, waiting = self.unanswered[n]
            if peer is not None and n <= seq:
                waiting.discard(peer)
            if not waiting:
                del self.unanswered[n]
                origin.send(["done", request])

    def forget(self, peer: _Peer, reason: str) -> None:
        self.peers.pop(peer.sock.fileno(), None)
        peer.sock.close()
        peer.live = False
        for n, (origin, _, waiting) in list(self.unanswered.items()):
            waiting.discard(peer)
            if origin is peer:
                del self.unanswered[n]
        self.applied(None, 0)
        log.info("metadata: the control link of worker %s went (%s)", peer.worker, reason)
        if peer.worker is not None and int(peer.worker) in self.placed.owners():
            self.announce((UNPLACE_WORKER, int(peer.worker)))  # its exclusive queues went with it

    def close_in_child(self) -> None:
        """In a forked worker: close the parent's sockets there (the parent keeps its own)."""
        self.listener.close()
        for peer in self.peers.values():
            peer.sock.close()
        self.log.close_in_child()

    def close(self) -> None:
        for peer in list(self.peers.values()):
            peer.sock.close()
        self.peers.clear()
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.log.close()


# -- a worker's side -----------------------------------------------------------------------------
class _SharedDefinitions:
    """The broker's definitions port, telling the other workers of each change to the users file."""

    def __init__(self, inner: DefinitionsPort, metadata: SharedMetadata) -> None:
        self.inner = inner
        self.metadata = metadata

    def export_json(self) -> str:
        return self.inner.export_json()

    def import_document(self, document: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.inner.import_document(document)
        finally:
            self.metadata.users_changed()

    def put_user(self, name: str, password: str | None, tags: object) -> bool:
        new = self.inner.put_user(name, password, tags)
        self.metadata.users_changed()
        return new

    def delete_user(self, name: str) -> None:
        self.inner.delete_user(name)
        self.metadata.users_changed()

    def put_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> bool:
        new = self.inner.put_permission(user, vhost, configure, write, read)
        self.metadata.users_changed()
        return new

    def delete_permission(self, user: str, vhost: str) -> None:
        self.inner.delete_permission(user, vhost)
        self.metadata.users_changed()


class SharedMetadata:
    """Worker ``me``'s side of the sequencer (a :class:`~amqp10.broker.core.MetadataPort`):
    sends the changes made here, applies everyone's in order, holds answers until then."""

    def __init__(
        self,
        broker: Broker,
        me: int,
        directory: Path,
        ownership: Ownership | None = None,
        marks: AppliedMarks | None = None,
    ) -> None:
        """``marks``: where this worker keeps what it applied (None: a file in ``directory``)."""
        self.broker = broker
        self.me = me
        self.ownership = ownership
        """Where nodes are (placing.py's overrides are kept in it); None: no table is kept."""
        self.socket = directory / CONTROL_SOCKET
        self.marks = marks or AppliedMarks(directory)
        self.applied = self.marks.read(me)
        """The number of the last change applied here."""
        self._saved = self.applied
        self.link: InternalLink | None = None
        self._sender: Sender | None = None
        self._receiver: Receiver | None = None
        self._requests = itertools.count(1)
        self._pending: set[int] = set()
        """This worker's changes sent to the parent and not yet back in its order."""
        self._last_request = 0
        self._held: list[tuple[int, Callable[[], None]]] = []
        """Answers waiting for a change of this worker (its request number) to come back."""
        self._placing: dict[int, tuple[str, str]] = {}
        """This worker's placements not yet back in the order: request -> (vhost, name)."""
        self._applying = False
        self.caught_up = asyncio.Event()
        self.reason: str | None = None
        """Why the control link went (None while it is up)."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect to the parent, catch up, then take part in the order until cancelled."""
        loop = asyncio.get_running_loop()
        with anyio.move_on_after(CATCH_UP_SECONDS):
            delay = 0.05
            while self.link is None:
                try:
                    await loop.create_unix_connection(lambda: InternalLink(self, f"worker-{self.me}"), path=str(self.socket))
                except OSError as exc:
                    log.debug("control link: %s; again in %gs", exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            await self.caught_up.wait()
        if not self.caught_up.is_set():
            log.warning("serving before the parent's metadata is applied (after %gs)", CATCH_UP_SECONDS)
        self.broker.metadata = self
        if self.broker.definitions is not None:
            self.broker.definitions = _SharedDefinitions(self.broker.definitions, self)
        rebind_to_owners(self.broker)
        task_status.started()
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            self.broker.metadata = None
            if self.link is not None:
                self.link.fail("the worker is stopping")

    # -- MetadataPort ---------------------------------------------------------------------------
    def changed(self, vhost: str, change: Change) -> None:
        if self._applying:
            return  # (a change of the order being applied here)
        change = placed_here(change, self.me)
        if self.ownership is not None:  # here at once: its own change does not come back
            with contextlib.suppress(PlacementTaken):  # (unless the order placed it elsewhere first: refused)
                check_placement(self.ownership, vhost, change)
                apply_placement(self.ownership, vhost, change)
        if self._sender is None or self.reason is not None:
            log.warning("metadata change (%s) made here only: no control link (%s)", change[0], self.reason)
            return
        request = self._last_request = next(self._requests)
        self._pending.add(request)
        if change[0] == PLACE:  # (undone if the order placed the name elsewhere first)
            self._placing[request] = (vhost, str(change[1]))
        self._send(["change", request, vhost, list(change)])

    def hold(self, answer: Callable[[], None]) -> bool:
        if not self._pending:
            return False
        self._held.append((self._last_request, answer))
        return True

    def users_changed(self) -> None:
        """The users file was written here: every other worker reads it again."""
        self.changed("", ("users",))

    # -- the order ------------------------------------------------------------------------------
    def _received(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "change":
            _, seq, request, vhost, change = message
            if seq > self.applied:
                if request not in self._pending:  # (this worker's own: made here already)
                    self._apply(seq, vhost, tuple(change))
                self.applied = seq
                self._save_applied()
            if self.caught_up.is_set():
                self._send(["applied", seq])
        elif kind == "done":  # every worker applied it
            self._back(message[1])
        elif kind == "refused":  # another worker's declaration of that name came first
            _, request, reason = message
            placed = self._placing.pop(request, None)
            if placed is not None:
                self._unplace(*placed, reason)
            else:
                log.warning("metadata change refused by the order (it stays on this worker only): %s", reason)
            self._back(request)
        elif kind == "placed":  # the whole override table, before the changes that follow it
            if self.ownership is not None:
                self.ownership.replace(message[1])
        elif kind == "caught-up":
            log.info("metadata caught up: change %d applied", self.applied)
            self.caught_up.set()

    def _apply(self, seq: int, vhost: str, change: Change) -> None:
        self._applying = True
        try:
            if change[0] == "users":
                self._read_users()
            elif self.ownership is not None and change[0] in PLACEMENT_OPS:
                unbind_unplaced(self.broker, self.ownership, vhost, change)  # (while it says where they were)
                apply_placement(self.ownership, vhost, change)
            elif self.ownership is None or not bind_placed(self.broker, self.ownership, vhost, change):
                apply_change(self.broker, vhost, change, check=False)
        except (ModelError, ArgumentError, ValueError, OSError) as exc:
            log.warning("metadata change %d (%s in vhost %r) not made here: %s", seq, change[0], vhost, exc)
        finally:
            self._applying = False

    def _unplace(self, vhost_name: str, name: str, reason: str) -> None:
        """Another worker's placement of ``name`` came first in the order: the exclusive queue
        made here goes (what answers its declaration finds it gone: locked), unshared (the
        placement that stands is the other worker's)."""
        log.info("exclusive queue %r in vhost %r dropped here: %s", name, vhost_name, reason)
        vhost = self.broker.vhost(vhost_name)
        q = None if vhost is None else vhost.nodes.get(name)
        if vhost is None or not isinstance(q, Queue) or q.owner is None:
            return
        self._applying = True
        try:
            vhost.delete_node(name)
        finally:
            self._applying = False

    def _read_users(self) -> None:
        defs = self.broker.definitions
        inner = defs.inner if isinstance(defs, _SharedDefinitions) else defs
        if isinstance(inner, LiveDefinitions) and inner.users_file is not None and inner.on_users_changed is not None:
            inner.on_users_changed(read_users_file(inner.users_file))

    def _back(self, request: int) -> None:
        """This worker's change ``request`` is in the order and applied (or refused): the
        answers held for it and for the ones before it go out."""
        self._pending = {r for r in self._pending if r > request}
        self._placing = {r: placed for r, placed in self._placing.items() if r > request}
        ready = [answer for r, answer in self._held if r <= request]
        self._held = [(r, answer) for r, answer in self._held if r > request]
        for answer in ready:
            answer()

    def _save_applied(self) -> None:
        """Write the number applied once this worker's store committed what it made."""
        seq = self.applied

        def save() -> None:
            if seq > self._saved:
                self._saved = seq
                self.marks.write(self.me, seq)

        journal = self.broker.journal
        if journal.idle:
            save()
        else:
            journal.submit((BARRIER,), save)

    def _send(self, message: list[Any]) -> None:
        assert self._sender is not None and self.link is not None
        self._sender.send(_encode(message), settled=True)
        self.link.flush_soon()

    # -- LinkHandler ----------------------------------------------------------------------------
    def started(self, link: InternalLink) -> None:
        self.link = link
        conn = link.connection
        conn.open()
        session = conn.session()
        session.begin()
        name = f"worker-{self.me}"
        self._receiver = session.receiver("metadata:order", source=Source(address=ADDRESS), target=Target(address=name))
        self._receiver.attach()
        self._receiver.flow(CREDIT)
        self._sender = session.sender("metadata:changes", source=Source(address=name), target=Target(address=ADDRESS))
        self._sender.attach()
        self._send(["hello", self.me, self.applied])

    def on_event(self, event: Event) -> None:
        if type(event) is DeliveryReceived:
            self._received(_decode(event.delivery.payload))

    def after_events(self) -> None:
        _top_up(self._receiver)

    def before_write(self) -> None:
        pass

    def lost(self, reason: str) -> None:
        self.reason = reason
        log.error("the control link to the parent went (%s): metadata changes are made here only", reason)
        if self._pending:  # nobody will put them in order: answer what waits
            self._back(max(self._pending))


def _top_up(receiver: Receiver | None) -> None:
    """Give a control link's receiving end :data:`CREDIT` again once half is used."""
    if receiver is not None and receiver.is_attached and receiver.credit < CREDIT // 2:
        receiver.flow(CREDIT)


class AppliedMarks:
    """The number of the last change each worker applied and its store committed: a file
    per worker, ``<directory>/<K>.applied`` (on PostgreSQL: a table,
    :class:`~.shared_database.PostgresAppliedMarks`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self, worker: int) -> int:
        return _read_applied(self.directory / f"{worker}.applied")

    def write(self, worker: int, seq: int) -> None:
        _write_applied(self.directory / f"{worker}.applied", seq)


def _read_applied(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _write_applied(path: Path, seq: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(str(seq))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
