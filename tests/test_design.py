"""The design's rules, read from the import graph (issue 30): no import circles, a broker
core and management that reach no protocol, front ends that do not know each other, no
private names taken across modules; and from the source: no borrowed ``self`` functions,
the wake-up guard in the driver only.

The graph counts runtime imports only, lazy ones inside functions included (see
:mod:`tests.import_graph`); ``python -m tests.import_graph`` prints what these tests check.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import amqp10
from tests.import_graph import (
    NEUTRAL,
    Graph,
    build_graph,
    circles,
    private_names,
    reach,
    shortest_circle,
    under,
)

ROOT = Path(amqp10.__file__).parent

DECLARED_CIRCLES: dict[frozenset[str], str] = {}
"""Import circles the design accepts, each with why. None today: the codec's one circle
(``types.composite`` builds each class with ``types._codegen``, whose generated code is
typed against ``Composite``) is a type-only one, under ``if TYPE_CHECKING:``, so it never
runs. A circle declared here must still exist (a test says so), so the list stays true."""

BELOW_THE_BROKER = (
    "amqp10.types",
    "amqp10.message",
    "amqp10.addresses",
    "amqp10.collector",
    "amqp10.errors",
    "amqp10.field_types",
    "amqp10.management",
    "amqp10._mypyc",
)
"""The codec, the message model and the protocol-neutral helpers the broker builds on
(``amqp10.field_types``: 0-9-1's field types, which the core gives stored arguments back in;
``amqp10._mypyc``: what the compiled build's classes need from mypyc, a no-op when pure)."""
CORE = ("amqp10.broker.core",)

MAY_REACH: dict[str, tuple[str, ...]] = {
    "the broker core": (*CORE, *BELOW_THE_BROKER),
    "management": (*NEUTRAL["management"], *CORE, *BELOW_THE_BROKER),
    "the configuration": (*NEUTRAL["the configuration"], *CORE, *BELOW_THE_BROKER),
}
"""All that each protocol-neutral part of the broker (``NEUTRAL``: its modules) may reach
through runtime imports, itself included. Not a front end (``broker.amqp1``, ``broker.amqp091``), not
``broker.service``, the HTTP side (``broker.http``, ``broker.console``,
``broker.metrics``), nor an engine (``amqp10.transport``, ``amqp10.amqp091``,
``amqp10.sasl``, ``amqp10.io``, ``amqp10.client``). The core and management read the
configuration (``Broker.config``) but only type hints name it: it is the layer above."""

FRONT_ENDS = ("amqp10.broker.amqp1", "amqp10.broker.amqp091", "amqp10.broker.amqp010")
"""The broker's protocol front ends: none may reach another (add ``amqp10.broker.amqp010``
when it comes)."""


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(ROOT)


def test_no_import_circle_but_the_declared_ones(graph: Graph) -> None:
    found = {frozenset(c): c for c in circles(graph)}
    unexpected = [
        f"{len(c)} modules: {' -> '.join(shortest_circle(graph, c))}\n    all: {', '.join(c)}"
        for key, c in found.items()
        if key not in DECLARED_CIRCLES
    ]
    assert not unexpected, "import circles:\n" + "\n".join(unexpected)
    gone = [sorted(key) for key in DECLARED_CIRCLES if key not in found]
    assert not gone, f"declared circles that no longer exist (take them out of DECLARED_CIRCLES): {gone}"


@pytest.mark.parametrize("part", MAY_REACH)
def test_the_protocol_neutral_parts_reach_no_protocol(graph: Graph, part: str) -> None:
    allowed = MAY_REACH[part]
    chains = reach(graph, NEUTRAL[part])
    assert len(chains) >= 5, f"{part} has gone missing from the graph"
    outside = sorted(m for m in chains if not under(m, allowed))
    assert not outside, f"{part} reaches:\n" + "\n".join(f"  {m}: {' -> '.join(chains[m])}" for m in outside)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_front_ends_do_not_reach_each_other(graph: Graph, front_end: str) -> None:
    others = [f for f in FRONT_ENDS if f != front_end]
    chains = reach(graph, [front_end])
    assert len(chains) >= 3, f"{front_end} has gone missing from the graph"
    bad = sorted(m for m in chains if under(m, others))
    assert not bad, f"{front_end} reaches:\n" + "\n".join(f"  {m}: {' -> '.join(chains[m])}" for m in bad)


def test_no_private_name_is_taken_across_modules(graph: Graph) -> None:
    found = private_names(graph)
    assert not found, f"{len(found)} private names taken from another module:\n" + "\n".join(found)


def test_no_function_borrows_self_to_be_bound_as_another_class_method() -> None:
    # a module-level ``def f(self: Handler, ...)`` assigned as ``Handler.f = f`` splits one
    # class across modules by line count; concerns split into objects of their own
    bad = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}"
        for path in sorted(ROOT.rglob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.args.args and node.args.args[0].arg == "self"
    ]
    assert not bad, "module-level functions taking self:\n" + "\n".join(bad)


