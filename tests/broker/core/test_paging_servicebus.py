"""The real ``azure-servicebus`` SDK peeks past a queue's memory budget: its peek-message
sees the paged-out messages too, in sequence-number order (core/browsing.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage

from amqp10.broker.core.queues import Queue
from tests.broker.amqp1.test_servicebus_sdk import KEY, KEY_NAME, client
from tests.broker.conftest import RunningBroker, make_config, start_broker

N = 600  # messages of about 100 bytes: most of them past a 64 KiB budget


@pytest.fixture
def sb_paged(tmp_path: Path) -> Iterator[RunningBroker]:
    cfg = make_config(
        tmp_path,
        limits={"queue_memory_budget_bytes": 64 * 1024},
        servicebus={"enabled": True, "shared_access_keys": [{"name": KEY_NAME, "key": KEY}], "queues": [{"name": "q.paged"}]},
    )
    yield from start_broker(cfg)


def test_peek_past_the_memory_budget(sb_paged: RunningBroker) -> None:
    with client(sb_paged) as c:
        with c.get_queue_sender("q.paged") as s:
            for first in range(0, N, 100):
                s.send_messages([ServiceBusMessage(f"{i:0100d}") for i in range(first, first + 100)])
        q = sb_paged.broker.default.nodes["q.paged"]
        assert isinstance(q, Queue) and q.pager is not None and q.pager.count > N // 2
        with c.get_queue_receiver("q.paged") as r:
            seen: list[int] = []
            seqs: list[int] = []
            for _ in range(N // 100 + 2):  # pages of 100 (the broker's max_peek), from where the last ended
                page = r.peek_messages(max_message_count=100, sequence_number=seqs[-1] + 1 if seqs else 0)
                if not page:
                    break
                seen += [int(str(m)) for m in page]
                seqs += [m.sequence_number for m in page]
            assert seen == list(range(N))
            assert seqs == sorted(seqs) and len(set(seqs)) == N
            middle = r.peek_messages(max_message_count=10, sequence_number=seqs[450])
            assert [int(str(m)) for m in middle] == list(range(450, 460))
    assert q.count == N  # peeking takes nothing


def test_next_available_session_among_paged_messages(sb_paged: RunningBroker) -> None:
    with client(sb_paged) as c:
        with c.get_queue_sender("q.paged") as s:
            for first in range(0, N, 100):  # no session: enough to page out what follows
                s.send_messages([ServiceBusMessage(f"{i:0100d}") for i in range(first, first + 100)])
            s.send_messages([ServiceBusMessage(f"late-{i}", session_id="late") for i in range(3)])
        q = sb_paged.broker.default.nodes["q.paged"]
        assert isinstance(q, Queue) and q.pager is not None and q.pager.paged_count(4) > N // 2
        with c.get_queue_receiver("q.paged", session_id=NEXT_AVAILABLE_SESSION) as r:
            assert r.session.session_id == "late"
            got = []
            for _ in range(5):
                got += r.receive_messages(max_message_count=3 - len(got), max_wait_time=2)
                if len(got) >= 3:
                    break
            assert [str(m) for m in got] == ["late-0", "late-1", "late-2"]
            for m in got:
                r.complete_message(m)
    assert q.count == N
