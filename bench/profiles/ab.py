"""A/B: two copies of the amqp10 package as the broker, same clients, interleaved rounds.

    cp -r amqp10 /tmp/ab/base/              # snapshot before a change
    .venv/bin/python bench/profiles/ab.py --a /tmp/ab/base --b . --rounds 5 --count 30000

Each round runs the same workload against a broker started from ``--a`` and
one started from ``--b`` (the directories holding the ``amqp10`` package,
put first on PYTHONPATH), alternating which goes first. Reported: median
msg/s and median broker CPU µs per message for each, and the ratios b/a. On
a shared machine CPU per message is the steadier of the two.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from amqp10.cli.bench.harness import BROKER_CONFIG, BenchConfig, BrokerProcess, run_bench  # noqa: E402


def one(pkg_dir: Path, cfg: BenchConfig, factory, settle: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
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
            c = BenchConfig(**{**cfg.__dict__, "url": f"amqp://127.0.0.1:{port}", "settle": settle})
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
    p.add_argument("--client", choices=["ours", "proton-c"], default="proton-c")
    p.add_argument("--settle", default="at-least-once")
    args = p.parse_args()
    import compare

    factory = compare.proton_c_worker if args.client == "proton-c" else compare.our_worker
    if args.client == "proton-c" and compare.build_c():
        print(compare.build_c())
        return 1
    cfg = BenchConfig(count=args.count, timeout=300)
    res: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    for i in range(args.rounds):
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        for k in order:
            res[k].append(one(Path(getattr(args, k)), cfg, factory, args.settle))
            rate, cpu = res[k][-1]
            print(f"round {i + 1} {k}: {rate:8,.0f} msg/s  {cpu:6.1f} us/msg", flush=True)
    med = {
        k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
        for k, v in res.items()
    }
    for k in "ab":
        print(f"{k}: median {med[k][0]:8,.0f} msg/s  {med[k][1]:6.1f} broker us/msg")
    print(
        f"b/a: throughput {med['b'][0] / med['a'][0]:.2f}x  cpu/msg {med['b'][1] / med['a'][1]:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
