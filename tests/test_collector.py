"""amqp10.collector.gc_paused: the cyclic collector off inside, back as it was after."""

from __future__ import annotations

import gc

import pytest

from amqp10.collector import gc_paused


def test_the_collector_is_off_inside_and_back_on_after_even_on_errors() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        _ = 1 / 0
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # whoever turned it off turns it on
    finally:
        gc.enable()
