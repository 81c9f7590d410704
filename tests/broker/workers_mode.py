"""The test suite at ``workers = N`` (``AMQP10_TEST_WORKERS=2 pytest tests/broker interop``).

At N > 1 the shared broker fixtures of ``tests/broker/conftest.py`` (``start_broker``,
so ``broker_with``, ``running_broker`` and every ``broker`` fixture built on them) start
a real ``amqp10 broker --workers N`` on 127.0.0.1 with the test's configuration (written
to a config file), instead of a broker in a thread of the test process. Each client
connection lands on whichever worker the kernel's hash gives it, so two clients of one
test are on different workers about half the time: what passes only because both were
on the same worker fails here, which is what this run is for.

The interop tests start our broker as ``interop/peers/ours.py``'s ``OurBroker`` (a
subprocess of ``amqp10 broker --config``), which at N > 1 adds ``--workers N``; the rule
below counts it among what starts a broker, and follows the ``interop`` modules' code as
it follows the test modules' (a matrix cell's pairing is its parameter: its peer says
whether our broker serves it).

A test that reaches into the in-process broker (its ``.service``, ``.broker`` or
``.portal``, ``held_commits``, ``broker_in_loop``, the in-memory harness) cannot run
that way. Such tests get the ``in_process`` marker from a rule applied at collection
(:func:`needs_in_process`: what the test's code, its fixtures' code and the helpers of
its own modules that it calls refer to), never by hand; at N > 1 they are deselected,
as are the tests that start no broker through the shared fixtures (nothing in them
differs at N > 1), and the run says how many of each, and why.

The features not yet built across workers (issue 31; other pieces of work are building
them) are in :data:`NOT_YET`: tests whose id names one are deselected too unless
``AMQP10_TEST_WORKERS_ALL=1``, so ``make test-workers2`` runs only what is known to pass.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.config import BrokerConfig, load_config
from tests.broker.conftest import RunningBroker
from tests.broker.test_workers import Parent, wait_until_gone

WORKERS_ENV = "AMQP10_TEST_WORKERS"
"""How many worker processes the shared broker fixtures start (unset or 1: the broker in
a thread of the test process, as always)."""

ALL_ENV = "AMQP10_TEST_WORKERS_ALL"
"""``1``: at N > 1, run the tests of :data:`NOT_YET` too (to see what they do)."""

NOT_YET: dict[str, str] = {
    # feature not yet across workers (issue 31) -> a pattern on the test's id
    # (sbs31 built the last: Service Bus session receivers on another worker's queue)
}
"""What is not yet across workers, and the tests of it (by the words of their id and code),
deselected at N > 1."""

KNOWN_TO_FAIL: dict[str, str] = {
    # bugs found at workers = 2 and not fixed yet (docs/architecture.md, "The suites at workers = 2")
}
"""Tests that fail at N > 1 for a bug of their own (not a feature of :data:`NOT_YET`), by id."""

IN_PROCESS_ATTRIBUTES = frozenset({"service", "broker", "portal"})
"""A ``RunningBroker``'s in-process objects: a test that reads one needs the broker in its process."""

IN_PROCESS_HELPERS = frozenset({"held_commits", "broker_in_loop"})
"""Helpers of ``tests/broker/conftest.py`` that work on the in-process broker."""

IN_PROCESS_FIXTURES = frozenset({"caplog"})
"""Fixtures that see only this process: a test that starts a broker and reads its log."""

STARTS_A_BROKER = frozenset({"start_broker", "broker_with", "running_broker", "OurBroker"})
"""What starts a broker through the shared fixtures (so at ``workers = N`` when asked): those
of ``tests/broker/conftest.py``, and interop's peer ``OurBroker`` (``interop/peers/ours.py``)."""

FOLLOWED = ("tests.", "interop.")
"""The modules whose functions and classes :func:`referred` follows."""

SHARED = "tests.broker.conftest"
HARNESS = "tests.broker.harness"


