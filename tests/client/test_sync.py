"""The blocking facade, used from plain threads (no event loop in the test)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import amqp10.sync
from amqp10 import errors
from amqp10.message import Message
from amqp10.types import Accepted, Rejected

from .helpers import WAIT


def _run_in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a fresh plain thread and return (or raise) what it did."""
    result: list[Any] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=target, name="sync-client")
    t.start()
    t.join(WAIT * 4)
    assert not t.is_alive(), "client thread did not finish"
    if failure:
        raise failure[0]
    return result[0]


def echo_service(conn: amqp10.sync.Connection) -> None:
    """A blocking service, a thread per link: answers requests, rejects subject
    'reject', feeds 'gen/N' (send() one by one) and 'pipe/N' (a pre-settled pipeline)."""

    def consume(link: amqp10.sync.Receiver) -> None:
        for d in link:
            if d.message.subject == "reject":
                d.reject()
                continue
            d.accept()
            if d.message.reply_to:
                conn.reply(d, Message(body=f"pong: {d.message.body}"))

    def produce(link: amqp10.sync.Sender, n: int) -> None:
        for i in range(n):
            link.send(Message(body=f"m{i}"), settled=True)

    def pipe(link: amqp10.sync.Sender, n: int) -> None:
        messages = (Message(body=f"p{i}") for i in range(n))
        assert list(link.pipeline(messages, window=3, settled=True)) == [None] * n

    producers = {"gen": produce, "pipe": pipe}
    threads = []
    for link in conn.incoming_links():
        kind, _, n = (link.address or "").partition("/")
        if isinstance(link, amqp10.sync.Receiver):
            threads.append(threading.Thread(target=consume, args=(link,)))
        elif isinstance(link, amqp10.sync.Sender) and kind in producers:
            threads.append(threading.Thread(target=producers[kind], args=(link, int(n))))
        else:
            continue
        threads[-1].start()
    for t in threads:
        t.join(WAIT)


@pytest.fixture
def server() -> Iterator[amqp10.sync.Server]:
    before = set(threading.enumerate())
    with amqp10.sync.serve("127.0.0.1", 0, echo_service, timeout=WAIT) as srv:
        yield srv
    # every thread the server started (portal, handlers, their helpers) ends with it
    for t in set(threading.enumerate()) - before:
        t.join(WAIT)
        assert not t.is_alive(), f"thread {t.name} outlived the server"


def test_blocking_client_from_a_plain_thread(server: amqp10.sync.Server) -> None:
    def client() -> list[Any]:
        with amqp10.sync.connect(server.url, timeout=WAIT) as conn:
            sender = conn.open_sender("svc")
            outcomes = [
                sender.send(Message(body="a")),
                sender.send(Message(body="b", subject="reject")),
            ]
            response = conn.request("svc", Message(body="ping"))
            receiver = conn.open_receiver("gen/3", credit=10)
            bodies = [receiver.receive().message.body for _ in range(3)]
            receiver.close()
            return [*outcomes, response.body, bodies]

    accepted, rejected, response, bodies = _run_in_thread(client)
    assert isinstance(accepted, Accepted)
    assert isinstance(rejected, Rejected)
    assert response == "pong: ping"
    assert bodies == ["m0", "m1", "m2"]


def test_blocking_submit_keeps_many_in_flight(server: amqp10.sync.Server) -> None:
    def client() -> list[Any]:
        with amqp10.sync.connect(server.url, timeout=WAIT) as conn:
            sender = conn.open_sender("svc")
            trackers = [sender.submit(Message(body=i)) for i in range(20)]
            trackers.append(sender.submit(Message(body="no", subject="reject")))
            outcomes = [t.wait() for t in trackers]
            assert all(t.done for t in trackers)
            assert trackers[0].result() is outcomes[0]
            return outcomes

    outcomes = _run_in_thread(client)
    assert all(isinstance(o, Accepted) for o in outcomes[:20])
    assert isinstance(outcomes[20], Rejected)


def test_blocking_iteration_drain_and_sessions(server: amqp10.sync.Server) -> None:
    def client() -> tuple[list[Any], int]:
        with amqp10.sync.connect(server.url, timeout=WAIT) as conn:
            session = conn.session()
            receiver = session.open_receiver("gen/4", credit=0)
            receiver.add_credit(10)
            got = []
            for d in receiver:
                got.append(d.message.body)
                d.accept()
                if len(got) == 4:
                    break
            receiver.drain()  # nothing more to send: the credit comes straight back
            credit = receiver.credit
            session.close()
            return got, credit

    got, credit = _run_in_thread(client)
    assert sorted(got) == ["m0", "m1", "m2", "m3"]
    assert credit == 0


def test_blocking_errors_are_raised_in_the_caller(server: amqp10.sync.Server) -> None:
    def client() -> None:
        with amqp10.sync.connect(server.url, timeout=WAIT) as conn:
            receiver = conn.open_receiver("nothing")
            receiver.receive(timeout=0.05)

    with pytest.raises(errors.TimeoutError, match=r"receive from .nothing. timed out after 0\.05s"):
        _run_in_thread(client)


def test_blocking_connect_failure_cleans_up() -> None:
    before = set(threading.enumerate())
    with pytest.raises(errors.ConnectError, match="connection refused"):
        amqp10.sync.connect("amqp://127.0.0.1:1", timeout=WAIT)
    assert set(threading.enumerate()) <= before


def test_a_blocking_service_pipelines_and_the_client_takes_batches(
    server: amqp10.sync.Server,
) -> None:
    def client() -> list[Any]:
        with amqp10.sync.connect(server.url, timeout=WAIT) as conn:
            receiver = conn.open_receiver("pipe/7", credit=10)
            got: list[Any] = []
            for batch in receiver.batches(4, idle=WAIT):
                assert 1 <= len(batch) <= 4
                assert all(d.remote_settled for d in batch)  # the service sent them pre-settled
                got += [d.message.body for d in batch]
                if len(got) == 7:
                    break
            return got

    assert _run_in_thread(client) == [f"p{i}" for i in range(7)]
