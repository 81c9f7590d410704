"""0-10 transactions at ``workers = 2``: ``dtx`` branches are the broker's, not the worker's
of the session that did their work, and a ``tx.commit`` over queues of both workers is
two-phase.

``amqp10 broker --workers 2`` on 127.0.0.1, a bare 0-10 peer on each worker (pinned by
``connection.start``'s server properties): a branch started on worker 0 moves a message
between a queue worker 1 owns and queues of both workers; a session on worker 1 prepares,
recovers, commits or rolls it back, and a prepared branch outlives a SIGKILL of every
process; a ``tx.commit`` on worker 0 that reaches worker 1's queues completes only once
worker 1 applied its part. Every wait is bounded. One test counts what happens over a
fixed window (``test_a_part_of_a_branch_left_prepared_asks_its_outcome_once_then_waits_to_be_told``:
the outcome questions asked in five rounds, ``5 * ASK_AGAIN`` seconds): a count over a fixed,
generous window, not a claim on speed; no other assertion depends on time.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from amqp10.broker.amqp010.dtx import ASK_AGAIN
from amqp10.broker.amqp010.frontend import WORKER_PROPERTY
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.test_workers import WAIT, Parent

from .test_amqp010_processes import UNLIMITED, counts, one_on_each, pinned, publish, refused
from .test_processes import owned_by

pytestmark = pytest.mark.slow

OK, RBROLLBACK, RBTIMEOUT = 0, 1, 2


def xid(name: bytes) -> object:
    return struct("xid", format=0, global_id=name, branch_id=b"b1")


def declare(p: SocketPeer, *names: str) -> None:
    for name in names:
        p.call("queue.declare", queue=name, durable=True)


def status(p: SocketPeer, command: str, **values: object) -> int:
    r = p.call(command, **values)
    assert r is not None
    return int(r["status"])


def in_doubt(p: SocketPeer) -> list[bytes]:
    r = p.call("dtx.recover")
    assert r is not None
    return sorted(bytes(x["global_id"]) for x in r["in_doubt"])


def take_first(p: SocketPeer, source: str) -> None:
    """Accept the first message of ``source`` in the transaction the session works in."""
    p.call("message.subscribe", queue=source, destination="taker", accept_mode=0, acquire_mode=0)
    p.call("message.flow", destination="taker", unit=0, value=1)
    p.call("message.flow", destination="taker", unit=1, value=UNLIMITED)
    (t,) = p.wait("message.transfer")
    assert t.body == b"first"
    p.call("message.accept", transfers=((t.id, t.id),))
    p.call("message.cancel", destination="taker")


def move(p: SocketPeer, x: object, source: str, targets: list[str]) -> None:
    """In branch ``x`` on ``p``: accept the first message of ``source``, publish "moved" to
    each of ``targets``; the branch ended (not prepared)."""
    p.call("dtx.select")
    assert status(p, "dtx.start", xid=x) == OK
    take_first(p, source)
    for target in targets:
        publish(p, target, b"moved", durable=True)
    assert status(p, "dtx.end", xid=x) == OK


def bodies(p: SocketPeer, queue: str, n: int) -> list[bytes]:
    """The first ``n`` messages of ``queue``, browsed (left there)."""
    p.call("message.subscribe", queue=queue, destination="look", accept_mode=1, acquire_mode=1)
    p.call("message.flow", destination="look", unit=0, value=n)
    p.call("message.flow", destination="look", unit=1, value=UNLIMITED)
    got = [t.body for t in p.wait("message.transfer", n)]
    p.call("message.cancel", destination="look")
    return got


def queues() -> tuple[str, str, str]:
    """A source queue worker 1 owns, and a target queue of each worker."""
    return owned_by(1, "dtxsource"), owned_by(0, "dtxtarget"), owned_by(1, "dtxtarget")


def fill(p: SocketPeer, source: str, *targets: str) -> None:
    declare(p, source, *targets)
    publish(p, source, b"first", durable=True)
    publish(p, source, b"second", durable=True)


def test_a_branch_started_on_one_worker_is_prepared_recovered_and_committed_from_the_other(broker: Parent) -> None:
    source, here, there = queues()
    with one_on_each(broker) as peers:
        fill(peers[1], source, here, there)
        move(peers[0], xid(b"moved"), source, [here, there])
        assert status(peers[1], "dtx.prepare", xid=xid(b"moved")) == OK
        assert in_doubt(peers[0]) == in_doubt(peers[1]) == [b"moved"]  # listed from either worker
        assert [counts(peers[1], q)[0] for q in (source, here, there)] == [1, 0, 0]  # held, not applied
        assert status(peers[1], "dtx.commit", xid=xid(b"moved"), one_phase=False) == OK
        # the commit's answer came once every part was applied: seen from either worker
        for p in peers.values():
            assert [counts(p, q)[0] for q in (source, here, there)] == [1, 1, 1]
            assert in_doubt(p) == []
        assert bodies(peers[0], source, 1) == [b"second"]


def test_a_prepared_branch_is_rolled_back_from_the_other_worker(broker: Parent) -> None:
    source, here, there = queues()
    with one_on_each(broker) as peers:
        fill(peers[0], source, here, there)
        move(peers[0], xid(b"undone"), source, [here, there])
        assert status(peers[0], "dtx.prepare", xid=xid(b"undone")) == OK
        assert status(peers[1], "dtx.rollback", xid=xid(b"undone")) == OK
        for p in peers.values():
            assert [counts(p, q)[0] for q in (source, here, there)] == [2, 0, 0]
            assert in_doubt(p) == []
        assert bodies(peers[1], source, 2) == [b"first", b"second"]
        # it is gone everywhere: committing it now finds no branch
        cid = peers[1].command("dtx.commit", xid=xid(b"undone"), one_phase=False)
        peers[1].flush()
        (exc,) = peers[1].wait("execution.exception")
        assert exc["command_id"] == cid and exc["error_code"] == 404


def test_a_branch_is_committed_in_one_phase_from_the_other_worker(broker: Parent) -> None:
    source, here, there = queues()
    with one_on_each(broker) as peers:
        fill(peers[1], source, here, there)
        move(peers[0], xid(b"one-phase"), source, [here, there])
        assert status(peers[1], "dtx.commit", xid=xid(b"one-phase"), one_phase=True) == OK
        for p in peers.values():
            assert [counts(p, q)[0] for q in (source, here, there)] == [1, 1, 1]


def test_an_xid_another_worker_holds_is_known_already(broker: Parent) -> None:
    with one_on_each(broker) as peers:
        declare(peers[0], "dtxknown")
        peers[0].call("dtx.select")
        assert status(peers[0], "dtx.start", xid=xid(b"taken")) == OK
        publish(peers[0], "dtxknown", b"held")
        peers[1].call("dtx.select")
        code, text = refused(peers[1], "dtx.start", 1, xid=xid(b"taken"))
        assert code == 530 and "known already" in text  # not-allowed, as on one broker
        assert status(peers[0], "dtx.end", xid=xid(b"taken")) == OK
        assert status(peers[0], "dtx.commit", xid=xid(b"taken"), one_phase=True) == OK
        assert counts(peers[0], "dtxknown")[0] == 1


@contextmanager
def killed_after(tmp_path: Path, prepare: Callable[[dict[int, SocketPeer]], None]) -> Iterator[dict[int, SocketPeer]]:
    """``prepare(peers)`` on a broker of ``tmp_path`` (a peer on each worker), every process
    SIGKILLed right after it, the broker started again: a peer on each of its workers."""
    broker = Parent(tmp_path)
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            prepare(peers)
    finally:
        broker.stop()  # SIGKILL: right after what prepare did was answered
    broker = Parent(tmp_path)
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            yield peers
    finally:
        broker.stop()


def test_a_prepared_branch_over_both_workers_outlives_a_sigkill_of_every_process(tmp_path: Path) -> None:
    source, here, there = queues()

    def prepare(peers: dict[int, SocketPeer]) -> None:
        fill(peers[1], source, here, there)
        move(peers[0], xid(b"killed"), source, [here, there])
        assert status(peers[0], "dtx.prepare", xid=xid(b"killed")) == OK

    with killed_after(tmp_path, prepare) as peers:
        assert in_doubt(peers[0]) == in_doubt(peers[1]) == [b"killed"]
        # its accepted message is still the branch's (acquired on worker 1), its publishes held
        assert [counts(peers[0], q)[0] for q in (source, here, there)] == [1, 0, 0]
        assert bodies(peers[0], source, 1) == [b"second"]
        assert status(peers[1], "dtx.commit", xid=xid(b"killed"), one_phase=False) == OK
        for p in peers.values():
            assert [counts(p, q)[0] for q in (source, here, there)] == [1, 1, 1]
            assert in_doubt(p) == []


def test_a_tx_commit_over_both_workers_completes_once_every_owner_applied_its_part(tmp_path: Path) -> None:
    """Worker 1 stopped while a session on worker 0 commits an accept of worker 1's queue and
    publishes to both workers' queues: the commit is two-phase (worker 0 asks worker 1 to
    prepare) and completes only after worker 1, let go, committed its part; then every
    count is the committed one, from either worker."""
    source, here, there = queues()
    broker = Parent(tmp_path, args=("--no-http", "--log-level", "debug"))
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            fill(peers[1], source, here, there)
            p = peers[0]
            p.call("tx.select")
            take_first(p, source)
            for q in (here, there):
                publish(p, q, b"committed", durable=True)
            pid = broker.worker_pids()[1]
            mark = len(broker.lines)
            os.kill(pid, signal.SIGSTOP)
            try:
                p.command("tx.commit")
                p.flush()
                broker.wait_for(r"worker=0 .*its parts asked to prepare on workers \[1\]", mark)
            finally:
                os.kill(pid, signal.SIGCONT)
            # (a command after it waits for the commit to complete)
            assert counts(p, there)[0] == 1
            for peer in peers.values():
                assert [counts(peer, q)[0] for q in (source, here, there)] == [1, 1, 1]
            assert bodies(peers[1], source, 1) == [b"second"]
    finally:
        broker.stop()


def joined_branch(peers: dict[int, SocketPeer], x: object, *, crossing: bool = True) -> tuple[str, str, str, str]:
    """Branch ``x`` started on worker 0 and joined by a session on worker 1, each taking the
    first message of a queue its own worker owns and publishing to the other's queue (work
    of both parts reaching both workers; not ``crossing``: to its own worker's); both
    sessions ended. The sources and the targets."""
    source0, source1 = owned_by(0, "dtxsource"), owned_by(1, "dtxsource")
    target0, target1 = owned_by(0, "dtxtarget"), owned_by(1, "dtxtarget")
    fill(peers[0], source0, target0)
    fill(peers[1], source1, target1)
    a, b = peers[0], peers[1]
    a.call("dtx.select")
    assert status(a, "dtx.start", xid=x) == OK
    take_first(a, source0)
    publish(a, target1 if crossing else target0, b"from-0", durable=True)
    b.call("dtx.select")
    assert status(b, "dtx.start", xid=x, join=True) == OK  # (before: not-allowed, no such branch)
    take_first(b, source1)
    publish(b, target0 if crossing else target1, b"from-1", durable=True)
    assert status(b, "dtx.end", xid=x) == OK
    # a session of worker 1 associated kept it from being prepared; now only worker 0's is
    assert status(a, "dtx.end", xid=x) == OK
    return source0, source1, target0, target1


def test_a_session_of_the_other_worker_joins_a_branch_and_its_work_commits_with_it(broker: Parent) -> None:
    x = xid(b"joined")
    with one_on_each(broker) as peers:
        queues = joined_branch(peers, x)
        for p in peers.values():  # nothing applied yet, the taken messages held
            assert [counts(p, q)[0] for q in queues] == [1, 1, 0, 0]
        assert status(peers[1], "dtx.prepare", xid=x) == OK
        assert in_doubt(peers[0]) == in_doubt(peers[1]) == [b"joined"]
        assert [counts(peers[0], q)[0] for q in queues] == [1, 1, 0, 0]
        assert status(peers[0], "dtx.commit", xid=x, one_phase=False) == OK
        for p in peers.values():  # every part applied once, seen from either worker
            assert [counts(p, q)[0] for q in queues] == [1, 1, 1, 1]
            assert in_doubt(p) == []
        source0, source1, target0, target1 = queues
        assert bodies(peers[1], source0, 1) == bodies(peers[0], source1, 1) == [b"second"]
        assert bodies(peers[1], target0, 1) == [b"from-1"]
        assert bodies(peers[0], target1, 1) == [b"from-0"]


def test_a_joined_branch_rolls_back_as_one(broker: Parent) -> None:
    x = xid(b"joined-undone")
    with one_on_each(broker) as peers:
        queues = joined_branch(peers, x)
        assert status(peers[0], "dtx.prepare", xid=x) == OK
        assert status(peers[1], "dtx.rollback", xid=x) == OK
        for p in peers.values():
            assert [counts(p, q)[0] for q in queues] == [2, 2, 0, 0]
            assert in_doubt(p) == []
        source0, source1, _, _ = queues
        assert bodies(peers[1], source0, 2) == bodies(peers[0], source1, 2) == [b"first", b"second"]


def test_a_joined_branch_commits_in_one_phase(broker: Parent) -> None:
    x = xid(b"joined-one-phase")
    with one_on_each(broker) as peers:
        queues = joined_branch(peers, x)
        assert status(peers[0], "dtx.commit", xid=x, one_phase=True) == OK
        for p in peers.values():
            assert [counts(p, q)[0] for q in queues] == [1, 1, 1, 1]


def test_a_branch_is_not_prepared_while_a_session_of_the_other_worker_is_joined(broker: Parent) -> None:
    x = xid(b"joined-busy")
    with one_on_each(broker) as peers:
        declare(peers[0], "dtxbusy")
        a, b = peers[0], peers[1]
        a.call("dtx.select")
        assert status(a, "dtx.start", xid=x) == OK
        assert status(a, "dtx.end", xid=x) == OK
        b.call("dtx.select")
        assert status(b, "dtx.start", xid=x, join=True) == OK
        publish(b, "dtxbusy", b"held")
        code, _ = refused(a, "dtx.prepare", 1, xid=x)
        assert code == 409  # illegal-state: still associated, as on one broker
        assert status(b, "dtx.end", xid=x, fail=True) == RBROLLBACK
    with one_on_each(broker) as peers:
        assert status(peers[0], "dtx.prepare", xid=x) == RBROLLBACK  # (it can only roll back)
        assert status(peers[1], "dtx.rollback", xid=x) == OK
        assert counts(peers[1], "dtxbusy")[0] == 0
        assert in_doubt(peers[1]) == []


def test_a_joined_branch_prepared_outlives_a_sigkill_of_every_process(tmp_path: Path) -> None:
    x = xid(b"joined-killed")
    queues: list[str] = []

    def prepare(peers: dict[int, SocketPeer]) -> None:
        queues.extend(joined_branch(peers, x))
        assert status(peers[1], "dtx.prepare", xid=x) == OK

    with killed_after(tmp_path, prepare) as peers:
        assert in_doubt(peers[0]) == in_doubt(peers[1]) == [b"joined-killed"]
        for p in peers.values():  # both parts held: taken messages acquired, publishes held
            assert [counts(p, q)[0] for q in queues] == [1, 1, 0, 0]
        assert status(peers[1], "dtx.commit", xid=x, one_phase=False) == OK
        for p in peers.values():
            assert [counts(p, q)[0] for q in queues] == [1, 1, 1, 1]
            assert in_doubt(p) == []


def test_a_branch_joined_from_a_worker_that_died_rolls_back_once_it_timed_out(broker: Parent) -> None:
    """Worker 1 SIGKILLed while its session is joined to worker 0's branch: nothing tells
    worker 0 that association ended, so the branch stays associated (rollback refused,
    illegal-state) until it times out; then it waits for no other worker's session."""
    x, queue = xid(b"joined-lost"), owned_by(0, "dtxlost")
    with one_on_each(broker) as peers:
        a, b = peers[0], peers[1]
        declare(a, queue)
        a.call("dtx.select")
        assert status(a, "dtx.start", xid=x) == OK
        a.call("dtx.set-timeout", xid=x, timeout=1)
        publish(a, queue, b"held")
        assert status(a, "dtx.end", xid=x) == OK
        b.call("dtx.select")
        assert status(b, "dtx.start", xid=x, join=True) == OK
        mark = len(broker.lines)
        os.kill(broker.worker_pids()[1], signal.SIGKILL)
        broker.wait_for(r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
        for channel in range(2, 11):  # (each refusal ends its session: a new one each time, to channel-max)
            a.attach(channel, b"rollback-%d" % channel)
            try:
                r = a.call("dtx.rollback", channel, xid=x)
            except AssertionError as exc:  # refused: still associated (not timed out yet)
                ((_, refusal),) = a.take("execution.exception")
                assert refusal["error_code"] == 409, exc
                time.sleep(WAIT / 9)
                continue
            assert r is not None and r["status"] == RBTIMEOUT
            break
        else:
            raise AssertionError("the branch stayed associated past its timeout")
        assert counts(a, queue)[0] == 0


@contextmanager
def store_locked(data_dir: Path, worker: int) -> Iterator[None]:
    """Worker ``worker``'s SQLite store held locked for writing (what it writes meanwhile is
    not stored: its write waits for the lock, up to SQLite's bound of 5 s)."""
    (path,) = data_dir.glob(f"*.worker{worker}.sqlite3")
    db = sqlite3.connect(str(path), isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
    finally:
        db.close()


@contextmanager
def settled(broker: Parent, worker: int, mark: int, queues: tuple[str, ...], want: list[int]) -> Iterator[dict[int, SocketPeer]]:
    """Worker ``worker``, SIGKILLed (after log line ``mark``), serving again: a peer on each
    worker once the counts of ``queues`` are ``want`` (a bounded wait: the parts are settled
    by asking again), the same from either worker, and nothing in doubt."""
    broker.wait_for(rf"worker={worker} logger=amqp10.broker msg=.listening on", mark)
    with one_on_each(broker) as peers:
        deadline = time.monotonic() + WAIT
        while (got := [counts(peers[0], q)[0] for q in queues]) != want:
            assert time.monotonic() < deadline, f"the counts stayed {got}, not {want}"
            time.sleep(0.1)
        for p in peers.values():
            assert [counts(p, q)[0] for q in queues] == want
            assert in_doubt(p) == []
        yield peers


def test_a_prepared_part_rolls_back_once_its_holder_crashed_before_its_own_prepare(tmp_path: Path) -> None:
    """Worker 0's branch, joined by a session of worker 1 (each session's work on its own
    worker's queues): at worker 0's prepare, worker 1's part is prepared, then worker 0 is
    SIGKILLed before its own prepare is stored (its store held locked). Restarted, it has no
    such branch: presumed abort. Worker 1, asking the outcome of its prepared part, rolls it
    back: its taken message back on its queue, its publish dropped."""
    x = xid(b"holder-lost")
    broker = Parent(tmp_path, args=("--no-http", "--log-level", "debug"))
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            queues = joined_branch(peers, x, crossing=False)  # (worker 1's part waits for no store of worker 0)
            a = peers[0]
            mark = len(broker.lines)
            with store_locked(tmp_path, 0):  # (worker 0's own prepared record cannot be stored)
                a.command("dtx.prepare", xid=x)
                a.flush()
                broker.wait_for(r"worker=1 .*this worker's part prepared", mark)
                os.kill(broker.worker_pids()[0], signal.SIGKILL)
                broker.wait_for(r"worker 0 \(pid \d+\) ended .*killed by SIGKILL", mark)
        with settled(broker, 0, mark, queues, [2, 2, 0, 0]) as peers:  # (before: [2, 1, 0, 0])
            assert bodies(peers[0], queues[1], 2) == [b"first", b"second"]
    finally:
        broker.stop()


def test_a_part_whose_worker_missed_the_commit_commits_once_it_is_back(tmp_path: Path) -> None:
    """A joined branch prepared on both workers; worker 1 stopped while worker 0 commits it,
    past the control links' bound (worker 0's word to its part is not answered), then
    SIGKILLed. Restarted, worker 1 gets its part back prepared from its store and commits it:
    worker 0 remembers the branch committed until every worker answered."""
    x = xid(b"part-lost")
    broker = Parent(tmp_path)
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            queues = joined_branch(peers, x)
            assert status(peers[0], "dtx.prepare", xid=x) == OK
            pid = broker.worker_pids()[1]
            mark = len(broker.lines)
            os.kill(pid, signal.SIGSTOP)
            try:
                peers[0].command("dtx.commit", xid=x, one_phase=False)
                peers[0].flush()
                broker.wait_for(r"worker=0 .*worker 1 did not answer front-end-question", mark)
            finally:
                os.kill(pid, signal.SIGKILL)
            broker.wait_for(r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
        with settled(broker, 1, mark, queues, [1, 1, 1, 1]) as peers:  # (before: [1, 1, 0, 1])
            assert bodies(peers[1], queues[2], 1) == [b"from-1"]
    finally:
        broker.stop()


def test_a_part_of_a_branch_left_prepared_asks_its_outcome_once_then_waits_to_be_told(tmp_path: Path) -> None:
    """A joined branch prepared (both parts stored) and left undecided by its client: worker
    1's part asks its outcome, worker 0 answers that it keeps the branch prepared and will
    tell, and the part asks no more over a window of five rounds (before: once every round,
    a control-link question to every other worker each time). Committed then, the part is
    told and applied."""
    x = xid(b"left-prepared")
    broker = Parent(tmp_path, args=("--no-http", "--log-level", "debug"))
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            queues = joined_branch(peers, x)
            mark = len(broker.lines)
            assert status(peers[0], "dtx.prepare", xid=x) == OK
            time.sleep(5 * ASK_AGAIN)  # (a fixed window, not a bound on speed)
            asked = [line for line in broker.lines[mark:] if re.search(r"worker=1 .*this worker's part asks its outcome", line)]
            assert 1 <= len(asked) <= 2, asked  # (before: 5)
            assert status(peers[0], "dtx.commit", xid=x, one_phase=False) == OK
            for p in peers.values():
                assert [counts(p, q)[0] for q in queues] == [1, 1, 1, 1]
                assert in_doubt(p) == []
    finally:
        broker.stop()


@contextmanager
def told_while_stopped(broker: Parent, worker: int, told: Callable[[], None]) -> Iterator[int]:
    """Worker ``worker`` SIGSTOPped while ``told()`` runs (a decision answered though its
    word to that worker went unanswered, past the control links' bound), then let go when
    the block ends; the log mark from before it was stopped."""
    pid = broker.worker_pids()[worker]
    mark = len(broker.lines)
    os.kill(pid, signal.SIGSTOP)
    try:
        told()
        broker.wait_for(rf"worker={1 - worker} .*worker {worker} did not answer front-end-question", mark)
        yield mark
    finally:
        os.kill(pid, signal.SIGCONT)


def started_anew(p: SocketPeer, x: object, *, join: bool = False) -> int:
    """``dtx.start`` of ``x`` (with ``join``) on a new session of ``p``, asked again (on
    another, as a refusal ends its session) while refused not-allowed: the session's channel
    once it started."""
    for channel in range(3, 11):
        p.attach(channel, b"anew-%d" % channel)
        p.call("dtx.select", channel)
        try:
            r = p.call("dtx.start", channel, xid=x, join=join)
        except AssertionError as exc:
            ((_, refusal),) = p.take("execution.exception")
            assert refusal["error_code"] == 530, exc
            time.sleep(WAIT / 30)
            continue
        assert r is not None and r["status"] == OK
        return channel
    raise AssertionError(f"{x} stayed known")


def test_an_xid_rolled_back_while_a_part_of_it_was_missed_is_not_new_until_that_part_rolled_back(tmp_path: Path) -> None:
    """A joined branch prepared on both workers; worker 1 stopped while worker 0 rolls it
    back (its word to worker 1's part unanswered). Meanwhile a new branch of the same xid
    is refused not-allowed (before: made, while worker 1 kept a prepared part of the old
    one, which a session of worker 1 joining the new branch would have been given). Worker
    1 let go: told again, its part rolls back; then the xid is new, and a branch of it
    commits only its own work."""
    x = xid(b"reused")
    broker = Parent(tmp_path)
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            queues = joined_branch(peers, x, crossing=False)  # (worker 0's rollback waits for no store of worker 1)
            a = peers[0]
            assert status(a, "dtx.prepare", xid=x) == OK

            def rollback() -> None:
                assert status(a, "dtx.rollback", xid=x) == OK

            with told_while_stopped(broker, 1, rollback):
                a.attach(2, b"reuse-while-missed")
                a.call("dtx.select", 2)
                code, text = refused(a, "dtx.start", 2, xid=x)
                assert code == 530 and "known already" in text, text  # (before: a new branch, xa-ok)
            deadline = time.monotonic() + WAIT
            while (got := [counts(a, q)[0] for q in queues]) != [2, 2, 0, 0]:
                assert time.monotonic() < deadline, f"the counts stayed {got}"
                time.sleep(0.1)
            channel = started_anew(a, x)
            headers = [struct("delivery-properties", routing_key=queues[3], delivery_mode=2), struct("message-properties")]
            a.call("message.transfer", channel, destination="", accept_mode=1, acquire_mode=0, headers=headers, body=b"new")
            ended, committed = a.call("dtx.end", channel, xid=x), a.call("dtx.commit", channel, xid=x, one_phase=True)
            assert ended is not None and committed is not None and ended["status"] == committed["status"] == OK
            for p in peers.values():  # the new branch's publish only; the old parts' taken messages back
                assert [counts(p, q)[0] for q in queues] == [2, 2, 0, 1]
            assert bodies(peers[1], queues[3], 1) == [b"new"]
    finally:
        broker.stop()


def test_a_part_learns_the_commit_of_a_holder_killed_after_it_decided(tmp_path: Path) -> None:
    """A joined branch prepared on both workers; worker 1 stopped while worker 0 commits it
    (its word to worker 1's part unanswered), worker 0 SIGKILLed once the commit was
    answered, worker 1 let go. Worker 0, restarted, still knows it committed the branch and
    tells worker 1's part, which commits (before: worker 0's record that it committed went
    in the very batch that stored it, so worker 1's part, asking, was told rollback by all)."""
    x = xid(b"holder-killed")
    broker = Parent(tmp_path)
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            queues = joined_branch(peers, x, crossing=False)
            a = peers[0]
            assert status(a, "dtx.prepare", xid=x) == OK

            def commit() -> None:
                assert status(a, "dtx.commit", xid=x, one_phase=False) == OK

            with told_while_stopped(broker, 1, commit) as mark:
                os.kill(broker.worker_pids()[0], signal.SIGKILL)
                broker.wait_for(r"worker 0 \(pid \d+\) ended .*killed by SIGKILL", mark)
        with settled(broker, 0, mark, queues, [1, 1, 1, 1]) as peers:  # (before: [1, 2, 1, 0])
            assert bodies(peers[1], queues[3], 1) == [b"from-1"]
    finally:
        broker.stop()


def on_worker_0(broker: Parent) -> SocketPeer:
    """A 0-10 peer (a session attached) served by worker 0 while worker 1 is stopped: a
    connection the kernel gave worker 1 is not answered, so each waits briefly and another
    is tried (a bounded count)."""
    for _ in range(64):
        try:
            peer = SocketPeer(broker.port, timeout=1.0)
        except (OSError, AssertionError):  # (worker 1's: not served while it is stopped)
            continue
        if int(peer.server_properties[WORKER_PROPERTY]) == 0:
            peer.timeout = WAIT
            peer.sock.settimeout(WAIT)
            peer.attach()
            return peer
        peer.close()
    raise AssertionError("no connection was served by worker 0")


def joined_anew(p: SocketPeer, x: object) -> None:
    """A session of ``p`` joins branch ``x`` (asked again while refused), publishes "new-1"
    to worker 1's target queue in it, and ends."""
    channel = started_anew(p, x, join=True)
    headers = [struct("delivery-properties", routing_key=owned_by(1, "dtxtarget"), delivery_mode=2), struct("message-properties")]
    p.call("message.transfer", channel, destination="", accept_mode=1, acquire_mode=0, headers=headers, body=b"new-1")
    r = p.call("dtx.end", channel, xid=x)
    assert r is not None and r["status"] == OK
    p.take("execution.result")  # (their ids are this session's: not another's results)


def test_an_old_part_of_an_xid_started_again_while_its_worker_was_down_is_not_the_new_branchs(
    tmp_path: Path,
) -> None:
    """A joined branch: worker 1's part prepared, worker 1 stopped, worker 0 SIGKILLed before
    its own prepare is stored (presumed abort; worker 0 restarted keeps nothing of it). The
    xid started again on worker 0 while worker 1 is stopped (nothing refuses it: worker 1
    does not answer). Worker 1 let go: its old part is told the new branch is not its own
    (another incarnation) and rolls back; a session of worker 1 joins the new branch and gets
    a new part, and the new branch commits only its own work (before: the old part asked the
    new branch's outcome and was told wait, the counts stayed [2, 1, 0, 0]; a session of
    worker 1 joining the new branch would have been given the old part)."""
    x = xid(b"incarnation")
    broker = Parent(tmp_path, args=("--no-http", "--log-level", "debug"))
    try:
        broker.wait_listening()
        with one_on_each(broker) as peers:
            queues = joined_branch(
                peers, x, crossing=False
            )  # (worker 1's part waits for no store of worker 0)
            pid1 = broker.worker_pids()[1]
            mark = len(broker.lines)
            with store_locked(tmp_path, 0):  # (worker 0's own prepared record cannot be stored)
                peers[0].command("dtx.prepare", xid=x)
                peers[0].flush()
                broker.wait_for(r"worker=1 .*this worker's part prepared", mark)
                os.kill(pid1, signal.SIGSTOP)
                try:
                    os.kill(broker.worker_pids()[0], signal.SIGKILL)
                    broker.wait_for(r"worker 0 \(pid \d+\) ended .*killed by SIGKILL", mark)
                except BaseException:
                    os.kill(pid1, signal.SIGCONT)
                    raise
            peers.pop(1).sock.close()  # (its worker stopped: not closed in turn)
        try:
            broker.wait_for(r"worker=0 logger=amqp10.broker msg=.listening on", mark)
            a = on_worker_0(broker)
            a.call("dtx.select")
            asked = len(broker.lines)
            started = a.command("dtx.start", xid=x)
            a.flush()
            broker.wait_for(r"worker=0 .*worker 1 did not answer front-end-question", asked)
        finally:
            os.kill(pid1, signal.SIGCONT)
        try:
            (result,) = a.wait("execution.result")  # (bounded: the peer's timeout)
            assert result["command_id"] == started and result["value"]["status"] == OK  # (nothing refused it)
            publish(a, queues[2], b"new-0", durable=True)
            deadline = time.monotonic() + WAIT
            while (got := [counts(a, q)[0] for q in queues]) != [
                2,
                2,
                0,
                0,
            ]:  # the old parts rolled back
                assert time.monotonic() < deadline, f"the counts stayed {got}"
                time.sleep(0.1)
            with pinned(broker, {1: 1}) as by_worker:
                joined_anew(by_worker[1][0], x)
                assert status(a, "dtx.end", xid=x) == OK
                assert status(a, "dtx.prepare", xid=x) == OK
                assert status(a, "dtx.commit", xid=x, one_phase=False) == OK
                for p in (a, by_worker[1][0]):  # the new branch's publishes only
                    assert [counts(p, q)[0] for q in queues] == [2, 2, 1, 1]
                    assert in_doubt(p) == []
                assert bodies(a, queues[2], 1) == [b"new-0"]
                assert bodies(a, queues[3], 1) == [b"new-1"]
        finally:
            a.close()
    finally:
        broker.stop()
