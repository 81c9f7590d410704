"""Codec benchmark: amqp10 side by side with Proton's Python binding, in one run.

Measures operations per second for encoding and decoding a typical message and a
transfer performative, ours and Proton's, with ``timeit`` (best-of-N repeats), and
prints a table with the median and best of each and the ratio ours/proton.

    python bench/codec_bench.py            # full run
    python bench/codec_bench.py --quick    # a few seconds, for a smoke test
    python bench/codec_bench.py --json out.json

See bench/README.md for what each operation does exactly.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run from a checkout without installing: make the repo root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import proton

from amqp10.message import Message
from amqp10.types import Transfer, decode, encode

# --- the workload ---------------------------------------------------------------------

MESSAGE_ID = "order-7f3c-000012345"
SUBJECT = "orders.created"
APP_PROPS: dict[str, Any] = {
    "customer": "acme",
    "count": 42,
    "vip": True,
    "discount": 0.125,
    "channel": "web",
}
BODY: dict[str, Any] = {
    "order-id": 1234567,
    "sku": "WIDGET-3000",
    "quantity": 3,
    "price": 19.99,
    "gift": False,
}
DELIVERY_TAG = b"\x00\x00\x00\x00\x00\x00\x30\x39"


def ours_message() -> Message:
    return Message(BODY, id=MESSAGE_ID, subject=SUBJECT, application_properties=dict(APP_PROPS))


def proton_message() -> proton.Message:
    return proton.Message(BODY, id=MESSAGE_ID, subject=SUBJECT, properties=dict(APP_PROPS))


def proton_transfer() -> proton.Described:
    return proton.Described(
        proton.ulong(0x14),
        [proton.uint(0), proton.uint(12345), DELIVERY_TAG, proton.uint(0), False],
    )


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any], bytes, bytes]]:
    """(operation, ours, proton, our encoding, proton's encoding) for each operation."""
    msg = ours_message()
    msg_bytes = msg.encode()
    pmsg = proton_message()
    pmsg_bytes = pmsg.encode()
    pmsg_sink = proton.Message()  # decoded into repeatedly (reused, Proton's fastest way)

    transfer = Transfer(
        handle=0, delivery_id=12345, delivery_tag=DELIVERY_TAG, message_format=0, settled=False
    )
    transfer_bytes = encode(transfer)
    ptransfer = proton_transfer()
    pdata = proton.Data()

    def proton_transfer_encode() -> bytes:
        pdata.clear()
        pdata.put_object(ptransfer)
        return pdata.encode()

    ptransfer_bytes = proton_transfer_encode()
    pdata_dec = proton.Data()

    def proton_transfer_decode() -> Any:
        pdata_dec.clear()
        pdata_dec.decode(ptransfer_bytes)
        pdata_dec.rewind()
        pdata_dec.next()
        return pdata_dec.get_object()

    def proton_message_decode() -> proton.Message:
        pmsg_sink.decode(pmsg_bytes)
        return pmsg_sink

    return [
        ("message encode", msg.encode, pmsg.encode, msg_bytes, pmsg_bytes),
        (
            "message decode",
            lambda: Message.decode(msg_bytes),
            proton_message_decode,
            msg_bytes,
            pmsg_bytes,
        ),
        (
            "transfer encode",
            lambda: encode(transfer),
            proton_transfer_encode,
            transfer_bytes,
            ptransfer_bytes,
        ),
        (
            "transfer decode",
            lambda: decode(transfer_bytes),
            proton_transfer_decode,
            transfer_bytes,
            ptransfer_bytes,
        ),
    ]


def check_equivalent() -> None:
    """Fail loudly if the two sides are not doing the same work."""
    ours = ours_message().encode()
    theirs = proton_message().encode()
    pm: Any = proton.Message()
    pm.decode(ours)
    assert (pm.id, pm.subject, pm.properties, pm.body) == (MESSAGE_ID, SUBJECT, APP_PROPS, BODY)
    m = Message.decode(theirs)
    assert (m.id, m.subject, m.application_properties, m.body) == (
        MESSAGE_ID,
        SUBJECT,
        APP_PROPS,
        BODY,
    )
    t = decode(
        encode(
            Transfer(handle=0, delivery_id=1, delivery_tag=b"t", message_format=0, settled=False)
        )
    )
    assert t.delivery_id == 1
    d = proton.Data()
    d.decode(
        encode(
            Transfer(
                handle=0,
                delivery_id=12345,
                delivery_tag=DELIVERY_TAG,
                message_format=0,
                settled=False,
            )
        )
    )
    d.rewind()
    d.next()
    assert d.get_object() == proton_transfer()


# --- measuring ---------------------------------------------------------------------------


TIMERS = {"cpu": time.process_time, "wall": time.perf_counter}


def _calibrate(timer: timeit.Timer, min_time: float) -> int:
    """A loop count for which one timing takes about ``min_time`` seconds."""
    number, _ = timer.autorange()
    t = timer.timeit(number)
    return max(1, int(number * min_time / max(t, 1e-9)))


def measure(
    ours: Callable[[], Any],
    theirs: Callable[[], Any],
    repeat: int,
    min_time: float,
    timer: Callable[[], float] = time.process_time,
) -> tuple[list[float], list[float]]:
    """Ops/s of each timing of ours and of Proton's, interleaved.

    The two sides alternate (ours, proton, ours, ...) so that a change in machine
    load during the run affects both alike.
    """
    t_ours, t_theirs = timeit.Timer(ours, timer=timer), timeit.Timer(theirs, timer=timer)
    n_ours, n_theirs = _calibrate(t_ours, min_time), _calibrate(t_theirs, min_time)
    rates_ours, rates_theirs = [], []
    for _ in range(repeat):
        rates_ours.append(n_ours / t_ours.timeit(n_ours))
        rates_theirs.append(n_theirs / t_theirs.timeit(n_theirs))
    return rates_ours, rates_theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (3 x 0.1 s per op)")
    parser.add_argument("--repeat", type=int, default=None, help="timings per op (default 7)")
    parser.add_argument(
        "--timer",
        choices=sorted(TIMERS),
        default="cpu",
        help="cpu: process CPU time (default; steady on a shared machine); wall: perf_counter",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    min_time = 0.1 if args.quick else 0.5

    check_equivalent()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    pyver = f"{platform.python_implementation()} {platform.python_version()}"
    pnver = ".".join(map(str, proton.VERSION))
    print(f"command: {command}")
    print(f"python:  {pyver} ({platform.machine()}, {platform.system()})")
    print(f"proton:  python-qpid-proton {pnver}")
    print(
        f"timing:  {repeat} timings x ~{min_time:g} s per op and side, ours and proton "
        f"interleaved (timeit, {args.timer} time); ops/s as median (best)"
    )
    print()

    rows = []
    for name, ours, theirs, ours_bytes, theirs_bytes in cases():
        r_ours, r_theirs = measure(ours, theirs, repeat, min_time, TIMERS[args.timer])
        o_med, o_best = statistics.median(r_ours), max(r_ours)
        p_med, p_best = statistics.median(r_theirs), max(r_theirs)
        rows.append(
            {
                "operation": name,
                "ours_median": o_med,
                "ours_best": o_best,
                "proton_median": p_med,
                "proton_best": p_best,
                "ratio_median": o_med / p_med,
                "ratio_best": o_best / p_best,
                "ours_bytes": len(ours_bytes),
                "proton_bytes": len(theirs_bytes),
            }
        )

    header = f"{'operation':<16} {'ours ops/s':>22} {'proton ops/s':>22} {'ratio':>6}  bytes o/p"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['operation']:<16} "
            f"{r['ours_median']:>10,.0f} ({r['ours_best']:>9,.0f}) "
            f"{r['proton_median']:>10,.0f} ({r['proton_best']:>9,.0f}) "
            f"{r['ratio_median']:>5.2f}x  {r['ours_bytes']}/{r['proton_bytes']}"
        )
    print()
    print("ratio = ours/proton (medians); 'bytes o/p' = encoded size ours/proton")

    if args.json:
        out = {
            "command": command,
            "python": pyver,
            "proton": pnver,
            "repeat": repeat,
            "min_time": min_time,
            "timer": args.timer,
            "results": rows,
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