def worker_count() -> int:
    """The N of this run (``AMQP10_TEST_WORKERS``; 1 when unset)."""
    return int(os.environ.get(WORKERS_ENV) or 1)


# --- what a test refers to --------------------------------------------------------


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _functions_of(obj: Any) -> list[Any]:
    """The functions whose code ``obj`` runs: itself, a class's methods, or a dataclass
    instance's fields' (a test's parameter such as interop's ``Pairing``, whose ``peer``
    starts the broker)."""
    if dataclasses.is_dataclass(obj) and not inspect.isclass(obj):
        return [f for v in vars(obj).values() for f in _functions_of(v)]
    if inspect.isclass(obj):
        return [f for v in vars(obj).values() for f in (v, getattr(v, "fget", None)) if inspect.isfunction(f)]
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return [obj] if inspect.isfunction(obj) else []


def _own(module: types.ModuleType, name: str) -> list[Any]:
    """The functions of ``module``'s own function or class ``name`` (none if it has none)."""
    target = getattr(module, name, None)
    return _functions_of(target) if getattr(target, "__module__", None) == module.__name__ else []


def referred(roots: list[Any]) -> tuple[set[str], set[str]]:
    """What the code of ``roots`` refers to, following the functions and classes of the
    test modules it calls (not those of the shared conftest, whose names are what is
    looked for): the names (attributes and globals), and its words (those names, its
    string constants and its keywords' names)."""
    names: set[str] = set()
    words: set[str] = set()
    seen: set[int] = set()
    todo = [f for r in roots for f in _functions_of(r)]
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for code in _codes(fn.__code__):
            for const in code.co_consts:
                words.update(c for c in (const if isinstance(const, tuple) else (const,)) if isinstance(c, str))
            for name in (*code.co_names, *code.co_freevars):
                names.add(name)
                target = fn.__globals__.get(name)
                if inspect.ismodule(target) and target.__name__.startswith(FOLLOWED):
                    # ``module.function(...)``: the module's own functions and classes it names
                    todo.extend(f for a in code.co_names for f in _own(target, a))
                module = getattr(target, "__module__", "") or ""
                if module == HARNESS:
                    names.add(HARNESS)
                elif module.startswith(FOLLOWED) and module != SHARED:
                    todo.extend(_functions_of(target))
    return names, words | names


def _roots(item: pytest.Item) -> tuple[list[Any], set[str]]:
    """The test function, its parameters and its fixtures' functions; the fixtures' names."""
    info = getattr(item, "_fixtureinfo", None)
    callspec = getattr(item, "callspec", None)
    roots: list[Any] = [getattr(item, "obj", None), *(callspec.params.values() if callspec else ())]
    fixtures: set[str] = set()
    if info is not None:
        for name, defs in info.name2fixturedefs.items():
            fixtures.add(name)
            roots.extend(d.func for d in defs)
    return roots, fixtures


def needs_in_process(names: set[str]) -> bool:
    """Whether code that refers to ``names`` needs the broker in the test's process."""
    return bool(names & (IN_PROCESS_ATTRIBUTES | IN_PROCESS_HELPERS)) or HARNESS in names


