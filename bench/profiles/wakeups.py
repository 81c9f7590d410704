"""What the broker spends per wake-up: one consumers case of scale_bench.py, watched closely.

Runs ``one_consumers_case`` (a backlog drained by N consumers, credit 10 each) and, for
the drain only, reports per message: the broker's CPU (user and system, by thread),
its context switches, the client's (this process's) CPU, and optionally

    --strace          the system calls (``strace -c -f`` attached to the broker)
    --opcodes         Python opcodes and calls (``sys.settrace`` inside the broker: slow,
                      counts only; the top functions by opcodes are printed)
    --perf            CPU samples by library (``perf record -e cpu-clock``)
    --pin C,B         the client on CPU C and the broker on CPU B (``sched_setaffinity``)
    --idle S          first, the broker's CPU per second while the consumers sit idle

    .venv/bin/python bench/profiles/wakeups.py --consumers 1 --strace
    .venv/bin/python bench/profiles/wakeups.py --consumers 1000 --opcodes --count-tail
    .venv/bin/python bench/profiles/wakeups.py --consumers 1 --pin 0,1 --count-tail
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import scale_bench as sb  # noqa: E402

# Run inside the broker with --opcodes: counts opcodes per function between SIGUSR1 and
# SIGUSR2, then writes them as JSON to argv[1].
_COUNTER = """
import collections, json, signal, sys
from amqp10.cli import main
counts = collections.Counter()
def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    frame.f_trace_lines = False
    code = frame.f_code
    key = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}:{code.co_name}"
    counts["calls " + key] += 1
    def local(frame, event, arg):
        if event == "opcode":
            counts[key] += 1
        return local
    return local
def stop(*_):
    sys.settrace(None)
    with open(sys.argv[1], "w") as f:
        json.dump(counts, f)
signal.signal(signal.SIGUSR1, lambda *_: sys.settrace(tracer))
signal.signal(signal.SIGUSR2, stop)
main(sys.argv[2:])
"""


def snapshot(pid: int) -> dict[str, int]:
    """Context switches and each thread's user/system CPU (ms) of ``pid``."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if "ctxt_switches" in line:
                key, value = line.split(":")
                out[key] = int(value)
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[f"thread {tid} user ms"] = int(fields[11]) * 1000 // tick
        out[f"thread {tid} system ms"] = int(fields[12]) * 1000 // tick
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--backlog", type=int, default=30_000)
    ap.add_argument("--credit", type=int, default=10)
    ap.add_argument("--count-tail", action="store_true", help="as scale_bench.py's")
    ap.add_argument("--broker-path", default=None, help="PYTHONPATH for the broker (another checkout)")
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--opcodes", action="store_true")
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--pin", default=None, help="CLIENT,BROKER: the CPUs to pin them to")
    ap.add_argument("--idle", type=float, default=0.0, help="seconds of idle CPU measured first")
    args = ap.parse_args()
    args.case_timeout = 300.0
    out_dir = tempfile.mkdtemp(prefix="amqp10-wakeups-")
    counts_file = os.path.join(out_dir, "opcodes.json")
    if args.opcodes:
        runner = os.path.join(out_dir, "counter.py")
        Path(runner).write_text(_COUNTER)

        class Counted(sb.BrokerProcess):
            def __init__(self, argv: list[str], **kw: Any) -> None:
                i = argv.index("-m")  # python -m amqp10.cli ARGS -> python counter.py FILE ARGS
                super().__init__([argv[0], runner, counts_file, *argv[i + 2 :]], **kw)

        sb.BrokerProcess = Counted  # type: ignore[misc]
    if args.pin:
        client_cpu, broker_cpu = (int(x) for x in args.pin.split(","))
        os.sched_setaffinity(0, {client_cpu})
    broker = sb.Broker(args.broker_path)
    pid = broker.proc.pid
    if args.pin:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {broker_cpu})
    cpu = broker.cpu
    watchers: list[subprocess.Popen[bytes]] = []
    before: dict[str, int] = {}
    n = args.backlog

    def watched_cpu() -> float:
        """scale_bench reads the CPU twice: before the drain (start watching) and after it."""
        if not before:
            if args.idle:
                c0 = cpu()
                time.sleep(args.idle)
                print(f"idle: {(cpu() - c0) / args.idle * 1e3:.2f} ms of broker CPU a second")
            if args.strace:
                log = os.path.join(out_dir, "strace.txt")
                watchers.append(subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", log]))
            if args.perf:
                data = os.path.join(out_dir, "perf.data")
                cmd = ["perf", "record", "-e", "cpu-clock", "-F", "4000", "-p", str(pid), "-o", data]
                watchers.append(subprocess.Popen(cmd, stderr=subprocess.DEVNULL))
            if args.opcodes:
                os.kill(pid, signal.SIGUSR1)
            time.sleep(1.0 if watchers else 0.2)  # attached before the first flow
            before.update(snapshot(pid))
            before["client"] = time.process_time_ns() // 1000
            return cpu()
        value = cpu()
        print(f"client CPU: {(time.process_time_ns() // 1000 - before['client']) / n:.1f} us per message")
        after = snapshot(pid)
        for key, v in after.items():
            if key in before and v != before[key]:
                print(f"{key}: {(v - before[key]) / n:.4f} per message ({v - before[key]} in all)")
        for w in watchers:
            w.send_signal(signal.SIGINT)
            w.wait()
        if args.opcodes:
            time.sleep(2.0)  # the counter's broker is slow: let it finish what it read
            os.kill(pid, signal.SIGUSR2)
            time.sleep(1.0)
        return value

    broker.cpu = watched_cpu  # type: ignore[method-assign]
    try:
        case = sb.one_consumers_case(broker, args.consumers, args)
    finally:
        broker.stop()
    print(case.figures)
    if args.strace:
        print(Path(out_dir, "strace.txt").read_text())
    if args.perf:
        report = subprocess.run(
            ["perf", "report", "-i", os.path.join(out_dir, "perf.data"), "--sort", "dso", "--stdio"],
            capture_output=True,
            text=True,
        ).stdout
        print("\n".join(line for line in report.splitlines() if "%" in line and not line.startswith("#")))
    if args.opcodes:
        counts = collections.Counter(json.loads(Path(counts_file).read_text()))
        opcodes = {k: v for k, v in counts.items() if not k.startswith("calls ")}
        print(f"opcodes per message: {sum(opcodes.values()) / n:.0f}")
        for key, v in sorted(opcodes.items(), key=lambda kv: -kv[1])[:30]:
            print(f"{v / n:8.1f} per message {counts['calls ' + key]:>8} calls  {key}")
    print(f"(files in {out_dir})")


if __name__ == "__main__":
    main()
