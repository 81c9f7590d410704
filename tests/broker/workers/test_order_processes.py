"""Changes answered once the one order has them, on every worker (issue 31's metadata).

``amqp10 broker --workers 2`` on 127.0.0.1, clients pinned to a chosen worker. A change a
client of one worker makes is answered only once every worker applied it: while the
other worker is stopped (SIGSTOP) it is not answered; once that worker runs again it
is, and a client of that worker at once sees the change. The one bounded wait for "not
answered while stopped" can only make a broken broker pass on a slow machine, never a
correct one fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.amqp010.peer import SocketPeer
from tests.broker.test_workers import Parent

from . import test_amqp010_processes as p010
from .test_gaps_processes import answered_only_by_the_owner
from .test_processes import owned_by

pytestmark = pytest.mark.slow


def answered_once_applied_by(broker: Parent, other: int, change: Callable[[], None]) -> None:
    """``change()`` (a client's blocking change, on the worker that is not ``other``) is not
    answered while worker ``other`` is stopped (so before it applied the change), and is
    once it runs again."""
    answered_only_by_the_owner(broker, other, change, what="the change")


def test_0_10_exchange_declare_bind_and_unbind_complete_once_every_worker_has_them(broker: Parent) -> None:
    """A 0-10 client declares an exchange and binds a queue to it; a client of the other
    worker publishes to the exchange right after the completion: routed. Unbound the same
    way, its next publish is not."""
    with p010.one_on_each(broker) as peers:
        for a in (0, 1):
            b = 1 - a
            p, other = peers[a], peers[b]
            name, exchange = owned_by(a, f"q010order{a}_"), f"x010order{a}"
            p.call("queue.declare", queue=name)

            def declare_and_bind(p: SocketPeer = p, name: str = name, exchange: str = exchange) -> None:
                p.call("exchange.declare", exchange=exchange, type="direct")
                p.call("exchange.bind", exchange=exchange, queue=name, binding_key="k")

            def unbind(p: SocketPeer = p, name: str = name, exchange: str = exchange) -> None:
                p.call("exchange.unbind", exchange=exchange, queue=name, binding_key="k")

            answered_once_applied_by(broker, b, declare_and_bind)
            p010.publish(other, "k", b"routed", exchange=exchange)
            assert p010.counts(other, name) == (1, 0)
            answered_once_applied_by(broker, b, unbind)
            p010.publish(other, "k", b"unbound", exchange=exchange)
            assert p010.counts(other, name) == (1, 0)
