"""The 0-10 codec work the broker does per message, in process (no sockets, no clients):
a ``message.transfer``'s frames decoded (``Assembler.feed``), the message stored
(``from_transfer``) and delivered to a subscriber (``Amqp010Session.transfer``, encoded
to frames). CPU microseconds per message, best of ``--repeat`` runs; 100-byte bodies with
headers as ``qpid.messaging`` sends them (routing key, priority, a message-id, a subject
and one more application header).

    .venv/bin/python bench/amqp010_codec_bench.py
    PYTHONPATH=/other/tree .venv/bin/python bench/amqp010_codec_bench.py   # A/B

The full picture (clients, the network, the rest of the broker) is bench/amqp010_bench.py.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from amqp10.amqp010.framing import Assembler, encode_op
from amqp10.amqp010.model import Compound
from amqp10.amqp010.spec import OPS, STRUCTS
from amqp10.broker.amqp010.message import from_transfer
from amqp10.broker.amqp010.session import Amqp010Session, Subscription
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker

ACCEPT_NONE = 1


def frames(n: int) -> bytes:
    t = Compound(OPS["message.transfer"], destination="", accept_mode=0, acquire_mode=0)
    t.headers = [
        Compound(
            STRUCTS["delivery-properties"], routing_key="bench-q", delivery_mode=1, priority=4
        ),
        Compound(
            STRUCTS["message-properties"],
            content_length=100,
            message_id=uuid.uuid4(),
            content_type="text/plain",
            application_headers={"qpid.subject": "s", "n": 7},
        ),
    ]
    t.body = b"x" * 100
    buf = bytearray()
    for _ in range(n):
        encode_op(buf, 1, t, 0xFFFF)
    return bytes(buf)


class _Context:
    """What a session asks of its connection's context here: an id, and sending."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.out = bytearray()

    def send(self, channel: int, command: Compound) -> int:
        encode_op(self.out, channel, command, 0xFFFF)
        return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    data = frames(args.count)
    broker = Broker(BrokerConfig(), now=lambda: 1000.0)
    queue = broker.vhosts["/"].declare_queue("bench-q", durable=False)
    ctx: Any = _Context(broker)
    session = Amqp010Session(ctx, 1, b"bench")
    sub = Subscription(
        session, "d", queue, accept_mode=ACCEPT_NONE, acquire_mode=0, exclusive=False
    )
    sub.window = False
    best = {"feed": 1e9, "from_transfer": 1e9, "deliver": 1e9}
    for _ in range(args.repeat):
        t0 = time.process_time()
        ops = Assembler().feed(data)
        t1 = time.process_time()
        msgs = [from_transfer(c, "", 1000.0) for _, c in ops]
        t2 = time.process_time()
        ctx.out.clear()
        for m in msgs:
            session.transfer(sub, queue, m)
        t3 = time.process_time()
        for k, v in (("feed", t1 - t0), ("from_transfer", t2 - t1), ("deliver", t3 - t2)):
            best[k] = min(best[k], v)
    per = {k: v / args.count * 1e6 for k, v in best.items()}
    print(" ".join(f"{k} {v:.1f}" for k, v in per.items()), f"total {sum(per.values()):.1f} us/msg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
