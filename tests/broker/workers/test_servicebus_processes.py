"""Service Bus (``[servicebus]``) on a queue another worker owns, ``--workers 2``.

A claims-based connection (a connection string: SAS tokens on ``$cbs``) on each worker,
each consuming a queue the *other* worker owns. A dead-letter's reason and description,
and the reason a delivery limit gives (``MaxDeliveryCountExceeded``), are written into
the message by the consumer's worker: they reach the owner with the outcome, so the
dead-lettered message its dead-letter queue holds carries them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.client import Connection
from amqp10.errors import LinkError
from amqp10.message import Message
from amqp10.types import Accepted, Error, Source, symbol, timestamp
from tests.broker.conftest import make_config
from tests.broker.test_workers import WAIT
from tests.broker.workers_mode import start_processes

from .test_processes import connected_on_each, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
QUEUES = {w: owned_by(w, "sb.") for w in (0, 1)}
"""A queue each worker owns."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def one_on_each(port: int) -> AsyncIterator[dict[int, Connection]]:
    """A claims-based connection served by worker 0 and one by worker 1 (the kernel spreads them)."""
    conn_str = (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName={KEY_NAME};"
        f"SharedAccessKey={KEY};UseDevelopmentEmulator=true"
    )
    async with connected_on_each(conn_str) as conns:
        yield conns


async def sent_and_first(conn: Connection, queue: str, bodies: tuple[str, ...]) -> tuple[Any, Any, Any]:
    """A sender to ``queue`` that sent ``bodies`` (each accepted), a receiver from it (credit
    1), and its first delivery (the first of them)."""
    sender = await conn.open_sender(queue)
    for body in bodies:
        assert isinstance(await sender.send(Message(body=body)), Accepted)
    receiver = await conn.open_receiver(queue, credit=1)
    d = await receiver.receive(timeout=WAIT)
    assert d.message.body == bodies[0]
    return sender, receiver, d


async def test_dead_letter_reasons_reach_the_owners_dead_letter_queue(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        servicebus={
            "enabled": True,
            "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
            "queues": [{"name": q, "max_delivery_count": 2} for q in QUEUES.values()],
        },
    )
    with contextmanager(start_processes)(config, 2) as b:
        async with one_on_each(b.port) as conns:
            for consumer in (0, 1):
                conn, queue = conns[consumer], QUEUES[1 - consumer]  # the other worker's queue
                sender, receiver, d = await sent_and_first(conn, queue, ("dead", "poison"))
                info = {"DeadLetterReason": "bad", "DeadLetterErrorDescription": "very bad"}
                await d.reject(Error(condition=symbol("com.microsoft:dead-letter"), info=info))
                for _ in range(2):  # its max delivery count: then dead-lettered
                    d = await receiver.receive(timeout=WAIT)
                    assert d.message.body == "poison"
                    await d.modify(delivery_failed=True)
                await receiver.close()
                dead_letters = await conn.open_receiver(f"{queue}/$deadletterqueue", credit=2)
                got = []
                for _ in range(2):
                    d = await dead_letters.receive(timeout=WAIT)
                    props = d.message.application_properties or {}
                    got.append((d.message.body, props.get("DeadLetterReason"), props.get("DeadLetterErrorDescription")))
                    await d.accept()
                assert got == [("dead", "bad", "very bad"), ("poison", "MaxDeliveryCountExceeded", "delivered 2 times")]
                await dead_letters.close()
                await sender.close()


async def test_a_topic_subscription_is_one_queue_for_its_receivers_on_every_worker(tmp_path: Path) -> None:
    """A ``[servicebus]`` subscription is declared on every worker at start; its receivers on
    both workers share its one queue, on the worker that owns its name: each message once."""
    config = make_config(
        tmp_path,
        servicebus={
            "enabled": True,
            "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
            "topics": [{"name": "t", "subscriptions": [{"name": "shared"}]}],
        },
    )
    with contextmanager(start_processes)(config, 2) as b:
        async with one_on_each(b.port) as conns:
            receivers = {w: await conns[w].open_receiver("t/Subscriptions/shared", credit=1) for w in (0, 1)}
            sender = await conns[0].open_sender("t")
            for i in range(6):
                assert isinstance(await sender.send(Message(body=f"m{i}")), Accepted)
            got: list[str] = []
            for _ in range(30):  # one at a time from either, until the six arrived
                for r in receivers.values():
                    try:
                        d = await r.receive(timeout=1)
                    except TimeoutError:
                        continue
                    got.append(d.message.body)
                    await d.accept()
                if len(got) >= 6:
                    break
            for r in receivers.values():  # and nothing more: none came twice
                with pytest.raises(TimeoutError):
                    await r.receive(timeout=1)
            assert sorted(got) == [f"m{i}" for i in range(6)]


