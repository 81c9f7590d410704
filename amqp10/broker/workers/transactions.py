"""Transactions over nodes of several workers, committed or rolled back as one.

A front end's commit (0-9-1's ``tx.commit``, a 1.0 coordinator's discharge) hands its work to :class:`Transactions`
(:attr:`Broker.coordinator <amqp10.broker.core.Broker.coordinator>`, this worker's). Work
that reaches only this worker's nodes is committed as on one broker. Otherwise this
worker coordinates a two-phase commit under a fresh transaction id:

1. **Prepare.** Each owner reached gets its part as a question on the internal link's
   requests link (``txn-prepare``): the messages for its queues (each by queue name, as
   the default exchange routes) and the references of the messages it delivered that
   the transaction acknowledges. The owner holds them in a
   :class:`~amqp10.broker.core.prepared.HeldWork` (the publishes invisible, the taken
   messages still acquired), writes it to its store as prepared and only then answers.
   An owner that cannot (a reference it no longer holds: it restarted) refuses; then
   every part is rolled back and nothing was applied anywhere.
2. **Decide.** Every owner prepared: this worker writes the decision (a prepared record
   of owner :data:`DECIDED` naming the transaction and its owners) in the same store
   batch as its own part (the front end's ``apply``, in which what reaches another
   worker's node is not sent again: :attr:`RemoteNodes.absorbing`).
3. **Commit.** Once that batch is stored, each owner is told ``txn-commit`` and applies
   its part; the front end is answered once every owner has; then the decision is
   forgotten.

**After a crash** (the rule: *presumed abort, the coordinator decides*): a prepared part
is resolved only by its coordinator's word. An owner holding prepared parts (recovered
from its store, or kept while the coordinator's worker restarted) asks the coordinator
(``txn-outcome``) whenever its link to it comes up: *commit* if the coordinator has the
decision recorded, *wait* while the coordinator is still preparing (it will say), else
*rollback* (a coordinator that restarted before storing its decision never decided to
commit, and never will). A coordinator that restarts with a recorded decision tells the
owners to commit again; ``txn-commit`` and ``txn-rollback`` of a transaction an owner
does not hold answer done, and ``txn-prepare`` of one it holds prepared answers
prepared, so a question re-sent after a crash is applied once.

**A branch prepared now, decided later** (0-10's ``dtx``: :meth:`Transactions.prepare`,
then :meth:`Transactions.finish`): the same two phases with the client between them. The
prepare asks the owners reached, as above; once all have prepared, this worker records
the branch as *awaiting* its decision (a prepared record of owner :data:`AWAITING`: the
transaction, its owners and the front end's key of the branch) in the same store batch
as the front end's own prepared record, and the front end answers its client. An owner
asking for the outcome meanwhile is told *wait*, after a restart of either worker too
(the record is recovered). The commit is step 2 and 3 above, the awaiting record
forgotten in the decision's batch; a rollback forgets it, rolls back the front end's own
part and tells each owner ``txn-rollback``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..core import (
    Answered,
    Broker,
    Node,
    PreconditionFailed,
    QueuedMessage,
    VirtualHost,
    nothing,
)
from ..core.prepared import HeldWork
from .link import decode_record, encode_record
from .owner import NodeServer
from .remote import RemoteNode, RemoteNodes, worker_of

__all__ = ["AWAITING", "DECIDED", "TXN_NODE", "Transactions"]

log = logging.getLogger("amqp10.broker.workers")

DECIDED = "workers.decided"
"""The owner, in the store's prepared records, of a coordinator's decision to commit: its
transaction id is the 16 bytes of the transaction's then one byte per owning worker."""
AWAITING = "workers.awaiting"
"""The owner, in the store's prepared records, of a branch prepared on several workers and
not decided yet: its id is the transaction's 16 bytes, one byte counting its owners, one
byte per owner, then the front end's key of the branch."""
TXN_NODE = "$txn"
"""The name the transaction questions are asked about (they name no node)."""
_ID = 16


def _owner_name(worker: int) -> str:
    """The owner, in an owner's store, of a part prepared for coordinator ``worker``."""
    return f"worker-{worker}"


class _Commit:
    """One transaction this worker coordinates, from its prepare to its owners' commits."""

    __slots__ = ("acks", "answered", "apply", "decision", "failed", "key", "parts", "waiting")

    def __init__(self, apply: Callable[[], None], answered: Answered[None], key: bytes | None = None) -> None:
        self.apply = apply
        self.answered = answered
        self.key = key
        """A branch's key (:meth:`Transactions.prepare`): prepared only, decided later."""
        self.parts: dict[int, tuple[RemoteNode, list[list[Any]], list[list[int]]]] = {}
        """Owner -> (a node of it, the questions are asked about; its publishes; its acks)."""
        self.acks: list[tuple[RemoteNode, QueuedMessage]] = []
        self.waiting = 0
        self.failed: str | None = None
        self.decision: HeldWork | None = None


