"""The anonymous relay (OASIS "Using the AMQP Anonymous Terminus for Message Routing"),
engine against broker in memory: each message goes where its ``to`` says."""

from __future__ import annotations

from typing import Any

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import store
from amqp10.message import Message
from amqp10.transport import LinkDetached, LinkState, Sender
from amqp10.types import Accepted, ErrorCondition, Rejected, Source, Target, symbol
from amqp10.types.transactions import Coordinator, Declare, Declared, Discharge, TransactionalState
from tests.broker.harness import Client, Net

NOT_FOUND = ErrorCondition.NOT_FOUND


def body(d: Any) -> Any:
    return Message.decode(d.payload).body


def relay(c: Client, *, target: Target | None = None, **kw: Any) -> Sender:
    """A sender to the anonymous terminus (a null target unless one is given)."""
    s = c.session.sender(f"relay-{len(c.session.links)}", source=Source(), target=target, **kw)
    s.attach()
    c.net.pump()
    assert s.state is LinkState.ATTACHED
    return s


def take(c: Client, address: str, n: int = 100) -> list[Any]:
    r = c.receiver(address, credit=n)
    return [body(d) for d in c.received(r)]


def detached(c: Client) -> list[Any]:
    return [e for e in c.events if isinstance(e, LinkDetached)]


def make_net(**config: Any) -> tuple[Net, Client]:
    net = Net(BrokerConfig(auto_create=False, **config))
    v = net.broker.default
    v.declare_queue("q1")
    v.declare_queue("q2")
    v.bind("amq.direct", "q2", "two")
    return net, net.client()


def test_open_offers_anonymous_relay() -> None:
    _, c = make_net()
    assert c.conn.remote_open is not None
    assert symbol("ANONYMOUS-RELAY") in (c.conn.remote_open.offered_capabilities or [])


def test_null_target_and_empty_target_are_both_the_relay() -> None:
    _, c = make_net()
    for target in (None, Target()):
        s = relay(c, target=target)
        # the answer describes the terminus (no address: the relay), never a null one
        assert isinstance(s.remote_target, Target) and s.remote_target.address is None
        assert isinstance(s.remote_source, Source)  # our source, echoed
        for to in ("q1", "/queues/q1", "/exchanges/amq.direct/two"):
            d = c.send(s, Message(body=to, to=to))
            assert isinstance(d.remote_state, Accepted), d.remote_state
    assert take(c, "q1") == ["q1", "/queues/q1"] * 2
    assert take(c, "q2") == ["/exchanges/amq.direct/two"] * 2


def test_unknown_to_is_rejected_not_found_and_the_link_stays_up() -> None:
    net, c = make_net()
    s = relay(c)
    for to in ("nowhere", "/queues/nowhere", "/exchanges/nowhere/k"):
        d = c.send(s, Message(body=1, to=to))
        assert isinstance(d.remote_state, Rejected), to
        assert d.remote_state.error.condition == NOT_FOUND
        assert to.rsplit("/", 2)[-2 if to.startswith("/exchanges") else -1] in d.remote_state.error.description
    assert "nowhere" not in net.broker.default.nodes  # the relay creates no node
    assert not detached(c) and s.state is LinkState.ATTACHED
    d = c.send(s, Message(body="after", to="q1"))
    assert isinstance(d.remote_state, Accepted)
    assert take(c, "q1") == ["after"]


def test_unknown_to_with_auto_create_still_creates_nothing() -> None:
    net = Net(BrokerConfig(auto_create=True))
    c = net.client()
    s = relay(c)
    d = c.send(s, Message(body=1, to="typo"))
    assert isinstance(d.remote_state, Rejected) and d.remote_state.error.condition == NOT_FOUND
    assert "typo" not in net.broker.default.nodes


def test_presettled_relay() -> None:
    _, c = make_net()
    s = relay(c, snd_settle_mode=1)  # settled
    c.send(s, Message(body=1, to="nowhere"))  # dropped: nothing to tell a pre-settled sender
    c.send(s, Message(body=2, to="q1"))
    c.send(s, Message(body=3, to="/exchanges/amq.direct/two"))
    assert not detached(c) and s.state is LinkState.ATTACHED
    assert take(c, "q1") == [2]
    assert take(c, "q2") == [3]


class Journal:
    """A store journal whose commits happen when the test says."""

    stalled: str | None = None

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []
        self.pending: list[Any] = []

    def submit(self, op: tuple[Any, ...], on_commit: Any = None) -> None:
        self.ops.append(op)
        if on_commit is not None:
            self.pending.append(on_commit)

    def commit(self) -> None:
        pending, self.pending = self.pending, []
        for fn in pending:
            fn()

    @property
    def idle(self) -> bool:
        return not self.pending


def test_durable_message_is_stored_before_it_is_accepted() -> None:
    journal = Journal()
    net = Net(BrokerConfig(auto_create=False))
    net.broker.journal = journal
    net.broker.default.declare_queue("durable-q")
    c = net.client()
    s = relay(c)
    d = c.send(s, Message(body="keep", to="/queues/durable-q", durable=True))
    assert d.remote_state is None and not d.remote_settled  # not yet on disk: no outcome
    assert any(op[0] == store.PUT for op in journal.ops)
    journal.commit()
    net.pump()
    assert isinstance(d.remote_state, Accepted)


def control(c: Client, coord: Sender, body: Any) -> Any:
    d = c.send(coord, Message(body=body))
    return d.remote_state


def test_relay_inside_a_transaction() -> None:
    _, c = make_net()
    coord = c.session.sender("coord", source=Source(), target=Coordinator())
    coord.attach()
    c.net.pump()
    assert isinstance(coord.remote_source, Source)  # echoed, not null
    declared = control(c, coord, Declare())
    assert isinstance(declared, Declared)
    txn = declared.txn_id
    s = relay(c)
    ok = c.send(s, Message(body="in-txn", to="q1"), state=TransactionalState(txn_id=txn))
    assert isinstance(ok.remote_state, TransactionalState) and isinstance(ok.remote_state.outcome, Accepted)
    bad = c.send(s, Message(body="lost", to="nowhere"), state=TransactionalState(txn_id=txn))
    assert isinstance(bad.remote_state, TransactionalState)
    assert isinstance(bad.remote_state.outcome, Rejected) and bad.remote_state.outcome.error.condition == NOT_FOUND
    assert net_count(c, "q1") == 0  # nothing before the commit
    assert isinstance(control(c, coord, Discharge(txn_id=txn, fail=False)), Accepted)
    assert take(c, "q1") == ["in-txn"]
    assert s.state is LinkState.ATTACHED


def net_count(c: Client, name: str) -> int:
    q = c.net.broker.default.queue(name)
    assert q is not None
    return len(list(q))
