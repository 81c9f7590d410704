"""Long-running fuzzer for the sans-IO engine (the brief form is tests/transport/test_fuzz.py).

Feeds random and mutated frames to fresh engines, on a fresh connection, after a
valid open, and mid-session (after open/begin/attach with credit), using the same
generators and the same invariant as the test suite: events, or a clean
``amqp:*`` teardown; never an exception, an ``amqp:internal-error`` or a wedged
engine. Stops by itself after ``--seconds`` (default 60) or ``--iterations``.

    .venv/bin/python bench/fuzz_engine.py                   # 60 s
    .venv/bin/python bench/fuzz_engine.py --seconds 600 --seed 7
    .venv/bin/python bench/fuzz_engine.py --replay bench/out/fuzz-crash-....bin
    .venv/bin/python bench/fuzz_engine.py --stateful --seconds 300   # the pair state machine

Each distinct failure is saved as ``bench/out/fuzz-crash-<mode>-<seed>.bin`` (the
bytes the peer sent) with a ``.json`` beside it (mode, seed, how the bytes were cut,
the traceback); ``--replay`` runs one again. Exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp10.transport import ConnectionFailed, LinkFailed, SessionFailed  # noqa: E402
from amqp10.transport.framing import AMQP_HEADER  # noqa: E402
from tests.transport.test_fuzz import (  # noqa: E402
    MODES,
    gen_case,
    mid_session_prefix,
    r_chunks,
    run_case,
)

KINDS = (*MODES, "binary", "binary-mid-session")
OUT = ROOT / "bench" / "out"


def make_case(rng: random.Random, kind: str) -> list[bytes]:
    if kind == "binary":
        return [AMQP_HEADER + rng.randbytes(rng.randint(0, 600))]
    if kind == "binary-mid-session":
        return [*mid_session_prefix(), rng.randbytes(rng.randint(1, 600))]
    return gen_case(rng, kind)


def signature(exc: BaseException) -> str:
    """What makes two failures the same bug: the message without numbers, and where."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = next(
        (f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "amqp10" in f.filename), ""
    )
    cause = exc.__cause__
    if cause is not None:
        ctb = traceback.extract_tb(cause.__traceback__)
        where = next(
            (
                f"{Path(f.filename).name}:{f.lineno}"
                for f in reversed(ctb)
                if "amqp10" in f.filename
            ),
            where,
        )
    text = "".join(c if not c.isdigit() else "#" for c in str(exc).split("\n")[0])[:120]
    return f"{type(exc).__name__}: {text} @ {where}"


def save(kind: str, seed: int, parts: list[bytes], chunks: list[int], exc: BaseException) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"fuzz-crash-{kind}-{seed}.bin"
    path.write_bytes(b"".join(parts))
    meta = {
        "kind": kind,
        "seed": seed,
        "parts": [len(p) for p in parts],
        "chunks": chunks,
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": "".join(traceback.format_exception(exc)),
    }
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    return path


def replay(path: Path) -> int:
    data = path.read_bytes()
    meta_path = path.with_suffix(".json")
    lengths = [len(data)]
    chunks = None
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        lengths, chunks = meta["parts"], meta["chunks"]
    parts, pos = [], 0
    for n in lengths:
        parts.append(data[pos : pos + n])
        pos += n
    initiate = meta_path.exists() and json.loads(meta_path.read_text())["kind"].startswith("client")
    status = 0
    for label, cut in (
        ("as recorded", chunks),
        ("whole", None),
        ("byte by byte", [1] * len(parts[-1])),
    ):
        try:
            report = run_case(parts, cut, initiate=initiate)
        except Exception as exc:
            status = 1
            print(f"{label}: FAILS")
            traceback.print_exception(exc)
        else:
            print(f"{label}: ok ({len(report.events)} events, failed: {report.failed})")
    return status


def fuzz(args: argparse.Namespace) -> int:
    kinds = KINDS if args.mode == "all" else (args.mode,)
    deadline = time.monotonic() + args.seconds if args.iterations is None else None
    base = args.seed if args.seed is not None else random.randrange(2**32)
    print(
        f"fuzz_engine: seed {base}, kinds {', '.join(kinds)}, "
        f"{'%d iterations' % args.iterations if args.iterations else '%g s' % args.seconds}",
        flush=True,
    )
    started = last = time.monotonic()
    failures = 0
    seen: dict[str, int] = {}
    outcomes: collections.Counter[str] = collections.Counter()
    i = 0
    while True:
        if args.iterations is not None and i >= args.iterations:
            break
        if deadline is not None and (i & 31) == 0 and time.monotonic() >= deadline:
            break
        seed = (base * 1_000_003 + i) & 0xFFFFFFFFFFFF
        kind = kinds[i % len(kinds)]
        i += 1
        rng = random.Random(seed)
        parts = make_case(rng, kind)
        chunks = r_chunks(rng, len(parts[-1]))
        try:
            report = run_case(parts, chunks, initiate=kind.startswith("client"))
        except Exception as exc:
            failures += 1
            sig = signature(exc)
            if sig not in seen:
                seen[sig] = seed
                path = save(kind, seed, parts, chunks, exc)
                print(
                    f"  FAILURE #{len(seen)}: {sig}\n    saved {path.relative_to(ROOT)}", flush=True
                )
            continue
        if report.failed is not None:
            outcomes[f"close {report.failed.condition}"] += 1
        else:
            outcomes["no connection failure"] += 1
        for ev in report.events:
            if isinstance(ev, (SessionFailed, LinkFailed)):
                outcomes[f"{type(ev).__name__} {ev.error.condition}"] += 1
            elif isinstance(ev, ConnectionFailed):
                pass
        now = time.monotonic()
        if now - last >= args.progress:
            last = now
            rate = i / (now - started)
            print(
                f"  {i} iterations, {rate:.0f}/s, {failures} failures ({len(seen)} distinct)",
                flush=True,
            )
    elapsed = time.monotonic() - started
    print(
        f"done: {i} iterations in {elapsed:.1f} s ({i / max(elapsed, 1e-9):.0f}/s), "
        f"{failures} failures, {len(seen)} distinct",
        flush=True,
    )
    if args.verbose or failures:
        for sig, seed in seen.items():
            print(f"  {sig}  (first seed {seed})")
    if args.verbose:
        for what, n in outcomes.most_common():
            print(f"  {n:8}  {what}")
    return 1 if failures else 0


def stateful(args: argparse.Namespace) -> int:
    """Run the engine-pair state machine (tests/transport/test_stateful.py) for a while."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from tests.transport.test_stateful import EnginePairMachine

    deadline = time.monotonic() + args.seconds
    rounds = 0
    while time.monotonic() < deadline:
        run_state_machine_as_test(
            EnginePairMachine,
            settings=settings(
                max_examples=100,
                stateful_step_count=100,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
        rounds += 1
        print(f"  {rounds * 100} state-machine runs, no failure", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=60.0, help="run this long (default 60)")
    ap.add_argument("--iterations", type=int, help="run this many cases instead")
    ap.add_argument("--seed", type=int, help="base seed (default: random, printed)")
    ap.add_argument("--mode", choices=("all", *KINDS), default="all")
    ap.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--replay", type=Path, help="run one saved crash input again")
    ap.add_argument(
        "--stateful", action="store_true", help="run the engine-pair state machine instead"
    )
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="print the outcome counts at the end"
    )
    args = ap.parse_args()
    os.chdir(ROOT)
    if args.replay:
        return replay(args.replay)
    if args.stateful:
        return stateful(args)
    return fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
