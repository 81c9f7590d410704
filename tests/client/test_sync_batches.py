"""The blocking facade's fast paths against a real broker: submit and wait without
a round trip each, the blocking pipeline, batch fetch and batch settle."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import amqp10.client.sync
import amqp10.client.syncloop
import amqp10.sync
from amqp10 import errors
from amqp10.client import SettleMode
from amqp10.message import Message
from amqp10.types import Accepted, Error, Rejected, Released
from tests.broker.conftest import RunningBroker

from .helpers import WAIT

QUIET = 0.2  # how long "nothing arrives" is watched for


class Counted:
    """What the connection's loop counts in ``attr`` from now on (``calls``: blocking
    calls that waited for a task of the loop; ``handovers``: wake-ups of another
    thread running the loop)."""

    def __init__(self, conn: amqp10.sync.Connection, attr: str) -> None:
        self._loop = conn._loop
        self._attr = attr
        self._base: int = getattr(self._loop, attr)

    @property
    def calls(self) -> int:
        now: int = getattr(self._loop, self._attr)
        return now - self._base

    @calls.setter
    def calls(self, value: int) -> None:
        self._base = getattr(self._loop, self._attr) - value


def portal_calls(conn: amqp10.sync.Connection) -> Counted:
    """Counts the round trips into the connection's event loop from now on."""
    return Counted(conn, "calls")


def bodies(batch: list[amqp10.sync.Delivery]) -> list[Any]:
    return [d.message.body for d in batch]


def fill(conn: amqp10.sync.Connection, address: str, n: int) -> None:
    sender = conn.open_sender(address, settle_mode=SettleMode.AT_LEAST_ONCE)
    outcomes = list(sender.pipeline((Message(body=i) for i in range(n)), window=10))
    assert all(isinstance(o, Accepted) for o in outcomes)
    sender.close()


def fetch_all(receiver: amqp10.sync.Receiver, n: int, most: int) -> list[list[Any]]:
    """Fetch until ``n`` arrived, in batches of at most ``most``; the batches' bodies."""
    batches: list[list[Any]] = []
    while sum(map(len, batches)) < n:
        batch = receiver.fetch(most, timeout=WAIT)
        assert batch, "nothing arrived in time"
        receiver.accept_all(batch)
        batches.append(bodies(batch))
    return batches


# -- fetch ---------------------------------------------------------------------------------
def test_fetch_returns_what_arrived_up_to_most_in_order(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 7)
    receiver = conn.open_receiver("q", credit=10)
    batches = fetch_all(receiver, 7, 3)
    assert all(1 <= len(b) <= 3 for b in batches)
    assert [body for b in batches for body in b] == list(range(7))
    # what has arrived comes at once: fetch does not wait to fill ``most``
    fill(conn, "q", 2)
    started = time.monotonic()
    got = fetch_all(receiver, 2, 100)
    assert [body for b in got for body in b] == [0, 1]
    assert time.monotonic() - started < WAIT / 2


def test_fetch_times_out_empty_and_the_connection_stays_usable(
    conn: amqp10.sync.Connection,
) -> None:
    receiver = conn.open_receiver("empty", credit=10)
    started = time.monotonic()
    assert receiver.fetch(10, timeout=QUIET) == []
    assert QUIET * 0.9 <= time.monotonic() - started < WAIT
    fill(conn, "empty", 1)
    assert bodies(receiver.fetch(10, timeout=WAIT)) == [0]
    with pytest.raises(ValueError, match="at least 1"):
        receiver.fetch(0)


def test_fetch_on_a_closed_receiver_raises_and_batches_end(conn: amqp10.sync.Connection) -> None:
    receiver = conn.open_receiver("q", credit=10)
    receiver.close()
    with pytest.raises(errors.AMQPError):
        receiver.fetch(10, timeout=QUIET)
    assert list(receiver.batches(10)) == []


def test_batches_yield_until_idle(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 25)
    receiver = conn.open_receiver("q", credit=10)
    got: list[Any] = []
    for batch in receiver.batches(10, idle=QUIET):
        assert 1 <= len(batch) <= 10
        receiver.accept_all(batch)
        got += bodies(batch)
    assert got == list(range(25))


