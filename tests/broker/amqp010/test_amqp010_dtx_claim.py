"""A new xid's claim with several workers (``Branches.claim``) waits for the metadata's one
order, not for this worker's store: a branch not prepared is in memory only, so nothing of
it waits to be written (as one worker answers ``dtx.start`` at once)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from amqp10.broker.amqp010.dtx import Branches
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker


class Writing:
    """A store journal with a write outstanding (another session's publish, say)."""

    stalled: str | None = None
    idle = False

    def __init__(self) -> None:
        self.waiting: list[Callable[[], None]] = []

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None:
        if on_commit is not None:
            self.waiting.append(on_commit)


class Ordered:
    """The metadata's one order: a change made here is ordered once :meth:`decide` says so."""

    def __init__(self) -> None:
        self.changes: list[tuple[Any, ...]] = []
        self.held: list[Callable[[], None]] = []

    def changed(self, vhost: str, change: tuple[Any, ...]) -> None:
        self.changes.append(change)

    def hold(self, answer: Callable[[], None]) -> bool:
        self.held.append(answer)
        return True

    def decide(self) -> None:
        held, self.held = self.held, []
        for answer in held:
            answer()


class NoneHoldsIt:
    """The other workers: none holds the branch asked about."""

    count = 1

    def ask(self, op: str, args: Mapping[str, Any], answered: Callable[[list[Any]], None]) -> None:
        answered([])


def test_a_claim_is_answered_once_ordered_without_waiting_for_the_store() -> None:
    journal, order = Writing(), Ordered()
    broker = Broker(BrokerConfig(), journal=journal)
    broker.metadata = order
    broker.others = NoneHoldsIt()
    got: list[bool] = []
    Branches.of(broker).claim((0, b"gid", b"bid"), lambda answer: got.append(answer()))
    assert [c[0] for c in order.changes] == ["place"] and got == []  # placed; the order decides
    order.decide()
    assert got == [True]  # this worker's: answered, the store's outstanding write aside
    assert journal.waiting == []  # (nothing of the claim waits on the store)
