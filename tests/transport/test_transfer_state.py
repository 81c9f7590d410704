"""A sender's state on a new delivery's first transfer (Part 4 §4.4.1: transactional posting)."""

from __future__ import annotations

from amqp10.transport import Connection, DeliveryReceived, DeliveryUpdated
from amqp10.types import Accepted, Transfer
from amqp10.types.transactions import TransactionalState

from .pair import C2S, Pair, of_type


def test_state_goes_on_the_first_transfer_only(chunk: int | None) -> None:
    # a small max-frame-size on the receiving end: the state-carrying delivery takes several frames
    pair = Pair(server=Connection("server", max_frame_size=512), chunk=chunk)
    snd, _rcv = pair.attached("txn", credit=5)
    txn = TransactionalState(txn_id=b"\x00\x01")
    plain = snd.send(b"plain")
    d = snd.send(b"x" * 3000, state=txn)
    pair.pump()
    transfers = pair.performatives(C2S, tp=Transfer)
    assert len(transfers) > 3
    assert transfers[0].state is None  # an ordinary send is unchanged
    assert transfers[1].state == txn
    assert all(t.state is None for t in transfers[2:])
    assert d.state == txn and plain.state is None
    received = [e.delivery for e in of_type(pair.server_events, DeliveryReceived)]
    assert [r.remote_state for r in received] == [None, txn]
    assert received[1].payload == b"x" * 3000
    # the receiver answers inside the transaction; the sender sees it as the remote state
    received[1].settle(TransactionalState(txn_id=b"\x00\x01", outcome=Accepted()))
    pair.pump()
    updated = [e for e in of_type(pair.client_events, DeliveryUpdated) if e.delivery is d]
    assert updated and updated[-1].settled
    assert d.remote_state == TransactionalState(txn_id=b"\x00\x01", outcome=Accepted())
