"""Leases (core/leases.py) on a fake clock: expiry in order, renewal, drop, the next deadline."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.broker.core import Lease, Leases


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_leases_run_out_in_order_unless_renewed_or_dropped() -> None:
    clock = Clock()
    leases = Leases(clock)
    changed: list[None] = []
    leases.on_change = lambda: changed.append(None)
    gone: list[str] = []
    a = leases.take(10, lambda: gone.append("a"))
    clock.t += 1
    b = leases.take(10, lambda: gone.append("b"))
    c = leases.take(5, lambda: gone.append("c"))  # a shorter duration: the earliest deadline
    assert leases.next_deadline() == 1006 and len(changed) == 2  # a (first) and c moved it earlier
    clock.t += 4
    assert leases.renew(a)  # a now runs to 1015, after b
    leases.drop(c)
    assert not leases.held(c) and leases.next_deadline() == 1011
    clock.t = 1010.999
    assert leases.expire_due() == 0 and gone == []
    clock.t = 1011
    assert leases.expire_due() == 1 and gone == ["b"]
    assert not leases.renew(b)  # ran out: cannot be renewed
    clock.t = 1015
    assert leases.expire_due() == 1 and gone == ["b", "a"]
    assert leases.next_deadline() is None and len(leases) == 0


def test_a_lease_taken_while_expiring_is_kept() -> None:
    clock = Clock()
    leases = Leases(clock)
    again: list[object] = []
    leases.take(1, lambda: again.append(leases.take(1, lambda: None)))
    clock.t += 1
    assert leases.expire_due() == 1
    assert len(leases) == 1 and leases.next_deadline() == clock.t + 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["take", "renew", "drop", "tick"]), st.sampled_from([1.0, 2.5, 5.0]), st.integers(0, 20)),
        max_size=60,
    )
)
def test_leases_expire_as_a_naive_model_says(ops: list[tuple[str, float, int]]) -> None:
    """Against a model that keeps each lease's end and expires by scanning everything."""
    clock = Clock()
    leases = Leases(clock)
    taken: list[Lease] = []
    model: dict[int, float] = {}  # lease number -> its end (while it runs)
    expired: list[int] = []
    for op, duration, pick in ops:
        if op == "take":
            n = len(taken)
            taken.append(leases.take(duration, lambda n=n: expired.append(n)))
            model[n] = clock.t + duration
        elif op in ("renew", "drop") and taken:
            n = pick % len(taken)
            if op == "renew":
                assert leases.renew(taken[n]) == (n in model)
                if n in model:
                    model[n] = clock.t + taken[n].duration
            else:
                leases.drop(taken[n])
                model.pop(n, None)
        else:
            clock.t += duration
            due = sorted((end, n) for n, end in model.items() if end <= clock.t)
            before = len(expired)
            assert leases.expire_due() == len(due)
            assert sorted(expired[before:]) == sorted(n for _, n in due)
            for _, n in due:
                del model[n]
        assert len(leases) == len(model)
        assert leases.next_deadline() == (min(model.values()) if model else None)
