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

The error codes are Qpid's broker's, which its conformance tests check: a session not
selected, ``join`` with ``resume``, and ``suspend`` with ``fail`` are ``command-invalid``;
an xid already known is ``not-allowed``; an unknown xid ``not-found``; a branch still
associated, or ended twice, or committed in the wrong phase, ``illegal-state``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ...amqp010 import Compound, result_struct
from ...amqp010.spec import ENUMS
from ..core import Broker, HeldWork, Lease
from .context import Amqp010Context, CommandError
from .session import Amqp010Session

__all__ = ["DEFAULT_TIMEOUT", "MAX_TIMEOUT", "OWNER", "Branch", "Branches", "DtxCommands"]

XA: Final = ENUMS["dtx.xa-status"]
DEFAULT_TIMEOUT: Final = 60
"""Seconds a branch has to be prepared unless ``dtx.set-timeout`` says otherwise (Qpid's default)."""
MAX_TIMEOUT: Final = 3600
"""The longest timeout ``dtx.set-timeout`` takes (Qpid's default ``--dtx-max-timeout``)."""

Xid = tuple[int, bytes, bytes]
"""An xid as a key: (format, global id, branch id)."""
OWNER: Final = "amqp010.dtx"
"""What the store calls the branches of this front end (:class:`~amqp10.broker.core.HeldWork`'s owner)."""


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

    @property
    def prepared(self) -> bool:
        """Prepared for a two-phase commit (and so in the store)."""
        return self.held.prepared

    @property
    def associated(self) -> bool:
        return bool(self.active or self.suspended)

    def status(self) -> int:
        if self.timed_out:
            return XA["xa-rbtimeout"]
        return XA["xa-rbrollback"] if self.rollback_only else XA["xa-ok"]

    def session_ended(self, s: Amqp010Session) -> None:
        """``s`` ended while associated with this branch: it can only roll back."""
        self.active.discard(s)
        self.suspended.discard(s)
        self.rollback_only = True


class Branches:
    """The broker's transaction branches by xid (:meth:`of`: the broker's own)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.branches: dict[Xid, Branch] = {}
        for held in broker.recovered_transactions(OWNER):  # prepared before a restart
            key = key_of(held.txn_id)
            fmt, gid, bid = key
            self.branches[key] = Branch(
                result_struct("xid", format=fmt, global_id=gid, branch_id=bid), key, held
            )

    @classmethod
    def of(cls, broker: Broker) -> Branches:
        return broker.shared("amqp010.dtx-branches", lambda: cls(broker))

    def start(self, xid: Compound, key: Xid) -> Branch:
        b = self.branches[key] = Branch(xid, key, HeldWork(OWNER, txn_id(key), self.broker.journal))
        self.set_timeout(b, DEFAULT_TIMEOUT)
        return b

    def known(self, xid: object) -> Branch:
        key = xid_key(xid)
        b = self.branches.get(key)
        if b is None:
            raise CommandError("not-found", f"no transaction branch {_show(key)}")
        return b

    def ended(self, xid: object) -> Branch:
        """The branch of ``xid``, which no session may be associated with."""
        b = self.known(xid)
        if b.associated:
            raise CommandError(
                "illegal-state",
                f"transaction branch {_show(b.key)} is still associated with a session",
            )
        return b

    def forget(self, b: Branch) -> None:
        self._drop_lease(b)
        self.branches.pop(b.key, None)

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
        b.held.rollback()


def _show(key: Xid) -> str:
    fmt, gid, bid = key
    return f"({fmt}, {gid!r}, {bid!r})"


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

    def start(self, s: Amqp010Session, c: Compound) -> Compound:
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
            if b is None or s not in b.suspended:
                raise CommandError(
                    "illegal-state",
                    f"transaction branch {_show(key)} is not suspended by this session",
                )
            b.suspended.discard(s)
            s.suspended.remove(b)
        elif join:
            if b is None:
                raise CommandError("not-allowed", f"no transaction branch {_show(key)} to join")
        elif b is not None:
            raise CommandError("not-allowed", f"transaction branch {_show(key)} is known already")
        else:
            b = self.branches.start(xid, key)
        if b.prepared:
            raise CommandError("illegal-state", f"transaction branch {_show(key)} is prepared")
        b.active.add(s)
        s.branch = b
        return result_struct("xa-result", status=b.status())

    def end(self, s: Amqp010Session, c: Compound) -> Compound:
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
        return result_struct("xa-result", status=b.status())

    # prepare, commit, rollback and forget are answered once what they wrote is durable
    def prepare(self, s: Amqp010Session, c: Compound) -> None:
        b = self.branches.ended(c.get("xid"))
        status = b.status()
        result = result_struct("xa-result", status=status)
        if status != XA["xa-ok"]:
            s.complete(c, result)
            return
        b.held.prepare(lambda: s.complete(c, result))
        self.branches.set_timeout(b, b.timeout)  # (a prepared branch does not time out)

    def commit(self, s: Amqp010Session, c: Compound) -> None:
        b = self.branches.ended(c.get("xid"))
        status = b.status()
        done = self._answer(s, c, status)
        if status != XA["xa-ok"]:
            b.held.rollback(done)
        elif c["one_phase"] and b.prepared:
            raise CommandError(
                "illegal-state",
                f"transaction branch {_show(b.key)} is prepared: commit it in two phases",
            )
        elif not c["one_phase"] and not b.prepared:
            raise CommandError(
                "illegal-state",
                f"transaction branch {_show(b.key)} is not prepared: commit it in one phase",
            )
        else:
            b.held.commit(done)
        self.branches.forget(b)

    def rollback(self, s: Amqp010Session, c: Compound) -> None:
        b = self.branches.ended(c.get("xid"))
        status = XA["xa-rbtimeout"] if b.timed_out else XA["xa-ok"]
        b.held.rollback(self._answer(s, c, status))
        self.branches.forget(b)

    @staticmethod
    def _answer(s: Amqp010Session, c: Compound, status: int) -> Callable[[], None]:
        result = result_struct("xa-result", status=status)
        return lambda: s.complete(c, result)

    def recover(self, s: Amqp010Session, c: Compound) -> Compound:
        prepared = [b.xid for b in self.branches.branches.values() if b.prepared]
        return result_struct("recover-result", in_doubt=prepared)

    def forget(self, s: Amqp010Session, c: Compound) -> None:
        b = self.branches.ended(c.get("xid"))
        b.held.rollback(lambda: s.complete(c))
        self.branches.forget(b)

    def get_timeout(self, s: Amqp010Session, c: Compound) -> Compound:
        return result_struct(
            "get-timeout-result", timeout=self.branches.known(c.get("xid")).timeout
        )

    def set_timeout(self, s: Amqp010Session, c: Compound) -> None:
        b = self.branches.known(c.get("xid"))
        seconds = int(c.get("timeout", 0) or 0)
        if seconds > MAX_TIMEOUT:
            raise CommandError(
                "invalid-argument", f"a dtx timeout of {seconds}s is above the most, {MAX_TIMEOUT}s"
            )
        self.branches.set_timeout(b, seconds)