# -- batch settle ----------------------------------------------------------------------------
def unsettled(receiver: amqp10.sync.Receiver, n: int) -> list[amqp10.sync.Delivery]:
    """``n`` deliveries, fetched and left unsettled."""
    got: list[amqp10.sync.Delivery] = []
    while len(got) < n:
        batch = receiver.fetch(n, timeout=WAIT)
        assert batch, "nothing arrived in time"
        got += batch
    return got


def test_accept_all_settles_a_batch_in_one_round_trip(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 10)
    receiver = conn.open_receiver("q", credit=20)
    batch = unsettled(receiver, 10)
    calls = portal_calls(conn)
    receiver.accept_all(batch)
    assert calls.calls == 1
    assert all(d.settled for d in batch)
    with pytest.raises(errors.IllegalStateError, match="already settled"):
        receiver.accept_all(batch[:1])
    receiver.close()
    # accepted: gone from the queue
    again = conn.open_receiver("q", credit=20)
    assert again.fetch(20, timeout=QUIET) == []


def test_settle_all_with_released_gives_the_batch_back(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 4)
    receiver = conn.open_receiver("q", credit=10)
    batch = unsettled(receiver, 4)
    receiver.settle_all(batch, Released())
    receiver.close()
    again = conn.open_receiver("q", credit=10)
    assert sorted(b for bs in fetch_all(again, 4, 10) for b in bs) == [0, 1, 2, 3]


