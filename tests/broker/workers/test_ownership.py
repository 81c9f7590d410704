"""Which worker owns a node: the same answer on every worker, spread over all of them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from amqp10.broker.workers import ownership
from amqp10.broker.workers.ownership import Ownership


def test_one_worker_owns_everything() -> None:
    one = Ownership(1)
    assert all(one.owner("/", f"q{i}") == 0 and one.is_local("/", f"q{i}") for i in range(100))


def test_every_worker_computes_the_same_owner() -> None:
    views = [Ownership(4, me) for me in range(4)]
    for i in range(200):
        owners = {v.owner("/", f"q{i}") for v in views}
        assert len(owners) == 1
        (owner,) = owners
        assert [v.is_local("/", f"q{i}") for v in views] == [me == owner for me in range(4)]


def test_the_owner_is_stable_across_processes() -> None:
    """CRC-32, not hash(): a worker started later (another PYTHONHASHSEED) agrees."""
    code = "from amqp10.broker.workers.ownership import Ownership; print([Ownership(3).owner('v', f'n{i}') for i in range(50)])"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], env={"PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1
    assert runs.pop().strip() == str([Ownership(3).owner("v", f"n{i}") for i in range(50)])


def test_nodes_spread_over_the_workers() -> None:
    o = Ownership(4)
    counts = [0] * 4
    for i in range(4000):
        counts[o.owner("/", f"queue-{i}")] += 1
    assert min(counts) > 800  # about 1,000 each


def test_names_that_differ_in_their_last_character_spread_too() -> None:
    # plain CRC-32 mod 2 put name0..name3 on one worker for every prefix (its low bit does
    # not see the last character's low bits); mixed, about 1 prefix in 8 does, as chance has it
    two = Ownership(2)
    on_one = sum(len({two.owner("/", f"p{k}-{i}") for i in range(4)}) == 1 for k in range(400))
    assert on_one < 100  # 51 of 400 (1/8: 50)


def test_the_vhost_is_part_of_the_key_and_overrides_win() -> None:
    o = Ownership(8, 0, {("/", "pinned"): 5})
    assert o.owner("/", "pinned") == 5
    assert {o.owner(f"v{i}", "same-name") for i in range(64)} != {o.owner("/", "same-name")}


@pytest.mark.parametrize(("workers", "me", "overrides"), [(0, 0, None), (2, 2, None), (2, 0, {("/", "q"): 3})])
def test_a_bad_layout_is_refused(workers: int, me: int, overrides: dict[tuple[str, str], int] | None) -> None:
    with pytest.raises(ValueError):
        Ownership(workers, me, overrides)


def test_placement_answers_a_stand_in_for_a_node_of_another_worker_only() -> None:
    from amqp10.broker.config import BrokerConfig
    from amqp10.broker.core import Broker
    from amqp10.broker.workers.ownership import Placement
    from amqp10.broker.workers.remote import RemoteNode, RemoteNodes

    ownership = Ownership(3, 1, {("/", "mine"): 1, ("/", "theirs"): 2})
    links = {0: RemoteNodes("to-0"), 2: RemoteNodes("to-2")}
    placement = Placement(ownership, links)
    assert placement("/", "mine") is None
    theirs = placement("/", "theirs")
    assert isinstance(theirs, RemoteNode) and theirs is links[2].nodes[("/", "theirs")]
    assert placement("/", "theirs") is theirs  # one stand-in a node
    broker = Broker(BrokerConfig())
    broker.placement = placement
    broker.default.declare_queue("mine")
    assert broker.default.lookup("theirs", create=True) is theirs  # (not created here)
    assert "theirs" not in broker.default.nodes
    mine = broker.default.lookup("mine", create=False)
    assert mine is not None and mine.kind == "queue"
    with pytest.raises(ValueError):
        Placement(ownership, {0: links[0]})  # no link to worker 2


def test_an_owner_asked_before_is_the_same_and_overrides_still_win(monkeypatch: pytest.MonkeyPatch) -> None:
    o = Ownership(4, me=1)
    names = [f"q{i}" for i in range(200)] + [f"{ownership.dynamic_prefix(3)}x", f"{ownership.reply_prefix(2)}y"]
    first = [o.owner("/", n) for n in names]
    assert first == [Ownership(4).owner("/", n) for n in names]  # remembered: the same answers
    assert first[-2:] == [3, 2]  # (the names that say their owner)
    hashed = first[0]
    o.place("/", "q0", (hashed + 1) % 4)  # an override after the name was asked: it wins
    assert o.owner("/", "q0") == (hashed + 1) % 4
    o.unplace("/", "q0")
    assert o.owner("/", "q0") == hashed
    monkeypatch.setattr(ownership, "HASHED_LIMIT", 10)  # bounded: starts again, same answers
    fresh = Ownership(4, me=1)
    assert [fresh.owner("/", n) for n in names] == first
    assert len(fresh._hashed) <= 10


def test_a_virtual_host_asks_the_placement_once_a_name_until_an_override_changes() -> None:
    """Every publish to the default exchange asks where its queue is (``VirtualHost.elsewhere``):
    the placement is asked once a name, and again once the override table changed (an
    exclusive queue placed on a worker, or no longer), through ``Ownership.changed``."""
    from amqp10.broker.config import BrokerConfig
    from amqp10.broker.core import Broker
    from amqp10.broker.workers.ownership import Placement
    from amqp10.broker.workers.remote import RemoteNode, RemoteNodes

    ownership = Ownership(2, 0, {("/", "mine"): 0})
    placement = Placement(ownership, {1: RemoteNodes("to-1")})
    asked: list[str] = []

    def counted(vhost: str, name: str) -> RemoteNode | None:
        asked.append(name)
        return placement(vhost, name)

    broker = Broker(BrokerConfig())
    broker.placement = counted
    ownership.changed = broker.placement_changed  # (as Peers installs it)
    vhost = broker.default
    vhost.declare_queue("mine")
    assert [vhost.elsewhere("mine") for _ in range(3)] == [None, None, None]
    assert asked == ["mine"]
    ownership.place("/", "mine", 1)  # placed on the other worker: its stand-in from now on
    theirs = vhost.elsewhere("mine")
    assert isinstance(theirs, RemoteNode) and vhost.elsewhere("mine") is theirs
    assert asked == ["mine", "mine"]
    ownership.unplace("/", "mine")
    assert vhost.elsewhere("mine") is None
    ownership.replace([["/", "mine", 1]])
    assert vhost.elsewhere("mine") is theirs
    ownership.unplace_worker(1)
    assert vhost.elsewhere("mine") is None
    assert asked == ["mine"] * 5
    broker.placement = placement  # another placement: asked afresh
    assert vhost.elsewhere("mine") is None and asked == ["mine"] * 5