def test_no_handler_keeps_its_own_wake_up_guard() -> None:
    # a front end calls its wake unconditionally: the driver makes a wake inside its own
    # on_events call free (what it does is tested in tests/io/test_direct.py,
    # test_flush_soon_inside_the_handler_flushes_once_after_it), so no handler keeps an
    # "inside handle()" flag of its own
    broker = ROOT / "broker"
    bad = sorted(str(p.relative_to(ROOT)) for p in broker.rglob("*.py") if "_handling" in p.read_text())
    assert not bad, f"handling flags outside the driver: {bad}"


REGISTRIES = {"WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "count", "defaultdict"}
"""Calls that make state which grows as a broker runs: never at module level in the broker."""


def test_the_broker_keeps_no_process_wide_registry() -> None:
    # what connections share lives in their Broker (Broker.shared, Broker.replies,
    # Broker.next_consumer_id), so two brokers in one process (the tests run many) share nothing
    bad = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call):
                func = value.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in REGISTRIES:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}()")
    assert not bad, "process-wide registries:\n" + "\n".join(bad)


def test_the_spark_connector_is_a_client_of_the_broker_not_a_part(graph: Graph) -> None:
    # it reaches the broker over AMQP only; names both sides share live below (amqp10.addresses)
    chains = reach(graph, ["amqp10.spark"])
    assert len(chains) >= 5
    bad = sorted(m for m in chains if under(m, ["amqp10.broker"]))
    assert not bad, "\n".join(" -> ".join(chains[m]) for m in bad)


def test_the_shared_protocol_modules_reach_neither_end(graph: Graph) -> None:
    # the messages client and broker both speak (amqp10.cbs, amqp10.management) are below both
    for shared in ("amqp10.cbs", "amqp10.management"):
        chains = reach(graph, [shared])
        assert len(chains) >= 3, f"{shared} has gone missing from the graph"
        bad = sorted(m for m in chains if under(m, ["amqp10.broker", "amqp10.client"]))
        assert not bad, "\n".join(" -> ".join(chains[m]) for m in bad)


# -- the graph builder itself --------------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Graph:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return build_graph(root)


def test_the_builder_resolves_relative_lazy_and_submodule_imports(tmp_path: Path) -> None:
    g = _package(
        tmp_path,
        {
            "sub/__init__.py": "from .a import A\n",
            "sub/a.py": "from .. import b\nA = 1\n",
            "sub/c.py": "def f():\n    from ..sub import a\n    return a\n",
            "b.py": "import pkg.sub.a\nfrom pkg.sub.a import A as _A, _hidden\nx = pkg.sub.a._y\n",
        },
    )
    assert g.edges("pkg.sub") == {"pkg.sub.a"}
    assert g.edges("pkg.sub.a") == {"pkg.b"}  # `from .. import b`: the submodule, not pkg's __init__
    assert g.edges("pkg.sub.c") == {"pkg.sub.a"}  # a lazy import counts
    assert g.edges("pkg.b") == {"pkg.sub.a"}
    assert circles(g) == [["pkg.b", "pkg.sub.a"]]
    assert private_names(g) == [
        "pkg/b.py:2: from pkg.sub.a import _hidden",
        "pkg/b.py:3: pkg.sub.a._y (pkg.sub.a)",
    ]


def test_the_builder_skips_type_checking_imports(tmp_path: Path) -> None:
    g = _package(
        tmp_path,
        {
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nelse:\n    from . import c\n",
            "b.py": "from .a import c\n",
            "c.py": "",
        },
    )
    assert g.edges("pkg.a") == {"pkg.c"}
    assert circles(g) == []
    assert list(reach(g, ["pkg.b"])) == ["pkg.b", "pkg.a", "pkg.c"]