# -- the blocking pipeline -----------------------------------------------------------------
def test_blocking_pipeline_yields_outcomes_in_order_with_rejections(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("cap.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    calls = portal_calls(conn)
    outcomes = list(sender.pipeline((Message(body=i) for i in range(6)), window=2))
    assert [type(o) for o in outcomes] == [Accepted] * 3 + [Rejected] * 3
    assert calls.calls == 0  # submitting and waiting never cross into the loop one by one
    receiver = conn.open_receiver("cap.q", credit=10)
    assert [b for bs in fetch_all(receiver, 3, 10) for b in bs] == [0, 1, 2]


def test_blocking_pipeline_rejects_a_window_below_one(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("q")
    with pytest.raises(ValueError, match="at least 1"):
        next(sender.pipeline([Message(body=1)], window=0))


def test_pre_settled_submit_resolves_once_written(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_MOST_ONCE)
    trackers = [sender.submit(Message(body=i)) for i in range(5)]
    assert [t.wait() for t in trackers] == [None] * 5
    receiver = conn.open_receiver("q", credit=10)
    got: list[Any] = []
    while len(got) < 5:
        got += bodies(receiver.fetch(10, timeout=WAIT))
    assert got == list(range(5))


def test_a_waiting_send_goes_out_after_what_was_submitted_before_it(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    trackers = [sender.submit(Message(body=i)) for i in range(3)]
    sender.send(Message(body=3), wait=False)
    assert isinstance(sender.send(Message(body=4)), Accepted)
    assert all(t.done for t in trackers)  # (started before the waiting send)
    sender.flush()
    pre = conn.open_sender("q", settle_mode=SettleMode.AT_MOST_ONCE)
    assert pre.send(Message(body=5)) is None  # pre-settled: once written
    receiver = conn.open_receiver("q", credit=10)
    assert [b for bs in fetch_all(receiver, 6, 10) for b in bs] == list(range(6))


# -- submit and wait without the loop ---------------------------------------------------------
def test_submit_and_wait_make_no_round_trip_and_wake_the_loop_per_batch(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    calls = portal_calls(conn)
    wakes = Counted(conn, "handovers")
    trackers = [sender.submit(Message(body=i)) for i in range(1000)]
    outcomes = [t.wait() for t in trackers]
    assert all(isinstance(o, Accepted) for o in outcomes)
    assert calls.calls == 0
    assert wakes.calls <= 100  # one per batch, not one per message
    # a done tracker is read in this thread: not even the wake-up path is taken
    wakes.calls = 0
    assert trackers[0].done
    assert isinstance(trackers[0].wait(), Accepted)
    assert isinstance(trackers[0].result(), Accepted)
    assert calls.calls == 0 and wakes.calls == 0
    # the spy does count round trips
    conn.open_receiver("other").close()
    assert calls.calls >= 1


def test_submit_from_many_threads_keeps_each_threads_order(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    per_thread = 200
    trackers: dict[int, list[amqp10.sync.Tracker]] = {}

    def producer(k: int) -> None:
        trackers[k] = [sender.submit(Message(body=[k, i])) for i in range(per_thread)]

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert all(isinstance(t.wait(), Accepted) for ts in trackers.values() for t in ts)
    receiver = conn.open_receiver("q", credit=100)
    got = [b for bs in fetch_all(receiver, 4 * per_thread, 100) for b in bs]
    assert len(got) == 4 * per_thread
    for k in range(4):
        assert [i for kk, i in got if kk == k] == list(range(per_thread))


# -- timeouts, withdrawal, closing -----------------------------------------------------------
def test_a_wait_that_times_out_withdraws_and_the_connection_stays_usable(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(sender.send(Message(body="first")), Accepted)  # the queue is full now
    tracker = sender.submit(Message(body="withdrawn"))
    with pytest.raises(errors.TimeoutError, match=r"send to .full\.q. timed out after 0\.2s"):
        tracker.wait(timeout=QUIET)
    assert tracker.done
    with pytest.raises(errors.IllegalStateError, match="withdrawn"):
        tracker.result()
    # the connection (and the link) carry on
    assert isinstance(conn.open_sender("q").send(Message(body="ok")), Accepted)
    receiver = conn.open_receiver("full.q", credit=10)
    assert bodies(receiver.fetch(10, timeout=WAIT)) == ["first"]
    assert receiver.fetch(10, timeout=QUIET) == []
    assert isinstance(sender.submit(Message(body="after")).wait(), Accepted)


def test_a_waiting_send_that_times_out_withdraws_its_message(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(sender.send(Message(body="first")), Accepted)  # the queue is full now
    with pytest.raises(errors.TimeoutError, match=r"timed out after 0\.2s \(no credit from the peer\)"):
        sender.send(Message(body="withdrawn"), timeout=QUIET)
    assert sender.queued == 0
    receiver = conn.open_receiver("full.q", credit=10)
    assert bodies(receiver.fetch(10, timeout=WAIT)) == ["first"]
    assert receiver.fetch(10, timeout=QUIET) == []


def test_stopping_a_blocking_pipeline_early_withdraws_the_rest(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    outcomes = sender.pipeline((Message(body=i) for i in range(5)), window=3, timeout=QUIET)
    assert isinstance(next(outcomes), Accepted)  # 0 fills the queue; 1 and 2 wait for credit
    with pytest.raises(errors.TimeoutError, match="no credit"):
        next(outcomes)
    outcomes.close()
    receiver = conn.open_receiver("full.q", credit=10)
    assert bodies(receiver.fetch(10, timeout=WAIT)) == [0]
    assert receiver.fetch(10, timeout=QUIET) == []  # 2 was withdrawn, 3 and 4 never sent
    assert isinstance(conn.open_sender("q").send(Message(body="ok")), Accepted)


def test_closing_the_connection_fails_pending_trackers(broker: RunningBroker) -> None:
    conn = amqp10.sync.connect(f"amqp://{broker.url}", timeout=WAIT)
    sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    sender.send(Message(body="first"))
    pending = [sender.submit(Message(body=i)) for i in range(3)]  # no credit: they wait
    failures: list[BaseException] = []

    def waiter() -> None:
        try:
            pending[0].wait(timeout=60)
        except BaseException as exc:
            failures.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    started = time.monotonic()
    conn.close()
    t.join(WAIT)
    assert not t.is_alive(), "the waiting thread hangs"
    assert time.monotonic() - started < WAIT
    assert len(failures) == 1 and isinstance(failures[0], errors.ConnectionClosed)
    for tracker in pending:
        assert tracker.done
        with pytest.raises(errors.ConnectionClosed):
            tracker.wait()
    with pytest.raises(errors.AMQPError):
        sender.submit(Message(body="late"))


def _in_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(WAIT)
    return out[0]


def test_a_tracker_can_be_waited_for_from_another_thread(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    tracker = sender.submit(Message(body="x"))
    assert isinstance(_in_thread(tracker.wait), Accepted)


# -- send(wait=False): the outcome checked at the next send or flush ----------------------------
def test_deferred_sends_go_out_in_order_without_a_round_trip_each(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    calls = portal_calls(conn)
    assert [sender.send(Message(body=i), wait=False) for i in range(500)] == [None] * 500
    sender.flush()
    assert calls.calls == 0
    assert not sender._deferred  # every outcome was looked at
    receiver = conn.open_receiver("q", credit=100)
    assert [b for bs in fetch_all(receiver, 500, 100) for b in bs] == list(range(500))


def test_a_deferred_send_not_accepted_is_raised_by_flush(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("cap.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    for i in range(6):  # the queue takes 3: the last 3 are rejected
        sender.send(Message(body=i), wait=False)
    with pytest.raises(errors.DeliveryError, match="wait=False was rejected") as caught:
        sender.flush()
    assert isinstance(caught.value.outcome, Rejected)
    sender.flush()  # the first failure was raised; the rest were waited for
    assert not sender._deferred
    receiver = conn.open_receiver("cap.q", credit=10)
    assert [b for bs in fetch_all(receiver, 3, 10) for b in bs] == [0, 1, 2]


def test_the_next_deferred_send_raises_for_an_earlier_one_and_is_not_sent(
    conn: amqp10.sync.Connection,
) -> None:
    sender = conn.open_sender("cap.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    for i in range(4):
        sender.send(Message(body=i), wait=False)
    # a waiting send's outcome comes after theirs (the broker settles in order)
    assert isinstance(sender.send(Message(body="waited")), Rejected)
    with pytest.raises(errors.DeliveryError, match="rejected"):
        sender.send(Message(body="not sent"), wait=False)
    sender.flush()  # nothing left
    receiver = conn.open_receiver("cap.q", credit=10)
    assert [b for bs in fetch_all(receiver, 3, 10) for b in bs] == [0, 1, 2]
    assert receiver.fetch(10, timeout=QUIET) == []


def test_a_deferred_send_waits_for_the_oldest_once_its_window_is_full(
    conn: amqp10.sync.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(amqp10.client.sync, "DEFERRED_WINDOW", 1)
    sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    sender.send(Message(body=0), wait=False)  # fills the queue: no credit after it
    sender.send(Message(body=1), wait=False)  # waited for 0 (accepted); 1 waits for credit
    with pytest.raises(errors.TimeoutError, match="no credit"):
        sender.send(Message(body=2), wait=False, timeout=QUIET)  # 1 is withdrawn, 2 not sent
    sender.flush()  # nothing left to wait for
    receiver = conn.open_receiver("full.q", credit=10)
    assert bodies(receiver.fetch(10, timeout=WAIT)) == [0]
    assert receiver.fetch(10, timeout=QUIET) == []


def test_a_flush_that_times_out_leaves_the_rest_for_the_next(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("full.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    for i in range(3):  # 0 fills the queue; 1 and 2 wait for credit
        sender.send(Message(body=i), wait=False)
    with pytest.raises(errors.TimeoutError, match="no credit"):
        sender.flush(timeout=QUIET)
    assert len(sender._deferred) == 1  # 2 is still waited for
    with pytest.raises(errors.TimeoutError):
        sender.flush(timeout=QUIET)
    assert isinstance(conn.open_sender("q").send(Message(body="ok")), Accepted)


def test_closing_a_sender_flushes_its_deferred_sends(conn: amqp10.sync.Connection) -> None:
    sender = conn.open_sender("cap.q", settle_mode=SettleMode.AT_LEAST_ONCE)
    for i in range(4):
        sender.send(Message(body=i), wait=False)
    with pytest.raises(errors.DeliveryError, match="rejected"):
        sender.close()
    assert not sender.is_open  # closed all the same
    receiver = conn.open_receiver("cap.q", credit=10)
    assert [b for bs in fetch_all(receiver, 3, 10) for b in bs] == [0, 1, 2]


def _takes_one_then_closes(conn: amqp10.sync.Connection) -> None:
    """A peer that takes one message without settling it, then closes the connection."""
    for link in conn.incoming_links():
        assert isinstance(link, amqp10.sync.Receiver)
        link.receive(timeout=WAIT)
        conn.close(Error(condition="amqp:internal-error", description="going away"))
        return


@pytest.mark.parametrize("wait", [True, False])
def test_losing_the_connection_during_a_send_raises_it(wait: bool) -> None:
    with (
        amqp10.sync.serve("127.0.0.1", 0, _takes_one_then_closes, timeout=WAIT) as peer,
        amqp10.sync.connect(peer.url, timeout=WAIT) as conn,
    ):
        sender = conn.open_sender("anywhere", settle_mode=SettleMode.AT_LEAST_ONCE)
        with pytest.raises(errors.ConnectionError, match="going away"):
            if wait:
                sender.send(Message(body="never settled"))
            else:
                sender.send(Message(body="never settled"), wait=False)
                sender.flush()


# -- one message at a time: a buffer on this side, settlements queued --------------------------
def arrived(receiver: amqp10.sync.Receiver, n: int) -> None:
    """Wait until ``n`` deliveries have arrived on ``receiver`` (a bounded poll of its buffer)."""
    for _ in range(int(WAIT / 0.01)):
        if receiver.buffered >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"only {receiver.buffered} of {n} arrived")


@contextlib.contextmanager
def pump_held(conn: amqp10.sync.Connection) -> Iterator[None]:
    """Within the block what is posted stays queued: the keeper thread does not run the
    loop between calls, so only a blocking call (or a close) starts it (the ordering
    under test)."""
    loop = conn._loop
    loop.grace = math.inf
    loop.flush()  # the keeper let the loop go (it waits for a call), and nothing is queued
    assert not loop._woken
    try:
        yield
    finally:
        loop.grace = amqp10.client.syncloop.GRACE
        with loop.cond:
            loop.cond.notify_all()


def drained(conn: amqp10.sync.Connection, address: str) -> list[Any]:
    """What the queue holds now: a fresh receiver takes (and accepts) everything."""
    receiver = conn.open_receiver(address, credit=100)
    got: list[Any] = []
    for batch in receiver.batches(100, idle=QUIET):
        receiver.accept_all(batch)
        got += bodies(batch)
    receiver.close()
    return got


def test_receive_hands_out_a_batch_in_order_from_one_round_trip(
    conn: amqp10.sync.Connection,
) -> None:
    fill(conn, "q", 25)
    receiver = conn.open_receiver("q", credit=10)
    arrived(receiver, 10)
    calls = portal_calls(conn)
    got = [receiver.receive(timeout=WAIT) for _ in range(10)]
    assert calls.calls == 1  # the ten that had arrived came in one round trip
    assert bodies(got) == list(range(10))
    got += [receiver.receive(timeout=WAIT) for _ in range(15)]
    assert bodies(got) == list(range(25))
    assert calls.calls < 25
    for d in got:
        d.accept()
    receiver.close()
    assert drained(conn, "q") == []


def test_fetch_and_batches_take_what_receive_buffered_first(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 6)
    receiver = conn.open_receiver("q", credit=10)
    arrived(receiver, 6)
    first = receiver.receive(timeout=WAIT)  # takes all six to this side
    assert receiver.buffered == 5
    rest = receiver.fetch(2)
    rest += next(receiver.batches(10))
    assert bodies([first, *rest]) == list(range(6))
    receiver.accept_all([first, *rest])
    receiver.close()
    assert drained(conn, "q") == []


def test_receive_times_out_and_iteration_ends_once_the_receiver_is_closed(
    conn: amqp10.sync.Connection,
) -> None:
    receiver = conn.open_receiver("empty", credit=10)
    with pytest.raises(errors.TimeoutError, match="receive from 'empty'"):
        receiver.receive(timeout=QUIET)
    fill(conn, "empty", 1)
    d = receiver.receive(timeout=WAIT)
    d.accept()
    receiver.close()
    assert list(receiver) == []
    with pytest.raises(errors.AMQPError):
        receiver.receive(timeout=QUIET)


def test_iteration_ends_when_another_thread_closes_the_receiver(
    conn: amqp10.sync.Connection,
) -> None:
    fill(conn, "q", 3)
    receiver = conn.open_receiver("q", credit=10)
    seen: list[Any] = []

    def consume() -> list[Any]:
        for d in receiver:
            d.accept()
            seen.append(d.message.body)
            if len(seen) == 3:
                closer.start()
        return seen

    closer = threading.Thread(target=receiver.close)
    assert _in_thread(consume) == [0, 1, 2]
    closer.join(WAIT)
    assert drained(conn, "q") == []


def test_queued_accepts_go_out_before_the_connection_closes(broker: RunningBroker) -> None:
    conn = amqp10.sync.connect(f"amqp://{broker.url}", timeout=WAIT)
    fill(conn, "q", 5)
    receiver = conn.open_receiver("q", credit=10)
    got = [receiver.receive(timeout=WAIT) for _ in range(3)]
    with pump_held(conn):
        for d in got:
            d.accept()  # queued; nothing waits for them
        assert not any(d.settled for d in got)
        conn.close()
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=WAIT) as conn:
        assert drained(conn, "q") == [3, 4]


def test_closing_a_receiver_sends_its_accepts_and_releases_what_it_buffered(
    conn: amqp10.sync.Connection,
) -> None:
    fill(conn, "q", 5)
    receiver = conn.open_receiver("q", credit=10)
    arrived(receiver, 5)
    got = [receiver.receive(timeout=WAIT) for _ in range(2)]
    assert receiver.buffered == 3  # taken to this side, never handed out
    with pump_held(conn):
        for d in got:
            d.accept()
        receiver.close()
    assert drained(conn, "q") == [2, 3, 4]


def test_reject_release_and_modify_reach_the_broker(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 4)
    receiver = conn.open_receiver("q", credit=0)
    receiver.add_credit(4)  # and no more: what goes back stays in the queue
    got = {d.message.body: d for d in (receiver.receive(timeout=WAIT) for _ in range(4))}
    with pump_held(conn):
        got[0].reject()
        got[1].release()
        got[2].modify(delivery_failed=True)
        assert not any(d.settled for d in got.values())
        got[3].accept(wait=True)  # a round trip: the three queued before it are applied too
        assert all(d.settled for d in got.values())
    with pytest.raises(errors.IllegalStateError, match="already settled"):
        got[0].accept()
    receiver.flush()
    again = conn.open_receiver("q", credit=10)
    back = {d.message.body: d.message.delivery_count for d in again.fetch(10, timeout=WAIT)}
    assert again.fetch(10, timeout=QUIET) == []
    # rejected: gone; released: back as it was; modified (failed): back, counted
    assert back == {1: 0, 2: 1}


def test_flush_raises_a_queued_settlement_that_failed(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 1)
    receiver = conn.open_receiver("q", credit=10)
    d = receiver.receive(timeout=WAIT)
    receiver.detach()
    d.accept()  # queued: the link is gone by the time the loop applies it
    with pytest.raises(errors.AMQPError):
        receiver.flush()
    receiver.flush()  # raised once
    assert drained(conn, "q") == [0]  # the broker gives it out again


def test_a_queued_accept_in_a_transaction_commits_with_it(conn: amqp10.sync.Connection) -> None:
    fill(conn, "q", 2)
    receiver = conn.open_receiver("q", credit=10)
    first, second = receiver.receive(timeout=WAIT), receiver.receive(timeout=WAIT)
    with pump_held(conn):
        with conn.transaction() as txn:
            first.accept(txn=txn)  # queued, and applied before the commit
        txn = conn.transaction().declare()
        second.accept(txn=txn)
        txn.rollback()
    receiver.close()
    assert drained(conn, "q") == [1]


def test_sends_queued_together_go_out_in_one_write(conn: amqp10.sync.Connection) -> None:
    # a waiting send starts what was queued before it with its own transfer and writes
    # them at once, before the loop runs (which then only reads the answer): one write
    sender = conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(sender.send(Message(body="warm")), Accepted)
    driver = conn._c.driver
    with pump_held(conn):
        writes = driver.writes
        for i in range(10):
            sender.send(Message(body=i), wait=False)
        assert driver.writes == writes  # queued, nothing run
        assert isinstance(sender.send(Message(body="last")), Accepted)
        assert driver.writes == writes + 1  # eleven transfers, one write
        sender.flush()
    assert drained(conn, "q") == ["warm", *range(10), "last"]