async def _entity_request(conn: Connection, entity: str, operation: str, body: dict[str, Any]) -> tuple[Any, Any]:
    """``operation`` on ``entity/$management`` (answered on the receiver link from it): the
    reply's status code and body."""
    address = f"{entity}/$management"
    replies = await conn.open_receiver(address, credit=1)
    requests = await conn.open_sender(address)
    request = Message(body=body, application_properties={"operation": operation}, id="r1")
    await requests.send(request)
    reply = await replies.receive(timeout=WAIT)
    await reply.accept()
    await requests.close()
    await replies.close()
    return (reply.message.application_properties or {}).get("statusCode"), reply.message.body


async def test_an_entitys_peek_and_schedule_are_answered_by_its_queues_owner(tmp_path: Path) -> None:
    """``ENTITY/$management``'s peek-message and schedule-message asked on the worker that
    does not own the queue see and change the owner's queue (that worker's record of it
    holds none of its messages)."""
    config = make_config(
        tmp_path,
        servicebus={
            "enabled": True,
            "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
            "queues": [{"name": q} for q in QUEUES.values()],
        },
    )
    with contextmanager(start_processes)(config, 2) as b:
        async with one_on_each(b.port) as conns:
            for asker in (0, 1):
                conn, queue = conns[asker], QUEUES[1 - asker]  # the other worker's queue
                sender = await conn.open_sender(queue)
                assert isinstance(await sender.send(Message(body="now")), Accepted)
                await sender.close()
                status, body = await _entity_request(
                    conn, queue, "com.microsoft:peek-message", {"from-sequence-number": 0, "message-count": 5}
                )
                assert status == 200
                assert [Message.decode(bytes(m["message"])).body for m in body["messages"]] == ["now"]
                later = Message(body="later", message_annotations={symbol("x-opt-scheduled-enqueue-time"): timestamp(0)})
                status, body = await _entity_request(
                    conn, queue, "com.microsoft:schedule-message", {"messages": [{"message": later.encode()}]}
                )
                assert status == 200 and len(body["sequence-numbers"]) == 1
                receiver = await conns[1 - asker].open_receiver(queue, credit=2)  # (on the owner)
                got = []
                for _ in range(2):
                    d = await receiver.receive(timeout=WAIT)
                    got.append(d.message.body)
                    await d.accept()
                assert got == ["now", "later"]
                await receiver.close()


SHORT = {w: owned_by(w, "sb.short.") for w in (0, 1)}
"""A queue each worker owns whose peek-locks last a second."""
SESSIONS = {w: owned_by(w, "sb.sessions.") for w in (0, 1)}
"""A queue each worker owns, for session receivers."""


def _locked_config(tmp_path: Path) -> Any:
    queues = [{"name": q} for q in QUEUES.values()]
    queues += [{"name": q, "lock_duration": 1.0} for q in SHORT.values()]
    queues += [{"name": q} for q in SESSIONS.values()]
    return make_config(
        tmp_path,
        servicebus={"enabled": True, "shared_access_keys": [{"name": KEY_NAME, "key": KEY}], "queues": queues},
    )


async def test_a_deferred_message_is_set_aside_read_and_settled_on_its_queues_owner(tmp_path: Path) -> None:
    """A receiver on the worker that does not own the queue defers a delivery (modified
    undeliverable-here): the owner's queue sets it aside (no consumer gets it), and
    ``receive-by-sequence-number`` and ``update-disposition`` asked on the receiver's
    connection read and settle it there (that worker's record of the queue holds nothing)."""
    with contextmanager(start_processes)(_locked_config(tmp_path), 2) as b:
        async with one_on_each(b.port) as conns:
            for consumer in (0, 1):
                conn, queue = conns[consumer], QUEUES[1 - consumer]  # the other worker's queue
                sender = await conn.open_sender(queue)
                assert isinstance(await sender.send(Message(body="later")), Accepted)
                receiver = await conn.open_receiver(queue, credit=1)
                d = await receiver.receive(timeout=WAIT)
                number = annotations(d)["x-opt-sequence-number"]
                await d.modify(delivery_failed=True, undeliverable_here=True)  # the SDK's defer
                with pytest.raises(TimeoutError):  # set aside: delivered to nobody
                    await receiver.receive(timeout=1)
                status, body = await _entity_request(
                    conn, queue, "com.microsoft:receive-by-sequence-number", {"sequence-numbers": [number]}
                )
                assert status == 200
                (got,) = body["messages"]
                assert Message.decode(bytes(got["message"])).body == "later"
                token = got["lock-token"]
                status, _ = await _entity_request(conn, queue, "com.microsoft:renew-lock", {"lock-tokens": [token]})
                assert status == 200
                status, _ = await _entity_request(
                    conn, queue, "com.microsoft:update-disposition", {"disposition-status": "completed", "lock-tokens": [token]}
                )
                assert status == 200
                status, _ = await _entity_request(  # taken back and completed: gone
                    conn, queue, "com.microsoft:receive-by-sequence-number", {"sequence-numbers": [number]}
                )
                assert status == 404
                await receiver.close()
                await sender.close()


