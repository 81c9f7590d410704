"""The parent of the broker's worker processes (``workers`` > 1; issue 31).

With ``workers = 1`` there is no parent: ``amqp10 broker`` is one process, as it always
was. With N > 1, :class:`Supervisor` is the process ``amqp10 broker`` runs:

- it binds every listening socket once (the AMQP listeners, ``[http]`` and its
  ``rabbitmq_api_port``; :func:`~amqp10.broker.service.listen_points`), before any worker
  starts, so a bad or busy address fails once, as one line, and port 0 picks one port
  for all. On Linux each worker slot gets sockets of its own on that port, bound with
  SO_REUSEPORT: the kernel hashes each new connection to one slot, which spreads
  long-lived connections evenly (on one shared socket the first worker to wake takes
  each, and asyncio accepts a burst per wake-up: 11/21 against 15/17 for 32 connections
  at once, docs/architecture.md). The parent keeps every slot's sockets open, so the
  connections queued on a dead worker's slot wait for its replacement instead of being
  reset. Elsewhere (no SO_REUSEPORT
  balancing) every slot shares one set of sockets.
- it forks N workers, numbered 0 to N-1 as :mod:`.ownership` numbers them (``fork``: a worker inherits the sockets and the validated
  configuration as they are, and starts in milliseconds); each runs a
  :class:`~amqp10.broker.service.BrokerService` over its slot's sockets with a store
  of its own (:func:`worker_config`); with ``pin_workers`` bound to one CPU
  (:func:`cpu_for`: worker i to the i-th CPU it may use, round again past the last).
- a worker that ends while the parent runs is restarted after a back-off (0.1 s,
  doubling to 10 s while it keeps dying within 10 s of its start), said in one log line.
- SIGTERM or SIGINT: every worker (each in a process group of its own, so a terminal's
  Ctrl-C reaches only the parent) is sent SIGTERM (each shuts down gracefully, as a
  one-process broker does) and waited for; one still running after
  :data:`STOP_SECONDS` is killed. The parent exits 0 when every worker did.
- the parent SIGKILLed: on Linux each worker asked the kernel for SIGTERM when its
  parent dies (``PR_SET_PDEATHSIG``), so it shuts down gracefully too.

Each worker owns the nodes its name hashes to and reaches the others' over internal
links (:mod:`.peers`): AMQP 1.0 clients on queues see one broker. The parent is also
the metadata's sequencer (:class:`~.metadata.Sequencer`, served in its ``select`` loop):
exchanges, bindings, queues, policies and users are the same on every worker, in one
order. Management, ``/metrics``, connection limits and the memory alarm count the whole
broker (:mod:`.whole`). What is not across workers yet is listed in
``docs/architecture.md`` ("Not yet at N > 1").

On the PostgreSQL store the workers share one database, each in a schema of its own
(:mod:`.shared_database`), and the parent holds the database lock of the active/standby
pair: it waits as the standby, binds and starts its workers once it holds the lock, and
stops them when it loses it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from ...io.net import bind_for_workers
from ..config import BrokerConfig
from ..service import listen_points
from . import counters
from .metadata import Sequencer
from .shared_database import metadata_log, prepare, worker_schema

if TYPE_CHECKING:
    from ..core.store_postgres import DatabaseLock

__all__ = [
    "STOP_SECONDS",
    "Supervisor",
    "WorkerRunner",
    "cpu_for",
    "pin",
    "worker_config",
]

log = logging.getLogger("amqp10.broker.workers")

STOP_SECONDS = 15.0
"""How long a stop waits for the workers' graceful shutdown before it kills them."""

RESTART_FIRST = 0.1
RESTART_MAX = 10.0
"""The back-off before a worker is restarted: RESTART_FIRST, doubling up to RESTART_MAX
while it keeps dying within RESTART_MAX seconds of its start."""

_PR_SET_PDEATHSIG = 1

Sockets: TypeAlias = Mapping[str, Sequence[socket.socket]]
"""A worker's listening sockets by :func:`~amqp10.broker.service.listen_points` name."""