class Transactions:
    """Worker ``me``'s coordinator (:meth:`commit`) and owner (the ``txn-*`` questions) of
    transactions over several workers; ``links``: its internal links to the others."""

    def __init__(self, broker: Broker, me: int, links: dict[int, RemoteNodes]) -> None:
        self.broker = broker
        self.me = me
        self.links = links
        self.preparing: dict[bytes, _Commit] = {}
        """Transactions this worker coordinates that are not decided yet."""
        self.decided: dict[bytes, tuple[HeldWork, set[int]]] = {}
        """Transactions this worker decided to commit -> the stored decision and the owners
        that have not answered their commit yet."""
        self.held: dict[bytes, tuple[int, HeldWork]] = {}
        """Parts prepared here for another worker's transaction -> (its coordinator, the work)."""
        self.awaiting: dict[bytes, tuple[bytes, set[int], HeldWork]] = {}
        """Branches prepared on several workers, by the front end's key -> (the transaction,
        its owners, the stored record of it)."""
        for work in broker.recovered_transactions(DECIDED):
            self.decided[work.txn_id[:_ID]] = (work, set(work.txn_id[_ID:]))
        for work in broker.recovered_transactions(AWAITING):
            n = work.txn_id[_ID]
            owners = set(work.txn_id[_ID + 1 : _ID + 1 + n])
            self.awaiting[work.txn_id[_ID + 1 + n :]] = (work.txn_id[:_ID], owners, work)
        for k in (*links, me):
            for work in broker.recovered_transactions(_owner_name(k)):
                self.held[work.txn_id] = (k, work)
        self.recovered = set(self.held)
        """Parts held since this worker's start (recovered from its store): their outcome is logged."""

    # -- the coordinator ----------------------------------------------------------------------
    def commit(
        self,
        publishes: Sequence[tuple[Node, QueuedMessage]],
        acks: Sequence[tuple[Node, QueuedMessage]],
        apply: Callable[[], None],
        answered: Answered[None],
        *,
        create: bool = False,
    ) -> bool:
        """:meth:`amqp10.broker.core.Coordinator.commit`."""
        return self._prepare_parts(_Commit(apply, answered), publishes, acks, create=create)

    def prepare(
        self,
        key: bytes,
        publishes: Sequence[tuple[Node, QueuedMessage]],
        acks: Sequence[tuple[Node, QueuedMessage]],
        answered: Answered[None],
    ) -> bool:
        """:meth:`amqp10.broker.core.Coordinator.prepare`."""
        return self._prepare_parts(_Commit(nothing, answered, key), publishes, acks)

    def finish(self, key: bytes, commit: bool, apply: Callable[[], None], answered: Answered[None]) -> bool:
        """:meth:`amqp10.broker.core.Coordinator.finish`."""
        entry = self.awaiting.pop(key, None)
        if entry is None:
            return False
        txn, owners, record = entry
        if commit:
            record.commit()  # (its record goes in the decision's store batch)
            self._commit_all(txn, owners, apply, answered)
            return True
        record.rollback()
        apply()
        self._ask_each(owners, "txn-rollback", txn, lambda k: None, lambda: self.broker.after_commit(lambda: answered(nothing)))
        return True

    def _prepare_parts(
        self,
        c: _Commit,
        publishes: Sequence[tuple[Node, QueuedMessage]],
        acks: Sequence[tuple[Node, QueuedMessage]],
        *,
        create: bool = False,
    ) -> bool:
        """Ask each owner ``publishes`` and ``acks`` reach to prepare its part (False: none)."""
        for node, msg in publishes:
            if isinstance(node, RemoteNode):
                self._part(c, node)[1].append([node.name, encode_record(msg), create])
        for node, msg in acks:
            if isinstance(node, RemoteNode):
                held = node.held_ref(msg)
                if held is not None:
                    self._part(c, node)[2].append(list(held))
                    c.acks.append((node, msg))
        if not c.parts:
            return False
        txn = uuid.uuid4().bytes
        self.preparing[txn] = c
        c.waiting = len(c.parts)
        for k, (anchor, published, taken) in c.parts.items():
            self._ask(k, anchor, "txn-prepare", [txn, self.me, published, taken], self._prepared(txn, k))
        _debug_after_writes("transaction %s: its parts asked to prepare on workers %s", txn.hex(), sorted(c.parts))
        return True

    def _part(self, c: _Commit, node: RemoteNode) -> tuple[RemoteNode, list[list[Any]], list[list[int]]]:
        k = worker_of(self.links, node)
        part = c.parts.get(k)
        if part is None:
            part = c.parts[k] = (node, [], [])
        return part

    def _ask(
        self, k: int, node: RemoteNode | None, op: str, args: list[Any], replied: Callable[[str | None, str, list[Any]], None]
    ) -> None:
        nodes = self.links[k]
        if node is None:
            node = nodes.node(self.broker.default.name, TXN_NODE)
        nodes.ask(node, [op, node.vhost, TXN_NODE, *args], replied)

    def _prepared(self, txn: bytes, k: int) -> Callable[[str | None, str, list[Any]], None]:
        def replied(error: str | None, text: str, values: list[Any]) -> None:
            c = self.preparing.get(txn)
            if c is None:
                return
            if error is not None and c.failed is None:
                c.failed = f"worker {k} could not prepare its part: {text}"
            c.waiting -= 1
            if c.waiting == 0:
                self._decide(txn, c)

        return replied

    def _decide(self, txn: bytes, c: _Commit) -> None:
        """Every owner answered ``txn``'s prepare: commit it (a branch: hold it prepared)."""
        del self.preparing[txn]
        owners = set(c.parts)
        if c.failed is not None:
            log.warning("transaction %s rolled back: %s", txn.hex(), c.failed)
            for k in owners:
                self._ask(k, None, "txn-rollback", [txn], _ignored)
            failed = PreconditionFailed(f"{'prepare' if c.key is not None else 'tx.commit'} failed: {c.failed}")

            def fail() -> None:
                raise failed

            c.answered(fail)
            return
        for node, msg in c.acks:
            node.forget_held(msg)  # (its owner acknowledges it at the commit: not sent again)
        if c.key is not None:  # a branch: awaiting its decision (recorded with the front end's own prepare)
            record = HeldWork(AWAITING, txn + bytes([len(owners)]) + bytes(sorted(owners)) + c.key, self.broker.journal)
            record.prepare(nothing)
            self.awaiting[c.key] = (txn, owners, record)
            c.answered(nothing)
            return
        self._commit_all(txn, owners, c.apply, c.answered)

    def _commit_all(self, txn: bytes, owners: set[int], apply: Callable[[], None], answered: Answered[None]) -> None:
        """Record the decision to commit ``txn`` with ``apply`` (this worker's own part) in one
        store batch, then tell its ``owners``; ``answered`` once every owner committed."""
        # the decision and this worker's own part: one store batch (nothing yields between)
        decision = HeldWork(DECIDED, txn + bytes(sorted(owners)), self.broker.journal)
        decision.prepare(nothing)
        absorbed: list[Callable[[], None]] = []
        links = [self.links[k] for k in owners]
        for nodes in links:
            nodes.absorbing = absorbed.append
        try:
            apply()
        except Exception:  # (a front end's bug: it must not fail the internal link it came on)
            log.exception("transaction %s: applying its own part failed; its owners commit theirs", txn.hex())
        finally:
            for nodes in links:
                nodes.absorbing = None
        self.decided[txn] = (decision, set(owners))

        def all_committed() -> None:
            for on_stored in absorbed:
                on_stored()
            answered(nothing)

        def stored() -> None:  # the decision is durable: the owners commit
            self._ask_each(owners, "txn-commit", txn, lambda k: self._committed(txn, k), all_committed)
            _debug_after_writes("transaction %s: decided commit, stored; its owners told", txn.hex())

        self.broker.after_commit(stored)

    def _ask_each(
        self, owners: set[int], op: str, txn: bytes, each: Callable[[int], None], then: Callable[[], None]
    ) -> None:
        """Tell each of ``owners`` ``op`` (``txn-commit``, ``txn-rollback``) of ``txn``: ``each``
        with an owner once it answered, ``then`` once every one has."""
        left = set(owners)

        def one(k: int) -> Callable[[str | None, str, list[Any]], None]:
            def replied(error: str | None, text: str, values: list[Any]) -> None:
                left.discard(k)
                each(k)
                if not left:
                    then()

            return replied

        for k in owners:
            self._ask(k, None, op, [txn], one(k))

    def _committed(self, txn: bytes, k: int) -> None:
        """Owner ``k`` committed its part of ``txn``: once every owner has, the decision goes."""
        entry = self.decided.get(txn)
        if entry is None:
            return
        entry[1].discard(k)
        if not entry[1]:
            del self.decided[txn]
            entry[0].commit()

    def linked(self, k: int) -> None:
        """The link to worker ``k`` is up (again): settle what waits on either side of it."""
        for txn, (_, owners) in list(self.decided.items()):
            if k in owners:  # (recovered, or told before the owner restarted): commit again
                self._ask(k, None, "txn-commit", [txn], self._commit_answered(txn, k))
        for txn, (coordinator, _) in list(self.held.items()):
            if coordinator == k:
                self._ask(k, None, "txn-outcome", [txn], self._outcome(txn))

    def _commit_answered(self, txn: bytes, k: int) -> Callable[[str | None, str, list[Any]], None]:
        def replied(error: str | None, text: str, values: list[Any]) -> None:
            self._committed(txn, k)

        return replied

    def _outcome(self, txn: bytes) -> Callable[[str | None, str, list[Any]], None]:
        def replied(error: str | None, text: str, values: list[Any]) -> None:
            outcome = str(values[0]) if error is None and values else "wait"
            if outcome == "commit":
                self._finish(txn, commit=True, asked=True)
            elif outcome == "rollback":
                self._finish(txn, commit=False, asked=True)

        return replied

    # -- the owner ----------------------------------------------------------------------------
    def serve(self, answer: Callable[[str, Callable[[NodeServer, VirtualHost, list[Any]], list[Any]]], None]) -> None:
        """Answer the ``txn-*`` questions on the links other workers open to this one, through
        ``answer`` (:meth:`Peers.answer <.peers.Peers.answer>`: ``run(server, vhost, args)``)."""
        answer("txn-prepare", self._prepare)
        answer("txn-commit", lambda server, vhost, args: self._finish(bytes(args[1]), commit=True))
        answer("txn-rollback", lambda server, vhost, args: self._finish(bytes(args[1]), commit=False))
        answer("txn-outcome", lambda server, vhost, args: [self._decision(bytes(args[1]))])

    def _prepare(self, server: NodeServer, vhost: VirtualHost, args: list[Any]) -> list[Any]:
        _, txn, coordinator, published, taken = args
        txn = bytes(txn)
        if txn in self.held:
            return []  # (asked again after a restart: prepared already)
        work = HeldWork(_owner_name(int(coordinator)), txn, self.broker.journal)
        refs = [(int(consumer_id), int(ref)) for consumer_id, ref in taken]
        if any(server.delivered(*r) is None for r in refs):
            raise PreconditionFailed("a message the transaction acknowledges is no longer held here")
        for r in refs:
            held = server.delivered(*r, forget=True)
            assert held is not None
            work.take(*held)
        for name, record, create in published:
            if create:  # (a 1.0 publisher's node: made as its attach makes it on one broker)
                vhost.lookup(str(name), create=True)
            work.publish(vhost, "", str(name), decode_record(bytes(record)))
        # answered once it is stored (the question's answer waits for the store's commit)
        work.prepare(lambda: _debug_after_writes("transaction %s of worker %s: prepared here", txn.hex(), coordinator))
        self.held[txn] = (int(coordinator), work)
        return []

    def _finish(self, txn: bytes, *, commit: bool, asked: bool = False) -> list[Any]:
        """Commit or roll back a part held here, once; logged when it was recovered or its
        outcome ``asked`` of its coordinator (a restart on either side: whichever comes first,
        the coordinator's commit again or its answer, finishes it)."""
        entry = self.held.pop(txn, None)
        if entry is not None:  # (else done already: the question was asked again)
            if asked or txn in self.recovered:
                self.recovered.discard(txn)
                log.info("prepared transaction %s of worker %d: %s, as its coordinator says",
                         txn.hex(), entry[0], "committed" if commit else "rolled back")  # fmt: skip
            if commit:
                entry[1].commit()
            else:
                entry[1].rollback()
        return []

    def _decision(self, txn: bytes) -> str:
        """What this worker, the coordinator, says of ``txn`` to an owner that holds it prepared."""
        if txn in self.decided:
            return "commit"
        if txn in self.preparing or any(t == txn for t, _, _ in self.awaiting.values()):
            return "wait"
        return "rollback"


def _debug_after_writes(msg: str, *args: object) -> None:
    """A debug line, once what this turn and the next queued on the links is written (so a
    test that reads it knows the other worker was sent it)."""
    if log.isEnabledFor(logging.DEBUG):
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, lambda: log.debug(msg, *args))


def _ignored(error: str | None, text: str, values: list[Any]) -> None:
    return None
