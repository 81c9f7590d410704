"""Profile our broker under a bench load: cProfile inside the broker process.

    .venv/bin/python bench/profiles/profile_broker.py --client proton-c --count 50000 --out bench/profiles/after.txt

Starts ``amqp10 broker`` under cProfile (``--profiler py-spy`` samples it
with py-spy instead, if installed), runs one bench workload against it
(``--client ours|proton-c|proton-py``), stops the broker with SIGTERM (a clean
shutdown, so the profile is written) and prints the top entries by own time
and by cumulative time.
"""

from __future__ import annotations

import argparse
import io
import pstats
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from amqp10.cli.bench.command import format_result  # noqa: E402
from amqp10.cli.bench.harness import (  # noqa: E402
    BROKER_CONFIG,
    BenchConfig,
    BrokerProcess,
    run_bench,
)

_RUNNER = """
import cProfile, sys
from amqp10.cli import main
prof = cProfile.Profile()
prof.enable()
try:
    main(sys.argv[2:])
finally:
    prof.disable()
    prof.dump_stats(sys.argv[1])
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--client",
        choices=["ours", "proton-c", "proton-py", "pika", "rabbitmq-c"],
        default="proton-c",
        help="pika and rabbitmq-c speak AMQP 0-9-1 (bench/amqp091_bench.py's workers)",
    )
    p.add_argument("--count", type=int, default=50_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--settle", default="at-least-once")
    p.add_argument("--durable", action="store_true", help="durable messages (stored)")
    p.add_argument("--credit", type=int, default=1000, help="the consumer's credit window")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--profiler", choices=["cprofile", "py-spy"], default="cprofile")
    p.add_argument("--out", help="also write the report here")
    p.add_argument("--stats", help="cProfile: also keep the raw pstats file here (for diffing)")
    p.add_argument(
        "--tree",
        help="run the broker from this directory's amqp10 (e.g. a snapshot from before a change)",
    )
    args = p.parse_args(argv)

    import compare  # bench/compare.py: the client factories

    if args.client == "proton-c":
        why = compare.build_c()
        if why:
            print(why, file=sys.stderr)
            return 1
    import amqp091_bench  # its 0-9-1 workers

    if args.client == "rabbitmq-c":
        why = amqp091_bench.build_c()
        if why:
            print(why, file=sys.stderr)
            return 1
    factory = {
        "ours": compare.our_worker,
        "proton-c": compare.proton_c_worker,
        "proton-py": compare.proton_python_worker,
        "pika": amqp091_bench.pika_worker,
        "rabbitmq-c": amqp091_bench.c_worker_for(1, False),
    }[args.client]
    tmp = Path(tempfile.mkdtemp(prefix="amqp10-profile-"))
    stats_path = tmp / "broker.prof"
    conf = tmp / "broker.toml"
    conf.write_text(BROKER_CONFIG)
    broker_args = ["broker", "--port", "0", "--data-dir", str(tmp), "--config", str(conf)]
    spy = None
    try:
        if args.profiler == "cprofile":
            argv_b = [sys.executable, "-c", _RUNNER, str(stats_path), *broker_args]
        else:
            argv_b = [sys.executable, "-m", "amqp10.cli", *broker_args]
        env = None
        if args.tree:
            import os

            env = {**os.environ, "PYTHONPATH": str(Path(args.tree).resolve())}
        broker = BrokerProcess(argv_b, name="amqp10 broker (profiled)", cwd=str(tmp), env=env)
        port = broker.wait_listening(20)
        if args.profiler == "py-spy":
            exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            spy = subprocess.Popen(
                [
                    exe,
                    "record",
                    "-p",
                    str(broker.pid),
                    "-f",
                    "raw",
                    "-o",
                    str(tmp / "spy.txt"),
                    "-r",
                    "200",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        cfg = BenchConfig(
            count=args.count,
            size=args.size,
            settle=args.settle,
            durable=args.durable,
            credit=args.credit,
            url=f"amqp://127.0.0.1:{port}",
            timeout=max(120, args.count / 200),
        )
        result = run_bench(
            cfg, worker=factory, broker=broker, broker_name="amqp10 broker (profiled)"
        )
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
        broker.stop(timeout=30)
        out = io.StringIO()
        out.write(format_result(result) + "\n\n")
        if args.profiler == "cprofile":
            if args.stats:
                shutil.copyfile(stats_path, args.stats)
            st = pstats.Stats(str(stats_path), stream=out)
            st.strip_dirs().sort_stats("tottime").print_stats(args.top)
            st.sort_stats("cumulative").print_stats(args.top)
        else:
            own: dict[str, int] = {}
            incl: dict[str, int] = {}
            total = 0
            for line in (tmp / "spy.txt").read_text().splitlines():
                stack, _, n = line.rpartition(" ")
                frames = stack.split(";")
                if any("(threading.py" in f for f in frames[:2]):
                    continue  # worker threads (the store's), not the event loop
                total += int(n)
                own[frames[-1]] = own.get(frames[-1], 0) + int(n)
                for fr in set(frames):
                    incl[fr] = incl.get(fr, 0) + int(n)
            out.write(f"py-spy samples of the event-loop thread: {total} (own time)\n")
            for leaf, n in sorted(own.items(), key=lambda kv: -kv[1])[: args.top]:
                out.write(f"{n / total * 100:6.2f}%  {leaf}\n")
            out.write("\ninclusive time\n")
            for fr, n in sorted(incl.items(), key=lambda kv: -kv[1])[: args.top]:
                out.write(f"{n / total * 100:6.2f}%  {fr}\n")
        text = out.getvalue()
        print(text)
        if args.out:
            Path(args.out).write_text(text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