WorkerRunner: TypeAlias = Callable[[int, BrokerConfig, Sockets], int]
"""What a worker process runs: ``run(index, config, sockets)`` serves until SIGTERM or
SIGINT and returns the worker's exit code."""


def worker_config(config: BrokerConfig, index: int) -> BrokerConfig:
    """Worker ``index``'s configuration: ``config`` with a store of its own. SQLite: a file
    beside the configured one (``amqp10.sqlite3`` -> ``amqp10.worker1.sqlite3`` for worker
    1); PostgreSQL: a schema of its own in the shared database (``amqp10_w1``,
    :mod:`.shared_database`)."""
    store = config.store
    if store.backend == "postgresql":
        from ..core.store_postgres import in_schema

        assert store.dsn is not None  # the config's validator says so
        update: dict[str, object] = {"dsn": in_schema(store.dsn, worker_schema(index))}
    else:
        update = {"path": store.path.with_name(f"{store.path.stem}.worker{index}{store.path.suffix}")}
    return config.model_copy(update={"store": store.model_copy(update=update)})


def cpu_for(index: int, allowed: Iterable[int]) -> int:
    """The CPU worker ``index`` is bound to (``pin_workers``): the ``index``-th of
    ``allowed`` in order, round again past the last."""
    cpus = sorted(allowed)
    return cpus[index % len(cpus)]


def pin(index: int) -> None:
    """Bind this process (worker ``index``) to its CPU; logged, and nothing done where the
    system cannot."""
    if not hasattr(os, "sched_setaffinity"):  # pragma: no cover - not Linux
        log.warning("worker %d: pin_workers is not supported here: not bound", index)
        return
    allowed = os.sched_getaffinity(0)
    cpu = cpu_for(index, allowed)
    if index >= len(allowed):
        log.warning("worker %d: more workers than the %d CPUs the broker may use: CPU %d is shared", index, len(allowed), cpu)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as e:
        log.warning("worker %d: could not bind to CPU %d: %s", index, cpu, e)
        return
    log.info("worker %d bound to CPU %d", index, cpu)


def die_with_parent(parent: int) -> bool:
    """Ask the kernel for SIGTERM when the parent dies (Linux); False if it has died already."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    return os.getppid() == parent  # it may have died before the prctl


def describe_exit(status: int) -> str:
    """A wait status as words: ``exit code 1``, ``killed by SIGKILL``."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(sig).name}"
        return f"killed by signal {sig}"  # pragma: no cover - a real-time signal
    return f"exit code {os.waitstatus_to_exitcode(status)}"


@dataclass
class _Slot:
    """One worker's place: its sockets and the process serving them (if any)."""

    index: int
    sockets: dict[str, list[socket.socket]]
    pid: int | None = None
    started: float = 0.0
    backoff: float = 0.0
    restart_at: float | None = None
    exit_code: int | None = None