async def test_a_peek_lock_on_another_workers_queue_is_held_renewed_and_runs_out(tmp_path: Path) -> None:
    """A delivery from a queue another worker owns is peek-locked on the receiver's worker:
    ``renew-lock`` on that connection extends it; left to run out (a queue whose locks last
    a second), the message goes back to the owner's queue, to a second receiver, and
    renewing its lock is refused (lock lost)."""
    with contextmanager(start_processes)(_locked_config(tmp_path), 2) as b:
        async with one_on_each(b.port) as conns:
            for consumer in (0, 1):
                conn = conns[consumer]
                queue, short = QUEUES[1 - consumer], SHORT[1 - consumer]  # the other worker's queues
                for q in (queue, short):
                    sender = await conn.open_sender(q)
                    assert isinstance(await sender.send(Message(body=q)), Accepted)
                    await sender.close()
                receiver = await conn.open_receiver(queue, credit=1)
                d = await receiver.receive(timeout=WAIT)
                token = annotations(d)["x-opt-lock-token"]
                status, body = await _entity_request(conn, queue, "com.microsoft:renew-lock", {"lock-tokens": [token]})
                assert status == 200 and len(body["expirations"]) == 1
                await d.accept()
                await receiver.close()
                receiver = await conn.open_receiver(short, credit=1)
                d = await receiver.receive(timeout=WAIT)
                token = annotations(d)["x-opt-lock-token"]
                again = await conn.open_receiver(short, credit=1)
                back = await again.receive(timeout=WAIT)  # once the lock ran out
                assert back.message.body == short
                status, _ = await _entity_request(conn, short, "com.microsoft:renew-lock", {"lock-tokens": [token]})
                assert status == 410  # lost: the message went back
                await back.accept()
                await again.close()
                await receiver.close()


def annotations(d: Any) -> dict[Any, Any]:
    return dict(d.message.message_annotations or {})


SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL = symbol("com.microsoft:locked-until-utc")


async def _session_receiver(conn: Connection, queue: str, sid: str | None, credit: int = 5) -> Any:
    return await conn.open_receiver(queue, credit=credit, source=Source(address=queue, filter={SESSION_FILTER: sid}))


async def test_a_session_receiver_on_another_workers_queue_gets_its_locked_sessions_messages_only(
    tmp_path: Path,
) -> None:
    """A session receiver (``com.microsoft:session-filter``) on the worker that does not own
    the queue: the owner picks the next available session and locks it, the receiver's
    attach answer names it (with its lock's end), and only that session's messages come;
    a second next-available receiver gets the other session, a receiver naming the locked
    one is refused (resource-locked), a third next-available one finds none (not-found, as
    the owner answers it: one worker's answer); ``renew-session-lock`` on the receiver's connection renews it, and the
    session is free again once its receiver detached."""
    with contextmanager(start_processes)(_locked_config(tmp_path), 2) as b:
        async with one_on_each(b.port) as conns:
            for consumer in (0, 1):
                conn, queue = conns[consumer], SESSIONS[1 - consumer]  # the other worker's queue
                sender = await conn.open_sender(queue)
                for body, group in (("a1", "A"), ("b1", "B"), ("a2", "A")):
                    assert isinstance(await sender.send(Message(body=body, group_id=group)), Accepted)
                first = await _session_receiver(conn, queue, None)
                assert first.remote_source.filter[SESSION_FILTER] == "A"
                assert LOCKED_UNTIL in (first._link.remote_attach.properties or {})
                got = [await first.receive(timeout=WAIT) for _ in range(2)]
                assert [d.message.body for d in got] == ["a1", "a2"]
                with pytest.raises(TimeoutError):  # B's is not for it
                    await first.receive(timeout=1)
                second = await _session_receiver(conn, queue, None)
                assert second.remote_source.filter[SESSION_FILTER] == "B"
                assert (await second.receive(timeout=WAIT)).message.body == "b1"
                with pytest.raises(LinkError) as held:  # A is locked
                    await _session_receiver(conn, queue, "A")
                assert "resource-locked" in str(held.value)
                with pytest.raises(LinkError) as none:  # none free: what one worker answers, not found
                    await _session_receiver(conn, queue, None)
                assert "not-found" in str(none.value)
                status, _ = await _entity_request(conn, queue, "com.microsoft:renew-session-lock", {"session-id": "A"})
                assert status == 200
                for d in got:
                    await d.accept()
                await first.close()
                again = await _session_receiver(conn, queue, "A")  # free again
                assert again.remote_source.filter[SESSION_FILTER] == "A"
                await again.close()
                await second.close()
                await sender.close()