def _compiled_modules() -> list[str]:
    """setup.py's ``COMPILED``, as module names (read from the file: setup.py is no module)."""
    tree = ast.parse((ROOT.parent / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMPILED" for t in node.targets):
            paths = ast.literal_eval(node.value)
            return [p.removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no COMPILED list")


def _kinds(fn: Callable[..., Any]) -> list[object]:
    """A function's parameters as mypyc passes them: how many, of which kinds (not names)."""
    import inspect

    return [p.kind for p in inspect.signature(fn).parameters.values()]


def test_an_override_of_a_compiled_classs_method_takes_its_parameters() -> None:
    """mypyc calls a method of a compiled class through the compiled class's signature, also
    when the object is of an interpreted subclass (``allow_interpreted_subclasses``): an
    override that takes a parameter more is called without it (a 0-9-1 consumer of a stream
    at ``x-stream-offset`` 2 was started at 0 in the compiled build: ``Stream.add_consumer``'s
    ``start`` never came). So an override keeps its base's parameters; one that needs more is
    another method (``Stream.add_consumer_at``). Checked on the pure build, over every class of
    a compiled module and each subclass anywhere in the package."""
    import importlib
    import inspect
    import pkgutil

    for info in pkgutil.walk_packages(amqp10.__path__, "amqp10."):
        if info.name.startswith(("amqp10.spark", "amqp10.cli")) or info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    compiled = [importlib.import_module(name) for name in _compiled_modules()]
    bases = [c for m in compiled for c in vars(m).values() if inspect.isclass(c) and c.__module__ == m.__name__]
    assert any(c.__name__ == "Node" for c in bases), "the check must see the compiled node hierarchy"

    def subclasses(c: type) -> set[type]:
        found: set[type] = set(c.__subclasses__())
        for s in list(found):
            found |= subclasses(s)
        return found

    wrong = []
    for base in bases:
        for sub in subclasses(base):
            for name, fn in vars(sub).items():
                own = vars(base).get(name)
                if name.startswith("__") or not inspect.isfunction(fn) or not inspect.isfunction(own):
                    continue
                if _kinds(fn) != _kinds(own):
                    wrong.append(f"{sub.__module__}.{sub.__qualname__}.{name}{inspect.signature(fn)} "
                                 f"overrides {base.__qualname__}{inspect.signature(own)}")
    assert not wrong, "\n".join(wrong)


SHADOWS_READ_AS_ANY = {("amqp10.broker.amqp1.addresses.ExchangeTarget", "deleted")}
"""Interpreted subclasses that shadow a compiled base's attribute, each read only through a
value typed ``Any`` by compiled code (``amqp1/publishers.py``'s ``_publish``): mypyc crashed
on a compiled subclass's property over the attribute, so ``ExchangeTarget`` stays interpreted."""


def test_no_interpreted_subclass_shadows_a_compiled_classs_attribute() -> None:
    """A compiled class's attribute (one not declared ``ClassVar``) is a slot: compiled code
    reads the slot and never an interpreted subclass's class-level value or property over it
    (an ``Exchange``'s ``kind`` was read as "node" before ``kind`` became a ``ClassVar``)."""
    import importlib
    import inspect

    test_an_override_of_a_compiled_classs_method_takes_its_parameters()  # (imports everything)
    names = _compiled_modules()
    compiled = [importlib.import_module(name) for name in names]
    bases = [c for m in compiled for c in vars(m).values() if inspect.isclass(c) and c.__module__ == m.__name__]
    wrong = []
    for base in bases:
        notes = {n: str(a) for n, a in vars(base).get("__annotations__", {}).items()}
        slots = {n for n, a in notes.items() if "ClassVar" not in a}
        slots |= {
            n
            for n, v in vars(base).items()
            if not n.startswith("__") and not callable(v) and not isinstance(v, (property, staticmethod, classmethod))
            and "ClassVar" not in notes.get(n, "")
        }
        stack = list(base.__subclasses__())
        while stack:
            sub = stack.pop()
            stack.extend(sub.__subclasses__())
            if sub.__module__ in names:
                continue
            for n in slots & set(vars(sub)):
                if (f"{sub.__module__}.{sub.__qualname__}", n) not in SHADOWS_READ_AS_ANY:
                    wrong.append(f"{sub.__module__}.{sub.__qualname__}.{n} shadows {base.__qualname__}.{n}")
    assert not wrong, "\n".join(sorted(set(wrong)))
