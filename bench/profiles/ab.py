"""A/B: two copies of the amqp10 package as the broker, same clients, interleaved rounds.

    git archive HEAD | tar -x -C /tmp/ab/base       # snapshot before a change
    .venv/bin/python bench/profiles/ab.py --a /tmp/ab/base --b . --rounds 5 --count 30000
    .venv/bin/python bench/profiles/ab.py --a /work/wt/perf-old --b . --rounds 15 \\
        --workloads ours,durable,proton-c --json /tmp/ab.json

Each round runs every workload against a broker started from ``--a`` and one
started from ``--b`` (the directories holding the ``amqp10`` package, put first
on PYTHONPATH), alternating which goes first. The clients are the same for
both (this tree's workers, or Proton C), so only the broker differs.
Workloads: ``ours`` (our client pair), ``durable`` (our pair, durable
messages, stored), ``proton-c`` (Proton C clients). Reported per workload:
median msg/s and median broker CPU µs per message (user + system from
/proc) for each, the ratio of the medians b/a, the median of the per-round
ratios and their range. On a shared machine CPU per message is the steadier.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from amqp10.cli.bench.harness import BROKER_CONFIG, BenchConfig, BrokerProcess, run_bench  # noqa: E402

WORKLOADS = ("ours", "durable", "proton-c")


def one(pkg_dir: Path, cfg: BenchConfig, factory) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    tmp = Path(tempfile.mkdtemp(prefix="amqp10-ab-"))
    try:
        conf = tmp / "b.toml"
        conf.write_text(BROKER_CONFIG)
        env = {**os.environ, "PYTHONPATH": str(pkg_dir.resolve())}
        argv = [
            sys.executable,
            "-m",
            "amqp10.cli",
            "broker",
            "--port",
            "0",
            "--data-dir",
            str(tmp),
            "--config",
            str(conf),
        ]
        b = BrokerProcess(argv, name=f"broker {pkg_dir}", env=env, cwd=str(tmp))
        try:
            port = b.wait_listening(20)
            c = BenchConfig(**{**cfg.__dict__, "url": f"amqp://127.0.0.1:{port}"})
            r = run_bench(c, worker=factory, broker=b)
        finally:
            b.stop()
        return r.throughput, (r.broker_cpu_s or 0) / r.received * 1e6
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--count", type=int, default=30_000)
    p.add_argument("--durable-count", type=int, default=0, help="count for 'durable' (default --count)")
    p.add_argument("--client", choices=["ours", "proton-c"], default="proton-c",
                   help="the one workload when --workloads is not given")
    p.add_argument("--workloads", default="", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--settle", default="at-least-once")
    p.add_argument("--json", help="write every round's figures here")
    args = p.parse_args()
    import compare

    workloads = [w for w in (args.workloads or args.client).split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}; one of {', '.join(WORKLOADS)}")
    why = compare.build_c() if "proton-c" in workloads else None
    if why:
        print(why)
        return 1
    base = BenchConfig(count=args.count, timeout=300, settle=args.settle)
    setups = {
        "ours": (base, compare.our_worker),
        "durable": (
            BenchConfig(**{**base.__dict__, "durable": True, "count": args.durable_count or args.count}),
            compare.our_worker,
        ),
        "proton-c": (base, compare.proton_c_worker),
    }
    res: dict[str, dict[str, list[tuple[float, float]]]] = {w: {"a": [], "b": []} for w in workloads}
    loads: list[float] = []
    for i in range(args.rounds):
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        loads.append(os.getloadavg()[0])
        for w in workloads:
            cfg, factory = setups[w]
            for k in order:
                res[w][k].append(one(Path(getattr(args, k)), cfg, factory))
            (ra, ca), (rb, cb) = res[w]["a"][-1], res[w]["b"][-1]
            print(
                f"round {i + 1:2} {w:8} first {order[0]} load {loads[-1]:4.1f}: "
                f"a {ra:8,.0f} msg/s {ca:6.2f} us/msg | b {rb:8,.0f} msg/s {cb:6.2f} us/msg | "
                f"b/a cpu {cb / ca:.3f}",
                flush=True,
            )
    summary = {}
    for w in workloads:
        a, b = res[w]["a"], res[w]["b"]
        ma = (statistics.median(r for r, _ in a), statistics.median(c for _, c in a))
        mb = (statistics.median(r for r, _ in b), statistics.median(c for _, c in b))
        paired = sorted(cb / ca for (_, ca), (_, cb) in zip(a, b, strict=True))
        wins = sum(1 for x in paired if x < 1)
        print(
            f"{w:8}: a {ma[0]:8,.0f} msg/s {ma[1]:6.2f} us/msg | b {mb[0]:8,.0f} msg/s {mb[1]:6.2f} us/msg"
            f" | b/a msg/s {mb[0] / ma[0]:.2f}x cpu/msg {mb[1] / ma[1]:.3f}x,"
            f" paired median {statistics.median(paired):.3f} (range {paired[0]:.3f} to {paired[-1]:.3f};"
            f" b cheaper in {wins} of {len(paired)})"
        )
        summary[w] = {"a": a, "b": b, "cpu_ratio_of_medians": mb[1] / ma[1],
                      "paired_median": statistics.median(paired), "paired": paired}
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"a": args.a, "b": args.b, "count": args.count, "rounds": args.rounds,
             "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loads": loads,
             "workloads": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
