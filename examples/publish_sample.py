"""Publish a sample workload: orders as JSON messages, to a stream (or a queue).

    python examples/publish_sample.py --url amqp://127.0.0.1:5672 --address orders --count 5000

Each message is one order, ``{"order_id", "region", "product", "quantity",
"price"}``, with ``content-type: application/json``, the region as an
application property, and the message-id ``order-<n>``: running the script
again with the same ``--first`` republishes the same ids (a broker address
with a duplicate window stores them once). The broker accepts each message
before the script counts it sent (at least once); up to ``--window`` sends
wait for their outcome at a time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import anyio

import amqp10
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted, Target, symbol

REGIONS = ["emea", "amer", "apac"]
PRODUCTS = {"widget": 19.99, "gadget": 34.50, "gizmo": 7.25, "doohickey": 120.00}


def order(n: int, rng: random.Random) -> dict[str, object]:
    product = rng.choice(sorted(PRODUCTS))
    return {
        "order_id": n,
        "region": rng.choice(REGIONS),
        "product": product,
        "quantity": rng.randint(1, 5),
        "price": PRODUCTS[product],
    }


async def publish(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed + args.first)
    # the "stream" capability asks the broker to create the address as a stream if it is new
    target = Target(address=args.address, capabilities=None if args.queue else [symbol("stream")])
    async with await amqp10.connect(args.url) as conn:
        sender = await conn.open_sender(args.address, settle_mode="at-least-once", target=target)
        in_flight = anyio.Semaphore(args.window)  # sends waiting for the broker's outcome

        async def send(n: int, message: Message) -> None:
            try:
                outcome = await sender.send(message)
                if not isinstance(outcome, Accepted):
                    raise SystemExit(f"order {n} was not accepted: {outcome!r}")
            finally:
                in_flight.release()

        async with anyio.create_task_group() as tg:
            for n in range(args.first, args.first + args.count):
                body = order(n, rng)
                message = Message(
                    json.dumps(body),
                    id=f"order-{n}",
                    subject="order",
                    content_type="application/json",
                    durable=True,
                    creation_time=time.time(),
                    application_properties={"region": body["region"]},
                )
                await in_flight.acquire()
                tg.start_soon(send, n, message)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--url", default="amqp://127.0.0.1:5672")
    p.add_argument("--address", default="orders")
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--first", type=int, default=0, help="number of the first order")
    p.add_argument("--queue", action="store_true", help="publish to a queue, not a stream")
    p.add_argument(
        "--window", type=int, default=200, help="messages awaiting their outcome at once"
    )
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()

    started = time.monotonic()
    try:
        anyio.run(publish, args)
    except AMQPError as exc:
        print(f"publish_sample: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    print(f"published {args.count} orders to {args.address!r} in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