def classify(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """Mark the tests that need the in-process broker ``in_process``; those, and those
    that start no broker through the shared fixtures."""
    in_process: list[pytest.Item] = []
    no_broker: list[pytest.Item] = []
    for item in items:
        roots, fixtures = _roots(item)
        names, words = referred(roots)
        item.stash[WORDS] = words
        starts = bool((names | fixtures) & STARTS_A_BROKER)
        if needs_in_process(names) or (starts and fixtures & IN_PROCESS_FIXTURES):
            item.add_marker(pytest.mark.in_process)
            in_process.append(item)
        elif not starts:
            no_broker.append(item)
    return in_process, no_broker


WORDS = pytest.StashKey[set[str]]()
"""An item's words (:func:`referred`), kept by :func:`classify`."""


def not_yet(item: pytest.Item) -> str | None:
    """The feature of :data:`NOT_YET` that ``item``'s id or words name, or None."""
    text = " ".join([item.nodeid, *sorted(item.stash.get(WORDS, set()))]).lower()
    return next((feature for feature, pattern in NOT_YET.items() if re.search(pattern, text)), None)


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The collection hook: mark ``in_process``; at N > 1 deselect what cannot or need not
    run there, and keep the line that says so for the end of the run."""
    in_process, no_broker = classify(items)
    n = worker_count()
    if n == 1:
        return
    dropped = {id(i) for i in (*in_process, *no_broker)}
    features: dict[str, int] = {}
    if os.environ.get(ALL_ENV) != "1":
        for item in items:
            feature = not_yet(item) if id(item) not in dropped else None
            if feature is None and id(item) not in dropped and item.nodeid in KNOWN_TO_FAIL:
                feature = "a known bug (KNOWN_TO_FAIL)"
            if feature is not None:
                features[feature] = features.get(feature, 0) + 1
                dropped.add(id(item))
    kept = [i for i in items if id(i) not in dropped]
    config.hook.pytest_deselected(items=[i for i in items if id(i) in dropped])
    items[:] = kept
    lines = [
        f"workers = {n}: {len(kept)} tests run against `amqp10 broker --workers {n}`; deselected "
        f"{len(in_process)} that need the in-process broker (marker in_process: .service, .broker, "
        f"held_commits, broker_in_loop, the harness, its log) and {len(no_broker)} that start no broker "
        "through tests/broker/conftest.py or interop's OurBroker (nothing in them differs)",
        *(f"  deselected {count}: {feature}, not yet at workers = {n} ({ALL_ENV}=1 runs them)"
          for feature, count in features.items()),
    ]  # fmt: skip
    config.stash[SUMMARY] = lines


SUMMARY = pytest.StashKey[list[str]]()


def summary(config: pytest.Config) -> list[str]:
    """The lines :func:`select` kept for the end of the run (none at N = 1)."""
    return config.stash.get(SUMMARY, [])


# --- the broker processes ------------------------------------------------------------


def toml_value(value: Any) -> str:
    """``value`` (JSON's types) as a TOML value: tables inline, strings as JSON writes them
    (its escapes are TOML's)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def write_config(config: BrokerConfig, path: Path) -> Path:
    """``config`` as the TOML file ``amqp10 broker --config`` reads (checked: it reads back equal)."""
    data = config.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    path.write_text("".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items()))
    assert load_config(path) == config, "the config did not survive its TOML"
    return path


class BrokerProcesses(RunningBroker):
    """What ``start_broker`` yields at N > 1: the port and url of the one broker, no objects."""

    def __init__(self, parent: Parent, workers: int) -> None:
        self.parent = parent
        self.workers = workers

    @property
    def port(self) -> int:
        return self.parent.port

    @property
    def http_port(self) -> int:
        return int(self.parent.wait_for(r"listening on 127\.0\.0\.1:(\d+) for \d+ workers \(http\)")[1])

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"{name}: the broker runs as {self.workers} processes here ({WORKERS_ENV}); a test "
            "that uses the in-process broker's objects needs the in_process marker, which "
            "tests/broker/workers_mode.py's rule did not give this one"
        )


def start_processes(config: BrokerConfig, workers: int) -> Iterator[RunningBroker]:
    """``amqp10 broker --workers N`` with ``config``, once every worker listens; stopped after."""
    with tempfile.TemporaryDirectory(prefix="amqp10-workers-") as tmp:
        parent = Parent.of_config(write_config(config, Path(tmp) / "broker.toml"), workers)
        try:
            parent.wait_listening()
            yield BrokerProcesses(parent, workers)
        finally:
            pids = list(parent.worker_pids().values())
            parent.stop()
            wait_until_gone(pids)