class Supervisor:
    """Runs ``count`` workers of ``config`` behind one set of ports until SIGTERM/SIGINT."""

    def __init__(
        self,
        config: BrokerConfig,
        count: int,
        run_worker: WorkerRunner,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.count = count
        self.run_worker = run_worker
        self.clock = clock
        self.slots: list[_Slot] = []
        self.stopping_since: float | None = None
        self.sequencer: Sequencer | None = None
        """The metadata's one order (:mod:`.metadata`), while the workers run."""
        self.lock: DatabaseLock | None = None
        """[store] postgresql: the database lock of an active/standby pair, held while the
        workers run (:meth:`take_lock`)."""
        self.lock_lost = False
        self._wake_r = self._wake_w = -1

    def bind(self) -> None:
        """Bind every listening socket, for every slot (raises ConnectError, one line)."""
        per_slot: list[dict[str, list[socket.socket]]] = [{} for _ in range(self.count)]
        try:
            for name, host, port in listen_points(self.config):
                bound = bind_for_workers(host, port, self.count)
                for slot, socks in zip(per_slot, bound, strict=True):
                    slot[name] = socks
                first = bound[0][0].getsockname()
                log.info("listening on %s:%d for %d workers (%s)", host, first[1], self.count, name)
        except BaseException:
            for sock in {
                id(s): s for slot in per_slot for ss in slot.values() for s in ss
            }.values():
                sock.close()
            raise
        self.slots = [_Slot(i, socks) for i, socks in enumerate(per_slot)]

    def take_lock(self) -> bool:
        """[store] postgresql: wait as the standby until this broker holds the database lock,
        then make the workers' schemas; False: SIGTERM or SIGINT came first."""
        cfg = self.config.store
        if cfg.backend != "postgresql":
            return True
        from ..core.store_postgres import DatabaseLock

        assert cfg.dsn is not None  # the config's validator says so
        lock = DatabaseLock(
            cfg.dsn, retry_seconds=cfg.lock_retry_seconds, session_timeout_seconds=cfg.lock_session_timeout_seconds
        )
        previous = {sig: signal.signal(sig, _stop_waiting) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            lock.wait()
        except _StopWaiting as stopped:
            lock.release()
            log.info("received %s: stopping (the standby)", stopped)
            return False
        except BaseException:
            lock.release()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.lock = lock
        prepare(cfg.dsn, self.count)
        return True

    def run(self) -> int:
        """Start the workers and supervise them until a stop; 0 when every worker stopped
        cleanly. On PostgreSQL the workers start once this broker holds the database lock,
        and stop when it loses it (exit code 1)."""
        # the loop's one wake-up pipe: signals (set_wakeup_fd) and the database lock's loss;
        # closed once the lock is released (its keepalive's thread may write to it until then)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        try:
            return self._run() if self.take_lock() else 0
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _wake(self) -> None:
        """Wake the loop (from another thread: the database lock's keepalive found it lost)."""
        with contextlib.suppress(BlockingIOError):  # (full: the loop wakes anyway)
            os.write(self._wake_w, b"\0")  # (no signal's number: it only wakes the loop)

    def _run(self) -> int:
        if not self.slots:
            self.bind()
        # the connection counts every worker adds to (limits of the whole broker), made before any forks
        counters.create(self.config.store.path.parent / "workers", self.count)
        if self.lock is not None:  # (looked at after each wake-up: _wait)
            self.lock.on_lost = self._wake
            if self.lock.lost:  # (before it was told whom to tell)
                self._wake()
        previous = {
            sig: signal.signal(sig, _ignore)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
        }
        old_fd = signal.set_wakeup_fd(self._wake_w)
        try:
            self.sequencer = Sequencer(self.config, self.config.store.path.parent / "workers", metadata_log(self.config))
            for slot in self.slots:
                self._start(slot)
            while not self._done():
                self._reap()
                self._restart_due()
                self._wait()
            return 0 if all(s.exit_code == 0 for s in self.slots) and not self.lock_lost else 1
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._kill_all(signal.SIGKILL)
            self._close_sockets()
            if self.sequencer is not None:
                self.sequencer.close()
                self.sequencer = None

    # -- the loop --------------------------------------------------------------------------
    def _done(self) -> bool:
        return self.stopping_since is not None and all(s.pid is None for s in self.slots)

    def _wait(self) -> None:
        """Sleep until a signal (a worker ended, a stop was asked) or the next deadline."""
        now = self.clock()
        if self.stopping_since is not None:
            timeout: float | None = max(self.stopping_since + STOP_SECONDS - now, 0.0)
        else:
            due = [s.restart_at for s in self.slots if s.restart_at is not None]
            timeout = max(min(due) - now, 0.0) if due else None
        if self._done():
            return
        sequencer = self.sequencer
        fds = [self._wake_r, *(sequencer.fds() if sequencer is not None else ())]
        readable, _, _ = select.select(fds, [], [], timeout)
        for fd in readable:
            if fd != self._wake_r:
                assert sequencer is not None
                sequencer.ready(fd)
                continue
            for signum in os.read(self._wake_r, 512):
                if signum in (signal.SIGTERM, signal.SIGINT):
                    self.stop(signal.Signals(signum).name)
        if self.lock is not None and self.lock.lost and not self.lock_lost:
            self.lock_lost = True
            log.error(
                "lost the store lock on %s (%s): stopping the workers, the standby takes over",
                self.lock.location, self.lock.last_error or "the lock's session ended",
            )  # fmt: skip
            self.stop("the loss of the store lock")
        if self.stopping_since is not None and self.clock() >= self.stopping_since + STOP_SECONDS:
            alive = [s.index for s in self.slots if s.pid is not None]
            if alive:
                log.warning("workers %s still running after %gs: killing them", alive, STOP_SECONDS)
                self._kill_all(signal.SIGKILL)

    def stop(self, why: str) -> None:
        """Begin a stop: SIGTERM to every worker (each shuts down gracefully), no restarts."""
        if self.stopping_since is not None:
            return
        log.info(
            "received %s: stopping %d workers", why, sum(s.pid is not None for s in self.slots)
        )
        self.stopping_since = self.clock()
        for slot in self.slots:
            slot.restart_at = None
        self._kill_all(signal.SIGTERM)

    def _reap(self) -> None:
        """Collect the workers that ended; schedule their restarts (unless stopping)."""
        by_pid = {s.pid: s for s in self.slots if s.pid is not None}
        while by_pid:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            slot = by_pid.pop(pid, None)
            if slot is None:  # pragma: no cover - not one of ours
                continue
            slot.pid = None
            slot.exit_code = os.waitstatus_to_exitcode(status)
            if self.stopping_since is not None:
                log.info("worker %d (pid %d) stopped: %s", slot.index, pid, describe_exit(status))
                continue
            ran = self.clock() - slot.started
            slot.backoff = (
                RESTART_FIRST
                if ran >= RESTART_MAX
                else min(max(slot.backoff * 2, RESTART_FIRST), RESTART_MAX)
            )
            slot.restart_at = self.clock() + slot.backoff
            log.warning(
                "worker %d (pid %d) ended after %.1fs (%s): restarting it in %gs",
                slot.index,
                pid,
                ran,
                describe_exit(status),
                slot.backoff,
            )

    def _restart_due(self) -> None:
        now = self.clock()
        for slot in self.slots:
            if (
                slot.restart_at is not None
                and now >= slot.restart_at
                and self.stopping_since is None
            ):
                slot.restart_at = None
                self._start(slot)

    def _kill_all(self, sig: signal.Signals) -> None:
        for slot in self.slots:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, sig)

    def _close_sockets(self) -> None:
        for sock in {
            id(s): s for slot in self.slots for ss in slot.sockets.values() for s in ss
        }.values():
            sock.close()

    # -- a worker --------------------------------------------------------------------------
    def _start(self, slot: _Slot) -> None:
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's loop
            code = 1
            try:
                code = self._worker(slot, parent)
            except BaseException:
                log.exception("worker %d failed", slot.index)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        slot.pid = pid
        slot.started = self.clock()
        log.info("worker %d started (pid %d)", slot.index, pid)

    def _worker(self, slot: _Slot, parent: int) -> int:
        """In the forked worker: undo the parent's signal set-up, keep this slot's sockets
        only, then serve."""
        # a process group of its own: a terminal's Ctrl-C reaches the parent only, which
        # passes it on as one SIGTERM (a second signal during a shutdown would end it)
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self.sequencer is not None:
            self.sequencer.close_in_child()
        if self.lock is not None:
            self.lock.detach_in_child()
        if not die_with_parent(parent):
            return 0
        if self.config.pin_workers:
            pin(slot.index)
        mine = {id(s) for ss in slot.sockets.values() for s in ss}
        for other in self.slots:
            for ss in other.sockets.values():
                for sock in ss:
                    if id(sock) not in mine:
                        sock.close()
        return self.run_worker(slot.index, worker_config(self.config, slot.index), slot.sockets)


class _StopWaiting(Exception):
    """SIGTERM or SIGINT while the parent waits for the database lock (its name)."""


def _stop_waiting(signum: int, frame: object) -> None:
    raise _StopWaiting(signal.Signals(signum).name)


def _ignore(signum: int, frame: object) -> None:
    """The parent's signal handler: the wake-up fd carries the signal to the loop."""