async def test_a_session_lock_on_another_workers_queue_runs_out_on_the_receivers_worker(tmp_path: Path) -> None:
    """A session receiver on the worker that does not own the queue (whose locks last a
    second) that does not renew its session lock is detached with
    ``com.microsoft:session-lock-lost``; the owner's lock ends with it: the session, and
    its message it held unsettled, go to the next receiver."""
    with contextmanager(start_processes)(_locked_config(tmp_path), 2) as b:
        async with one_on_each(b.port) as conns:
            for consumer in (0, 1):
                conn, queue = conns[consumer], SHORT[1 - consumer]  # the other worker's queue
                sender = await conn.open_sender(queue)
                assert isinstance(await sender.send(Message(body="s1", group_id="S")), Accepted)
                await sender.close()
                first = await _session_receiver(conn, queue, "S")
                assert (await first.receive(timeout=WAIT)).message.body == "s1"
                with pytest.raises(LinkError) as lost:  # its lock ran out
                    await first.receive(timeout=WAIT)
                assert "session-lock-lost" in str(lost.value)
                again = None
                for _ in range(50):  # the owner frees it once the stand-in's link is gone
                    try:
                        again = await _session_receiver(conn, queue, "S")
                        break
                    except LinkError:
                        await anyio.sleep(0.1)
                assert again is not None
                d = await again.receive(timeout=WAIT)
                assert d.message.body == "s1"
                await d.accept()
                await again.close()


async def test_an_update_disposition_of_deferred_and_peek_locked_messages_settles_both(tmp_path: Path) -> None:
    """One ``update-disposition`` naming a deferred message's lock token (read back with
    ``receive-by-sequence-number``: its message is on the queue's owner) and a peek-lock
    a receiver on this worker holds (settled on its link here), asked on the worker that
    does not own the queue: both are completed, as one worker does (before, the peek-lock
    held here kept the whole request here, where the deferred one was not found: 410)."""
    with contextmanager(start_processes)(_locked_config(tmp_path), 2) as b:
        async with one_on_each(b.port) as conns:
            for consumer in (0, 1):
                conn, queue = conns[consumer], QUEUES[1 - consumer]  # the other worker's queue
                sender, receiver, d = await sent_and_first(conn, queue, ("deferred", "held"))
                number = annotations(d)["x-opt-sequence-number"]
                await d.modify(delivery_failed=True, undeliverable_here=True)  # the SDK's defer
                held = await receiver.receive(timeout=WAIT)
                assert held.message.body == "held"
                status, body = await _entity_request(
                    conn, queue, "com.microsoft:receive-by-sequence-number", {"sequence-numbers": [number]}
                )
                assert status == 200
                tokens = [body["messages"][0]["lock-token"], annotations(held)["x-opt-lock-token"]]
                status, _ = await _entity_request(
                    conn, queue, "com.microsoft:update-disposition", {"disposition-status": "completed", "lock-tokens": tokens}
                )
                assert status == 200
                status, _ = await _entity_request(  # the deferred one completed: gone
                    conn, queue, "com.microsoft:receive-by-sequence-number", {"sequence-numbers": [number]}
                )
                assert status == 404
                status, body = await _entity_request(  # and the held one: none left
                    conn, queue, "com.microsoft:peek-message", {"from-sequence-number": 0, "message-count": 5}
                )
                assert status == 204
                await receiver.close()
                await sender.close()
