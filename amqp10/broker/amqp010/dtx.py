"""The 0-10 ``dtx`` commands: distributed (XA) transaction branches (0-10 §10.6).

A session ``dtx.select``\\ ed works in a branch once ``dtx.start`` associates it with an
xid (a new branch, or with ``join`` one another session started, or with ``resume`` one
this session suspended). What it publishes is held in the branch (routed at commit, as in
a ``tx`` transaction) and what it accepts is taken out of the session into the branch,
still acquired (settled at commit, released at rollback), so the branch outlives the
session. ``dtx.end`` ends the association (``suspend``: to be resumed; ``fail``: the
branch can only roll back); ``prepare`` readies an ended branch for a two-phase commit,
``commit`` (one-phase: without a prepare; two-phase: after one) and ``rollback`` finish
it, ``recover`` lists the prepared ones, ``forget`` drops one. A branch not prepared
within its timeout (``set-timeout``; 60 seconds unless set, at most 3600) is rolled
back: its end, commit or rollback then answer ``xa-rbtimeout``. A session that ends while
associated (active or suspended) leaves its branch rollback-only (``xa-rbrollback``).

A branch's work is a core :class:`~amqp10.broker.core.HeldWork`. ``prepare`` writes it to
the store and is answered once that is durable; ``commit``, ``rollback`` and ``forget``
remove it with their own writes and are answered once those are. A broker restarted
(after a crash too) gets its prepared branches back from the store, their taken messages
still acquired: ``recover`` lists them, and a new session commits or rolls them back.
Branches not prepared live in memory only: a restart rolls them back.

With several workers a branch is kept by the worker whose session started it and is the
broker's all the same (:class:`Branches`): a session on any worker prepares, commits,
rolls back, forgets or recovers it, and what it did on queues other workers own is
prepared there with it and committed or rolled back as one (two-phase, over the internal
links: ``broker/workers/transactions.py``). Which worker holds a new xid is decided in
one place, the metadata's one order: the worker that starts it places the xid's name
(:func:`placement_name`) on itself, as a worker places an exclusive queue, and the first
placement stands (:meth:`Branches.claim`), so two workers starting one xid at the same
instant make one branch.

The error codes are Qpid's broker's, which its conformance tests check: a session not
selected, ``join`` with ``resume``, and ``suspend`` with ``fail`` are ``command-invalid``;
an xid already known is ``not-allowed``; an unknown xid ``not-found``; a branch still
associated, or ended twice, or committed in the wrong phase, ``illegal-state``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from ...amqp010 import Compound, result_struct
from ...amqp010.spec import ENUMS
from ..core import Answered, Broker, HeldWork, Lease, ModelError, nothing
from .context import Amqp010Context, CommandError
from .session import Amqp010Session

__all__ = [
    "ASK_AGAIN",
    "BRANCH_QUESTION",
    "ASK_PREPARED",
    "COMMITTED_OWNER",
    "DEFAULT_TIMEOUT",
    "INCARNATION",
    "MAX_TIMEOUT",
    "OUTCOME_QUESTION",
    "OWNER",
    "PART_OWNER",
    "PART_QUESTION",
    "RECOVER_QUESTION",
    "ROLLED_BACK_OWNER",
    "Branch",
    "Branches",
    "DtxCommands",
]

log = logging.getLogger("amqp10.broker")

XA: Final = ENUMS["dtx.xa-status"]
DEFAULT_TIMEOUT: Final = 60
"""Seconds a branch has to be prepared unless ``dtx.set-timeout`` says otherwise (Qpid's default)."""
MAX_TIMEOUT: Final = 3600
"""The longest timeout ``dtx.set-timeout`` takes (Qpid's default ``--dtx-max-timeout``)."""

log = logging.getLogger("amqp10.broker")

Xid = tuple[int, bytes, bytes]
"""An xid as a key: (format, global id, branch id)."""
OWNER: Final = "amqp010.dtx"
"""What the store calls the branches of this front end (:class:`~amqp10.broker.core.HeldWork`'s owner)."""
BRANCH_QUESTION: Final = "amqp010.dtx-branch"
"""The other workers' question (``workers`` > 1) for a command on a branch this worker does
not hold: ``{op, xid, one_phase, timeout}``; answered by the one that holds it with the
result's fields (or ``{"error": [code, text]}``), by the others with None."""
RECOVER_QUESTION: Final = "amqp010.dtx-recover"
"""The other workers' question for the xids of their prepared branches (``dtx.recover``)."""
PART_OWNER: Final = "amqp010.dtx-part"
"""What the store calls the parts of branches another worker holds (``workers`` > 1: the work
of this worker's sessions that joined such a branch)."""
PART_QUESTION: Final = "amqp010.dtx-part"
"""The holder's question to the other workers (``workers`` > 1) for their parts of a branch:
``{op, xid, inc}`` with ``op`` ``prepare``, ``commit`` or ``rollback`` (``inc``: the branch's
:data:`INCARNATION`, hex; None for one from before); answered by a worker with a part of
it, of that incarnation, with ``{"status": ...}`` once what it wrote is stored; by the
others with None (``prepare``) or ``{}`` (``commit``, ``rollback``: so the holder knows
every worker answered)."""
OUTCOME_QUESTION: Final = "amqp010.dtx-outcome"
"""A worker's question (``workers`` > 1) for the outcome of the branch of a part it holds
prepared: ``{xid, inc}`` (about that incarnation only), answered by every worker with
``{"outcome": ...}``, in the words of the internal links' ``txn-outcome``
(workers/transactions.py): ``commit`` from the holder that committed it
(:data:`COMMITTED_OWNER`), ``rollback`` from the one that rolled it back
(:data:`ROLLED_BACK_OWNER`); ``prepared`` from the one that holds it prepared, stored and
not decided (it will tell the part: asked again only after :data:`ASK_PREPARED`); ``wait``
from the one that holds it otherwise (preparing); else ``rollback`` (no such branch here).
Presumed abort: the part rolls back only when every other worker answered and none knows
the branch; while one does not answer (the holder may be down) it is asked again
(:data:`ASK_AGAIN`), never decided alone."""
COMMITTED_OWNER: Final = "amqp010.dtx-committed"
"""What the store calls a holder's record that it committed a branch (the branch's store
id), kept until every other worker answered its commit (so their parts are committed)."""
ROLLED_BACK_OWNER: Final = "amqp010.dtx-rolled-back"
"""What the store calls a holder's record that it rolled back a branch with parts on other
workers, kept until every other worker answered its rollback: their parts are told again
meanwhile, and the xid is not new (:meth:`Branches.claim`), so an old part of a worker that
was down is never taken for a part of a new branch of the same xid."""
ASK_AGAIN: Final = 2.0
"""Seconds between the rounds that settle what a worker down missed: a prepared part asks
its branch's outcome (:data:`OUTCOME_QUESTION`), a holder tells a decided branch's parts
its outcome again (:data:`PART_QUESTION`)."""
ASK_PREPARED: Final = 60.0
"""Seconds a prepared part whose holder answered that it keeps the branch prepared waits
before it asks again (the holder tells it the outcome, again until answered: this only
bounds how long a part would wait were that word lost for another reason)."""
INCARNATION: Final = ".i"
"""What ends the store's owner name of a record whose id ends with its branch's incarnation
(:func:`store_id`): 8 random bytes its holder mints at ``dtx.start``, so that a branch of an
xid started again is another branch than an old one of the same xid (a part of the old one
kept by a worker that was down is never decided with, nor joined to, the new one). A record
of an owner without it (stored before incarnations) has none (None): matched by its xid."""
INC_LEN: Final = 8
PLACEMENT_PREFIX: Final = "amq.dtx."
"""What the name a branch's xid is placed under starts with (:func:`placement_name`; a
reserved prefix: no client declares a queue of it)."""
Fields = dict[str, Any]
"""A branch command's result, as fields: ``status``, ``timeout`` or ``error``."""
Reply = Callable[[Fields], None]
Start = Callable[[Reply], None]
"""How to apply a command on a branch: ``start(reply)``."""


def xid_key(xid: object) -> Xid:
    if not isinstance(xid, Compound):
        raise CommandError("command-invalid", "an xid is required")
    return (
        int(xid.get("format", 0) or 0),
        bytes(xid.get("global_id", b"") or b""),
        bytes(xid.get("branch_id", b"") or b""),
    )


def txn_id(key: Xid) -> bytes:
    """The store's id of the branch of ``key``: format, global id's length, global id, branch id."""
    fmt, gid, bid = key
    return fmt.to_bytes(4, "big") + bytes([len(gid)]) + gid + bid


def store_id(key: Xid, inc: bytes | None) -> bytes:
    """The store's id of the record of the branch of ``key``, incarnation ``inc``."""
    return txn_id(key) + (inc or b"")


def owner_of(owner: str, inc: bytes | None) -> str:
    """The store's owner name of a record of ``owner`` of incarnation ``inc`` (:data:`INCARNATION`)."""
    return owner if inc is None else owner + INCARNATION


def incarnation(held: HeldWork) -> bytes | None:
    """The incarnation of the branch ``held`` is a record of (None: stored before incarnations)."""
    return held.txn_id[-INC_LEN:] if held.owner.endswith(INCARNATION) else None


def recovered(broker: Broker, owner: str) -> list[tuple[Xid, HeldWork]]:
    """The records of ``owner`` the store kept, by the key of their branch: those stored
    before incarnations too (their owner without :data:`INCARNATION`)."""
    old = [(key_of(held.txn_id), held) for held in broker.recovered_transactions(owner)]
    new = broker.recovered_transactions(owner + INCARNATION)
    return [*old, *((key_of(held.txn_id[:-INC_LEN]), held) for held in new)]


def placement_name(key: Xid) -> str:
    """The name the branch of ``key`` is placed under, in the default virtual host
    (workers > 1: :meth:`Branches.claim`)."""
    return PLACEMENT_PREFIX + txn_id(key).hex()


def key_of(txn: bytes) -> Xid:
    """The key of the branch whose store id is ``txn`` (:func:`txn_id`)."""
    n = txn[4]
    return int.from_bytes(txn[:4], "big"), txn[5 : 5 + n], txn[5 + n :]


class Branch:
    """One transaction branch: the work held in it and who is associated with it."""

    def __init__(self, xid: Compound, key: Xid, held: HeldWork) -> None:
        self.xid = xid
        self.key = key
        self.held = held
        """Its publishes (routed at commit) and accepted messages (still acquired:
        acknowledged at commit, released at rollback)."""
        self.active: set[Amqp010Session] = set()
        self.suspended: set[Amqp010Session] = set()
        self.rollback_only = False
        self.timed_out = False
        self.timeout = DEFAULT_TIMEOUT
        self.lease: Lease | None = None
        self.elsewhere = 0
        """Sessions of other workers associated with it (joined, active or suspended)."""
        self.parts: int | None = 0
        """How many other workers hold a part of it (their sessions' work: :attr:`part`);
        None: not known (recovered from the store: every worker is asked)."""
        self.parts_asked = False
        """Its parts were asked to prepare, so a part may be in another worker's store: its
        rollback too is stored until they are told (as is that of a prepared branch)."""
        self.ended: Callable[[], None] | None = None
        """A part's: tells the worker that holds the branch a session of it ended while
        associated (the branch can only roll back)."""
        self.in_doubt = False
        """Prepared and its record stored, not decided (the holder's answer to a part's
        :data:`OUTCOME_QUESTION`: ``prepared``)."""
        self.quiet: Lease | None = None
        """A part's: its holder answered that it keeps the branch prepared (it will tell
        the outcome): not asked again until this runs out (:data:`ASK_PREPARED`)."""

    @property
    def inc(self) -> bytes | None:
        """Its incarnation (:data:`INCARNATION`): minted by its holder at ``dtx.start``; a
        part's is its holder's, learnt when it joined. None: a record from before."""
        return incarnation(self.held)

    @property
    def part(self) -> bool:
        """A part of a branch another worker holds: this worker's sessions' work in it,
        prepared, committed and rolled back when that worker's branch is."""
        return self.ended is not None

    @property
    def prepared(self) -> bool:
        """Prepared for a two-phase commit (and so in the store)."""
        return self.held.prepared

    @property
    def associated(self) -> bool:
        return bool(self.active or self.suspended or self.elsewhere)

    def status(self) -> int:
        if self.timed_out:
            return XA["xa-rbtimeout"]
        return XA["xa-rbrollback"] if self.rollback_only else XA["xa-ok"]

    def session_ended(self, s: Amqp010Session) -> None:
        """``s`` ended while associated with this branch: it can only roll back."""
        self.active.discard(s)
        self.suspended.discard(s)
        self.rollback_only = True
        if self.ended is not None:
            self.ended()


class Branches:
    """The broker's transaction branches by xid (:meth:`of`: the broker's own).

    With several workers a branch is kept by the worker whose session started it, yet
    it is the broker's: a command naming an xid this worker does not hold is asked of the
    others (:attr:`Broker.others <amqp10.broker.core.Broker.others>`, the question
    :data:`BRANCH_QUESTION`), and the worker that holds it applies it and answers; a
    ``recover`` lists every worker's prepared branches (:data:`RECOVER_QUESTION`). What
    a branch did on other workers' queues is prepared, committed and rolled back there
    with it (:attr:`Broker.coordinator <amqp10.broker.core.Broker.coordinator>`).

    A session of another worker joins a branch (``dtx.start`` with ``join``) by asking
    the holder (``join``: it counts the association, so the branch is not prepared while
    it lasts, and ``end`` ends it); its work is held on its own worker, in a *part* of the
    branch (:attr:`parts`, a :class:`Branch` with :attr:`Branch.part`), as a branch's own
    is. The holder's prepare asks every worker with a part to prepare it first
    (:data:`PART_QUESTION`: written to that worker's store, its own parts on other
    workers' queues prepared with it, as a branch's are) and prepares its own only once
    all have; its commit (its rollback, once they were asked to prepare: before, they are
    told once, nothing stored) stores that it committed (rolled back) the branch
    (:data:`COMMITTED_OWNER`; :data:`ROLLED_BACK_OWNER`) in the batch of its own record's
    commit (rollback), then tells the parts, again until every other worker answered. A
    part prepared before a restart comes back from its worker's store and is decided with
    its branch.

    After a crash, or a worker down at the holder's word (its question is bounded by the
    control links'), the parts are settled by asking again: a worker holding a prepared
    part asks the outcome of its branch every :data:`ASK_AGAIN` seconds
    (:data:`OUTCOME_QUESTION`; answered *wait* while the holder prepares it, *prepared*
    once its prepare is stored (then asked only every :data:`ASK_PREPARED` seconds: the
    holder tells it), *commit* once it committed, and rolled back when every worker is up
    and none knows it: its holder crashed before its own prepare was stored); a holder that
    decides a branch with parts stores that it did (:data:`COMMITTED_OWNER`,
    :data:`ROLLED_BACK_OWNER`, in the batch of its own commit or rollback) and tells every
    worker the outcome of its part again every :data:`ASK_AGAIN` seconds until every other
    worker answered, then forgets it."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.branches: dict[Xid, Branch] = {}
        self.parts: dict[Xid, Branch] = {}
        """Parts of branches other workers hold: the work of this worker's sessions in them."""
        self.decided: dict[Xid, HeldWork] = {}
        """Branches this worker committed or rolled back whose parts are not known all
        decided: the stored record of it (:data:`COMMITTED_OWNER`, :data:`ROLLED_BACK_OWNER`)."""
        self.storing: set[Xid] = set()
        """Those of :attr:`decided` whose record's write the store has not confirmed: their
        outcome is told to no part yet (a crash now brings the branch back prepared)."""
        self._again: Lease | None = None
        for key, held in recovered(broker, OWNER):  # prepared before a restart
            b = self.branches[key] = Branch(xid_struct(key), key, held)
            b.parts = None
            b.in_doubt = True
        for key, held in recovered(broker, PART_OWNER):
            self._part(key, held)
        for owner in (COMMITTED_OWNER, ROLLED_BACK_OWNER):
            for key, held in recovered(broker, owner):
                self.decided[key] = held
        broker.questions[BRANCH_QUESTION] = self._answer_branch
        broker.questions[RECOVER_QUESTION] = self._answer_recover
        broker.questions[PART_QUESTION] = self._answer_part
        broker.questions[OUTCOME_QUESTION] = self._answer_outcome
        self.ask_again()

    @classmethod
    def of(cls, broker: Broker) -> Branches:
        return broker.shared("amqp010.dtx-branches", lambda: cls(broker))

    def start(self, xid: Compound, key: Xid) -> Branch:
        inc = os.urandom(INC_LEN)
        held = HeldWork(owner_of(OWNER, inc), store_id(key, inc), self.broker.journal)
        b = self.branches[key] = Branch(xid, key, held)
        self.set_timeout(b, DEFAULT_TIMEOUT)
        return b

    def _part(self, key: Xid, held: HeldWork | None = None) -> Branch:
        """This worker's part of the branch of ``key`` another worker holds (made if new: its
        incarnation, and so its store id, set once its holder answered the join)."""
        part = self.parts.get(key)
        if part is None:
            held = held or HeldWork(PART_OWNER, txn_id(key), self.broker.journal)
            b = part = self.parts[key] = Branch(xid_struct(key), key, held)
            b.ended = lambda: self.ask_others("end", key, {"fail": True, "inc": _hex(b.inc)}, lambda answer: None)
        return part

    def join(self, key: Xid, answered: Answered[Fields]) -> Branch:
        """A session of this worker joins the branch of ``key`` another worker holds: this
        worker's part of it; ``answered`` with the holder's answer once it counted the
        session (the branch's status; an error if none holds it, or it is prepared). A part
        kept here of another incarnation of the xid (an old branch's, its holder gone) is not
        the new branch's: the join is refused not-allowed while it is kept (a prepared one
        until it is decided, its outcome asked: :data:`OUTCOME_QUESTION`; one neither prepared
        nor associated is rolled back at once, so the join asked again makes a new part)."""
        known = key in self.parts
        part = self._part(key)

        def joined(answer: Callable[[], Fields]) -> None:
            fields = answer()
            if "error" in fields:
                if not known and not part.associated and self.parts.get(key) is part:
                    del self.parts[key]  # (made for this join: nothing in it)
                answered(lambda: fields)
                return
            inc = _unhex(fields.get("inc"))
            if known and part.inc != inc:  # (an old branch's part: refused, its count undone)
                self.ask_others("end", key, {"inc": _hex(inc)}, lambda answer: None)
                if not part.prepared and not part.associated:  # (nothing decides it: it goes now)
                    del self.parts[key]
                    part.held.rollback()
                text = f"a part of an earlier branch {_show(key)} is kept here until it is decided"
                answered(lambda: {"error": ["not-allowed", text]})
                return
            if not known:  # (new: of its holder's incarnation)
                part.held.owner, part.held.txn_id = owner_of(PART_OWNER, inc), store_id(key, inc)
            answered(lambda: fields)

        self.ask_others("join", key, {"part": not known}, joined)
        return part

    def forget(self, b: Branch) -> None:
        self._drop_lease(b)
        if self.branches.pop(b.key, None) is b:
            self.broker.default.share("unplace", placement_name(b.key))  # (workers > 1: claim)

    def claim(self, key: Xid, answered: Answered[bool]) -> None:
        """With several workers: whether a new branch of ``key`` is this worker's to make.
        Not if another worker holds one (asked: :data:`BRANCH_QUESTION`, which finds a
        branch recovered from a store too); else its name is placed on this worker in the
        metadata's one order and ``answered`` once the order decided: the first placement
        stands (workers/placing.py), so of two workers that start one xid at the same
        instant (each asked the other before either made it) one makes it. Not while a
        worker keeps something of an old branch of ``key`` (:meth:`kept`). Not once this
        worker's store wrote what it has outstanding: a branch not prepared is in memory
        only (as one worker's ``dtx.start`` is answered at once)."""
        vhost = self.broker.default
        name = placement_name(key)

        def decided() -> None:
            answered(lambda: vhost.elsewhere(name) is None)

        def known(answer: Callable[[], Fields]) -> None:
            if "error" not in answer():  # (another worker's)
                answered(lambda: False)
                return
            vhost.share("place", name)  # (here at once; undone if another's came first)
            metadata = self.broker.metadata
            if metadata is None or not metadata.hold(decided):
                decided()

        if self.kept(key):
            answered(lambda: False)
            return
        self.ask_others("known", key, {}, known)

    def kept(self, key: Xid) -> bool:
        """Whether this worker keeps something of a branch of ``key`` it does not hold: the
        record that it decided one whose parts are not all told (:attr:`decided`), or a
        prepared part of one not decided. Its xid is not new meanwhile (:meth:`claim`)."""
        part = self.parts.get(key)
        return key in self.decided or (part is not None and part.prepared)

    def set_timeout(self, b: Branch, seconds: int) -> None:
        self._drop_lease(b)
        b.timeout = seconds
        if seconds > 0 and not b.prepared:
            b.lease = self.broker.leases.take(seconds, lambda: self._timed_out(b))

    def _drop_lease(self, b: Branch) -> None:
        if b.lease is not None:
            self.broker.leases.drop(b.lease)
            b.lease = None

    def _timed_out(self, b: Branch) -> None:
        b.lease = None
        if b.prepared or self.branches.get(b.key) is not b:
            return
        b.timed_out = b.rollback_only = True
        b.elsewhere = 0  # (their workers may be gone, saying nothing: it is rolled back without them)
        b.held.rollback()

    # -- the commands on a branch, wherever it is asked from -------------------------------------
    def command(self, op: str, b: Branch, args: Mapping[str, Any]) -> Start:
        """Command ``op`` (``prepare``, ``commit``, ``rollback``, ``forget``, ``get-timeout``,
        ``set-timeout``) on ``b`` with ``args`` (``one_phase``, ``timeout``): refused now
        (:class:`CommandError`) or how to apply it, ``start(reply)``; ``reply`` gets the
        result's fields once what it wrote is stored (everywhere it reached)."""
        if op == "known":  # (another worker's dtx.start of its xid)
            return lambda reply: reply({})
        if op == "join":  # (a session of another worker: its work is that worker's part)
            if b.prepared:
                raise CommandError("illegal-state", f"transaction branch {_show(b.key)} is prepared")

            def join(reply: Reply) -> None:
                b.elsewhere += 1
                if args.get("part") and b.parts is not None:
                    b.parts += 1
                reply({"status": b.status(), "inc": _hex(b.inc)})

            return join
        if op == "end":  # (that session's dtx.end, or its end while associated)

            def end(reply: Reply) -> None:
                if "inc" in args and args["inc"] != _hex(b.inc):  # (a session of an old branch's part)
                    reply({"status": XA["xa-rbrollback"]})
                    return
                if not args.get("suspend"):
                    b.elsewhere = max(0, b.elsewhere - 1)
                if args.get("fail"):
                    b.rollback_only = True
                reply({"status": b.status()})

            return end
        if op == "get-timeout":
            return lambda reply: reply({"timeout": b.timeout})
        if op == "set-timeout":
            seconds = int(args.get("timeout", 0) or 0)
            if seconds > MAX_TIMEOUT:
                raise CommandError(
                    "invalid-argument", f"a dtx timeout of {seconds}s is above the most, {MAX_TIMEOUT}s"
                )

            def set_timeout(reply: Reply) -> None:
                self.set_timeout(b, seconds)
                reply({})

            return set_timeout
        if b.associated:
            raise CommandError(
                "illegal-state",
                f"transaction branch {_show(b.key)} is still associated with a session",
            )
        status = b.status()
        if op == "prepare":
            return self._prepare(b, status)
        if op == "commit":
            return self._commit(b, status, one_phase=bool(args.get("one_phase")))
        if op == "rollback":
            status = XA["xa-rbtimeout"] if b.timed_out else XA["xa-ok"]
            return lambda reply: self._decide(b, False, lambda: reply({"status": status}))
        if op == "forget":
            return lambda reply: self._decide(b, False, lambda: reply({}))
        raise CommandError("not-implemented", f"dtx.{op} is not a command on a branch")  # pragma: no cover

    def _prepare(self, b: Branch, status: int) -> Start:
        if status != XA["xa-ok"]:
            return lambda reply: reply({"status": status})

        def start(reply: Reply) -> None:
            def own(parts_prepared: bool) -> None:  # (after the other workers' parts of it, if any)
                if not parts_prepared:
                    self._decide(b, False, lambda: reply({"status": XA["xa-rbrollback"]}))
                    return

                def done(prepared: bool) -> None:
                    if prepared:
                        b.in_doubt = True
                        self.set_timeout(b, b.timeout)  # (a prepared branch does not time out)
                        reply({"status": XA["xa-ok"]})
                    else:  # a part on another worker's queue could not be prepared: it rolls back
                        self._decide(b, False, lambda: reply({"status": XA["xa-rbrollback"]}))

                self.prepare_work(b.held, done)

            self._prepare_parts(b, own)

        return start

    def prepare_work(self, held: HeldWork, done: Callable[[bool], None]) -> None:
        """Prepare ``held`` (a branch's, or a part's), with what it reaches on other
        workers' queues (one store batch with their record): ``done(True)`` once it is
        stored; ``done(False)`` if a part elsewhere could not be prepared (nothing of it
        is: the caller rolls ``held`` back)."""

        def prepared(answer: Callable[[], None]) -> None:
            try:
                answer()
            except ModelError:
                done(False)
                return
            held.prepare(lambda: done(True))

        coordinator = self.broker.coordinator
        if coordinator is None or not coordinator.prepare(held.txn_id, held.reached(), held.taken, prepared):
            held.prepare(lambda: done(True))

    def _prepare_parts(self, b: Branch, then: Callable[[bool], None]) -> None:
        """Ask the other workers' parts of ``b`` to prepare; ``then(ok)`` once each has: ``ok``
        when as many as joined it answered xa-ok and none answered otherwise. At once when
        none can have a part."""
        others = self.broker.others
        expected = b.parts
        if others is None or not expected:
            then(True)
            return

        def answered(answers: list[Fields]) -> None:
            statuses = [int(a["status"]) for a in answers if "status" in a]
            then(len(statuses) >= expected and all(st == XA["xa-ok"] for st in statuses))

        b.parts_asked = True
        self._ask_parts(b.key, b.inc, "prepare", answered)

    def _ask_parts(self, key: Xid, inc: bytes | None, op: str, answered: Callable[[list[Fields]], None]) -> None:
        """Ask every other worker's part of the branch ``key``, incarnation ``inc``, to ``op``:
        ``answered`` with the answers of those that answered (a worker without a part of it:
        ``{}``, but to ``prepare``)."""
        others = self.broker.others
        assert others is not None

        def got(answers: list[Any]) -> None:
            answered([a for a in answers if isinstance(a, dict)])

        others.ask(PART_QUESTION, {"op": op, "xid": _wire(key), "inc": _hex(inc)}, got)

    def _answer_part(self, args: Mapping[str, Any], reply: Callable[[Any], None]) -> None:
        """The holder of a branch tells this worker's part of it to ``op`` (None: no part here,
        or only one of another incarnation of its xid)."""
        key = _unwire(args["xid"])
        part = self.parts.get(key)
        op = str(args["op"])
        if part is None or _hex(part.inc) != args.get("inc"):
            reply(None if op == "prepare" else {})
            return
        if op == "prepare":

            def done(prepared: bool) -> None:
                if prepared:
                    log.debug("dtx branch %s: this worker's part prepared", _show(key))
                    self.ask_again()  # (its outcome is asked until it is decided)
                    reply({"status": XA["xa-ok"]})
                else:
                    self.parts.pop(key, None)
                    part.held.rollback(lambda: reply({"status": XA["xa-rbrollback"]}))

            if part.associated:  # (a session joined after the holder's prepare began)
                reply({"status": XA["xa-rbrollback"]})
            else:
                self.prepare_work(part.held, done)
            return
        self._finish_part(key, op == "commit", lambda: reply({"status": XA["xa-ok"]}))

    def _finish_part(self, key: Xid, commit: bool, then: Callable[[], None]) -> None:
        """Commit or roll back this worker's part of the branch ``key``; ``then`` once stored
        (at once if it is not here: decided already)."""
        part = self.parts.pop(key, None)
        if part is None:
            then()
            return
        if part.quiet is not None:
            self.broker.leases.drop(part.quiet)
            part.quiet = None
        self.finish_work(part.held, commit, then)

    def _commit(self, b: Branch, status: int, *, one_phase: bool) -> Start:
        if status != XA["xa-ok"]:
            return lambda reply: self._decide(b, False, lambda: reply({"status": status}))
        if one_phase and b.prepared:
            raise CommandError(
                "illegal-state",
                f"transaction branch {_show(b.key)} is prepared: commit it in two phases",
            )
        if not one_phase and not b.prepared:
            raise CommandError(
                "illegal-state",
                f"transaction branch {_show(b.key)} is not prepared: commit it in one phase",
            )
        if b.prepared:
            return lambda reply: self._decide(b, True, lambda: reply({"status": XA["xa-ok"]}))
        if b.parts:  # parts on other workers: prepared with its own, then committed (two phases)
            prepare = self._prepare(b, status)

            def prepare_then_commit(reply: Reply) -> None:
                def prepared(fields: Fields) -> None:
                    if fields.get("status") != XA["xa-ok"]:
                        reply(fields)
                    else:
                        self._decide(b, True, lambda: reply({"status": XA["xa-ok"]}))

                prepare(prepared)

            return prepare_then_commit

        def one_phase_commit(reply: Reply) -> None:
            self.forget(b)

            def answered(answer: Callable[[], None]) -> None:
                try:
                    answer()
                except ModelError:  # a part elsewhere could not be prepared: nothing was applied
                    b.held.rollback(lambda: reply({"status": XA["xa-rbrollback"]}))
                    return
                reply({"status": XA["xa-ok"]})

            coordinator = self.broker.coordinator
            if coordinator is None or not coordinator.commit(b.held.reached(), b.held.taken, b.held.commit, answered):
                b.held.commit(lambda: reply({"status": XA["xa-ok"]}))

        return one_phase_commit

    def _decide(self, b: Branch, commit: bool, then: Callable[[], None]) -> None:
        """Commit or roll back ``b`` with its parts on other workers; ``then`` once stored
        and the parts told."""
        self.forget(b)
        if b.parts == 0 or self.broker.others is None:
            self.finish_work(b.held, commit, then)
            return
        if not (commit or b.prepared or b.parts_asked):  # no part of it prepared: none stored elsewhere
            # its parts told once, nothing stored (the xid free at once)
            self._ask_parts(b.key, b.inc, "rollback", lambda answers: self.finish_work(b.held, False, then))
            return
        # with parts: its record of the outcome and its own commit or rollback in one store
        # batch (nothing yields between), kept until every other worker answered; once that
        # batch is stored (a crash before it leaves the branch as it was), the parts are told.
        # Its own first: the record has the id of its own prepared record, which that removes
        owner = owner_of(COMMITTED_OWNER if commit else ROLLED_BACK_OWNER, b.inc)
        record = self.decided[b.key] = HeldWork(owner, store_id(b.key, b.inc), self.broker.journal)
        both = _after(2, then)  # (the parts told, and its own outcome stored)
        self.finish_work(b.held, commit, both)
        self.storing.add(b.key)

        def stored() -> None:
            self.storing.discard(b.key)
            self._tell_decided(b.key, both)

        record.prepare(stored)

    def _tell_decided(self, key: Xid, then: Callable[[], None] = nothing) -> None:
        """Tell every other worker the outcome of its part of the branch ``key`` this worker
        decided (:attr:`decided`); ``then`` once they answered. Once every one has, its record
        goes; else they are told again (:meth:`ask_again`)."""
        others = self.broker.others
        assert others is not None
        commit = _committed(self.decided[key])

        def answered(answers: list[Fields]) -> None:
            failed = sum(1 for a in answers if "status" in a and int(a["status"]) != XA["xa-ok"])
            if failed:  # (nothing more to do for it here: its worker's store keeps what it did)
                log.warning("transaction branch %s: %d of its parts on other workers did not %s",
                            _show(key), failed, "commit" if commit else "roll back")  # fmt: skip
            record = self.decided.get(key)
            if record is not None and len(answers) >= others.count:
                del self.decided[key]
                record.commit()  # (the record goes)
            elif record is not None:
                log.info("dtx branch %s %s: the parts of workers that did not answer are told again",
                         _show(key), "committed" if commit else "rolled back")  # fmt: skip
                self.ask_again()
            then()

        self._ask_parts(key, incarnation(self.decided[key]), "commit" if commit else "rollback", answered)

    # -- settling what a worker down missed ----------------------------------------------------
    def ask_again(self) -> None:
        """In :data:`ASK_AGAIN` seconds (if not due already): ask the outcome of the branches
        of this worker's prepared parts (not those :attr:`Branch.quiet`), and tell the parts
        of the branches it decided (then again after a round that did not settle one)."""
        if self._again is None and (self.decided or any(p.prepared and p.quiet is None for p in self.parts.values())):
            self._again = self.broker.leases.take(ASK_AGAIN, self._ask_now)

    def _ask_now(self) -> None:
        self._again = None
        others = self.broker.others
        if others is None:  # (not linked to the others yet)
            self.ask_again()
            return
        for key in list(self.decided):
            if key not in self.storing:  # (told once stored)
                self._tell_decided(key)
        for key, part in list(self.parts.items()):
            if part.prepared and part.quiet is None:
                log.debug("dtx branch %s: this worker's part asks its outcome", _show(key))
                args = {"xid": _wire(key), "inc": _hex(part.inc)}
                others.ask(OUTCOME_QUESTION, args, self._outcome(key, part, others.count))

    def _outcome(self, key: Xid, asking: Branch, count: int) -> Callable[[list[Any]], None]:
        """What to do with this worker's prepared part ``asking`` of the branch ``key`` once
        the other workers (``count``) answered its outcome (:data:`OUTCOME_QUESTION`)."""

        def answered(answers: list[Any]) -> None:
            outcomes = {str(a.get("outcome")) for a in answers if isinstance(a, dict)}
            part = self.parts.get(key)
            if part is not asking:  # (decided meanwhile)
                return
            if "commit" in outcomes:
                commit = True
            elif "prepared" in outcomes:  # its holder will tell it: asked no more meanwhile
                if part is not None and part.prepared and part.quiet is None:
                    part.quiet = self.broker.leases.take(ASK_PREPARED, lambda: self._ask_later(part))
                return
            elif "wait" in outcomes or len(answers) < count:  # (its holder may be down)
                self.ask_again()
                return
            else:
                commit = False
            if part is not None and part.prepared:
                log.info("dtx branch %s: this worker's part %s", _show(key),
                         "committed, as its holder says" if commit else "rolled back: no worker holds the branch")  # fmt: skip
                self._finish_part(key, commit, nothing)

        return answered

    def _ask_later(self, part: Branch) -> None:
        """:data:`ASK_PREPARED` passed since ``part``'s holder said it keeps its branch prepared."""
        part.quiet = None
        self.ask_again()

    def _answer_outcome(self, args: Mapping[str, Any], reply: Callable[[Any], None]) -> None:
        """Another worker's prepared part asks the outcome of its branch (:data:`OUTCOME_QUESTION`):
        of this incarnation of its xid (another one's is not its branch)."""
        key, inc = _unwire(args["xid"]), args.get("inc")
        record, b = self.decided.get(key), self.branches.get(key)
        if record is not None and _hex(incarnation(record)) != inc:
            record = None
        if b is not None and _hex(b.inc) != inc:
            b = None
        if record is not None and key in self.storing:  # (a crash now: the branch prepared again)
            outcome = "wait"
        elif record is not None:
            outcome = "commit" if _committed(record) else "rollback"
        elif b is None:
            outcome = "rollback"
        else:
            outcome = "prepared" if b.in_doubt else "wait"
        reply({"outcome": outcome})

    def finish_work(self, held: HeldWork, commit: bool, then: Callable[[], None]) -> None:
        """Commit or roll back ``held`` (a branch's, or a part's), with what it reaches on
        other workers' queues; ``then`` once stored."""
        coordinator = self.broker.coordinator
        apply = held.commit if commit else held.rollback
        if coordinator is None or not coordinator.finish(held.txn_id, commit, apply, lambda answer: then()):
            apply(then)

    # -- other workers' questions, and asking them ---------------------------------------------
    def ask_others(self, op: str, key: Xid, args: Mapping[str, Any], answered: Answered[Fields]) -> None:
        """Put command ``op`` on the branch ``key`` to the other workers; ``answered`` with
        the fields of the answer of the one that holds it (none does: not-found)."""
        others = self.broker.others
        assert others is not None

        def got(answers: list[Any]) -> None:
            found = next((a for a in answers if isinstance(a, dict)), None)
            if found is None:
                found = {"error": ["not-found", f"no transaction branch {_show(key)}"]}
            answered(lambda: found)

        others.ask(BRANCH_QUESTION, {"op": op, "xid": _wire(key), **args}, got)

    def _answer_branch(self, args: Mapping[str, Any], reply: Callable[[Any], None]) -> None:
        """Another worker's client names a branch: applied here if it is here (None: it is not)."""
        key = _unwire(args["xid"])
        b = self.branches.get(key)
        if b is None:  # (an xid of which something is kept here is known still)
            reply({} if args["op"] == "known" and self.kept(key) else None)
            return
        try:
            start = self.command(str(args["op"]), b, args)
        except CommandError as exc:
            reply({"error": [exc.error, str(exc)]})
            return
        start(reply)

    def prepared(self) -> list[Compound]:
        """The xids of the branches prepared here."""
        return [b.xid for b in self.branches.values() if b.prepared]

    def _answer_recover(self, args: Mapping[str, Any], reply: Callable[[Any], None]) -> None:
        reply([_wire(b.key) for b in self.branches.values() if b.prepared])


def _after(n: int, then: Callable[[], None]) -> Callable[[], None]:
    """A callback that calls ``then`` at its ``n``-th call (``n`` things done, in any order)."""
    left = n

    def one() -> None:
        nonlocal left
        left -= 1
        if left == 0:
            then()

    return one


def xid_struct(key: Xid) -> Compound:
    fmt, gid, bid = key
    return result_struct("xid", format=fmt, global_id=gid, branch_id=bid)


def _wire(key: Xid) -> list[Any]:
    """``key`` as a JSON value (for the other workers)."""
    fmt, gid, bid = key
    return [fmt, gid.hex(), bid.hex()]


def _hex(inc: bytes | None) -> str | None:
    """An incarnation as a JSON value (for the other workers)."""
    return None if inc is None else inc.hex()


def _unhex(value: Any) -> bytes | None:
    return None if value is None else bytes.fromhex(str(value))


def _committed(record: HeldWork) -> bool:
    """Whether ``record`` (:attr:`Branches.decided`) is of a commit (else of a rollback)."""
    return record.owner in (COMMITTED_OWNER, COMMITTED_OWNER + INCARNATION)


def _unwire(value: Any) -> Xid:
    fmt, gid, bid = value
    return int(fmt), bytes.fromhex(str(gid)), bytes.fromhex(str(bid))


def _show(key: Xid) -> str:
    fmt, gid, bid = key
    return f"({fmt}, {gid!r}, {bid!r})"


def _result(op: str, fields: Fields) -> Compound | None:
    """The result of command ``op`` whose fields are ``fields`` (an error in them raised)."""
    error = fields.get("error")
    if error is not None:
        raise CommandError(str(error[0]), str(error[1]))
    if op == "get-timeout":
        return result_struct("get-timeout-result", timeout=int(fields["timeout"]))
    if "status" in fields:
        return result_struct("xa-result", status=int(fields["status"]))
    return None


class DtxCommands:
    """``dtx.select``, ``start``, ``end``, ``prepare``, ``commit``, ``rollback``,
    ``recover``, ``forget``, ``get-timeout``, ``set-timeout``."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx
        self.branches = Branches.of(ctx.broker)

    @staticmethod
    def _selected(s: Amqp010Session) -> None:
        if not s.dtx_selected:
            raise CommandError(
                "command-invalid", "the session is not selected for dtx (dtx.select)"
            )

    def select(self, s: Amqp010Session, c: Compound) -> None:
        s.dtx_selected = True

    def start(self, s: Amqp010Session, c: Compound) -> Compound | None:
        self._selected(s)
        join, resume = bool(c["join"]), bool(c["resume"])
        if join and resume:
            raise CommandError("command-invalid", "dtx.start with both join and resume")
        if s.branch is not None:
            raise CommandError(
                "illegal-state", "the session is associated with a transaction already"
            )
        xid = c.get("xid")
        key = xid_key(xid)
        assert isinstance(xid, Compound)
        b = self.branches.branches.get(key)
        if resume:
            b = b or self.branches.parts.get(key)
            if b is None or s not in b.suspended:
                raise CommandError(
                    "illegal-state",
                    f"transaction branch {_show(key)} is not suspended by this session",
                )
            b.suspended.discard(s)
            s.suspended.remove(b)
        elif join:
            if b is None and self.ctx.broker.others is not None:  # another worker's, or none
                self._join_elsewhere(s, key)
                return None
            if b is None:
                raise CommandError("not-allowed", f"no transaction branch {_show(key)} to join")
        elif b is not None:
            raise CommandError("not-allowed", f"transaction branch {_show(key)} is known already")
        elif self.ctx.broker.others is not None:  # (another worker may hold it: decided first)

            def claimed(answer: Callable[[], bool]) -> Compound | None:
                if not answer() or key in self.branches.branches:
                    raise CommandError("not-allowed", f"transaction branch {_show(key)} is known already")
                b = self.branches.start(xid, key)
                if s.closed:  # (ended meanwhile: what it claimed goes)
                    self.branches.forget(b)
                    return None
                return self._associate(s, b)

            self.ctx.later(lambda answered: self.branches.claim(key, answered), claimed)
            return None
        else:
            b = self.branches.start(xid, key)
        if b.prepared:
            raise CommandError("illegal-state", f"transaction branch {_show(key)} is prepared")
        return self._associate(s, b)

    def _join_elsewhere(self, s: Amqp010Session, key: Xid) -> None:
        """``s`` joins the branch of ``key`` another worker holds (if one does): its work
        goes into this worker's part of it (:meth:`Branches.join`)."""
        part: Branch | None = None  # (this worker's part, once asked)

        def ask(answered: Answered[Fields]) -> None:
            nonlocal part
            part = self.branches.join(key, answered)

        def joined(answer: Callable[[], Fields]) -> Compound | None:
            fields = answer()
            error = fields.get("error")
            if error is not None:
                code, text = str(error[0]), str(error[1])
                if code == "not-found":
                    code, text = "not-allowed", f"no transaction branch {_show(key)} to join"
                raise CommandError(code, text)
            b = part
            assert b is not None
            if s.closed:  # (ended meanwhile: the holder counted an association that is gone)
                b.active.add(s)
                b.session_ended(s)
                return None
            self._associate(s, b)
            return result_struct("xa-result", status=int(fields["status"]))  # (the holder's)

        self.ctx.later(ask, joined)

    @staticmethod
    def _associate(s: Amqp010Session, b: Branch) -> Compound:
        b.active.add(s)
        s.branch = b
        return result_struct("xa-result", status=b.status())

    def end(self, s: Amqp010Session, c: Compound) -> Compound | None:
        self._selected(s)
        fail, suspend = bool(c["fail"]), bool(c["suspend"])
        if fail and suspend:
            raise CommandError("command-invalid", "dtx.end with both suspend and fail")
        key = xid_key(c.get("xid"))
        b = s.branch
        if b is None or b.key != key:
            raise CommandError(
                "illegal-state",
                f"the session is not associated with transaction branch {_show(key)}",
            )
        s.branch = None
        b.active.discard(s)
        if fail:
            b.rollback_only = True
        elif suspend:
            b.suspended.add(s)
            s.suspended.append(b)
        if b.part:  # (a branch another worker holds: it ends the association, and says its status)
            args = {"fail": fail, "suspend": suspend, "inc": _hex(b.inc)}
            self.ctx.later(lambda answered: self.branches.ask_others("end", key, args, answered), lambda a: _result("end", a()))
            return None
        return result_struct("xa-result", status=b.status())

    # prepare, commit, rollback and forget are answered once what they wrote is durable
    def prepare(self, s: Amqp010Session, c: Compound) -> None:
        self._on_branch(s, c, "prepare")

    def commit(self, s: Amqp010Session, c: Compound) -> None:
        self._on_branch(s, c, "commit")

    def rollback(self, s: Amqp010Session, c: Compound) -> None:
        self._on_branch(s, c, "rollback")

    def forget(self, s: Amqp010Session, c: Compound) -> None:
        self._on_branch(s, c, "forget")

    def get_timeout(self, s: Amqp010Session, c: Compound) -> Compound | None:
        return self._on_branch(s, c, "get-timeout")

    def set_timeout(self, s: Amqp010Session, c: Compound) -> None:
        self._on_branch(s, c, "set-timeout")

    def _on_branch(self, s: Amqp010Session, c: Compound, op: str) -> Compound | None:
        """Command ``op`` on the branch ``c`` names: here, or on the worker that holds it."""
        key = xid_key(c.get("xid"))
        args = {"one_phase": bool(c.get("one_phase")), "timeout": int(c.get("timeout", 0) or 0)}
        b = self.branches.branches.get(key)
        if b is None:
            if self.ctx.broker.others is None:
                raise CommandError("not-found", f"no transaction branch {_show(key)}")
            # another worker's, or none: the one that holds it answers
            self.ctx.later(lambda answered: self.branches.ask_others(op, key, args, answered), lambda a: _result(op, a()))
            return None
        start = self.branches.command(op, b, args)
        if op in ("get-timeout", "set-timeout"):  # (answered at once)
            got: list[Fields] = []
            start(got.append)
            return _result(op, got[0])
        if self.ctx.broker.coordinator is None:  # one worker: completed once stored
            start(lambda fields: s.complete(c, _result(op, fields)))
        else:  # parts on other workers answer later: the connection's next commands wait for it
            self.ctx.later(lambda answered: start(lambda fields: answered(lambda: fields)), lambda a: _result(op, a()))
        return None

    def recover(self, s: Amqp010Session, c: Compound) -> Compound | None:
        """The prepared branches: this worker's, and every other worker's."""
        mine = self.branches.prepared()
        others = self.ctx.broker.others
        if others is None:
            return result_struct("recover-result", in_doubt=mine)

        def ask(answered: Answered[list[Any]]) -> None:
            others.ask(RECOVER_QUESTION, {}, lambda answers: answered(lambda: answers))

        def then(answer: Callable[[], list[Any]]) -> Compound:
            theirs = [xid_struct(_unwire(w)) for listed in answer() for w in listed]
            return result_struct("recover-result", in_doubt=[*mine, *theirs])

        self.ctx.later(ask, then)
        return None
