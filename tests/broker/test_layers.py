"""The broker core and its management operations are protocol-neutral: they import no
protocol engine or network code."""

from __future__ import annotations

import ast
from pathlib import Path

import amqp10
import amqp10.broker.core
import amqp10.broker.management

CORE = Path(amqp10.broker.core.__file__).parent
MANAGEMENT = Path(amqp10.broker.management.__file__).parent
# the protocol engines, the network, and the front ends built on them
FORBIDDEN = (
    "amqp10.transport",
    "amqp10.amqp091",
    "amqp10.sasl",
    "amqp10.io",
    "amqp10.broker.amqp1",
    "amqp10.broker.service",
)


def _package_of(path: Path, root: Path = CORE) -> str:
    return f"amqp10.broker.{root.name}" + "".join(f".{p}" for p in path.relative_to(root).parent.parts)


def _imports(source: str, package: str) -> list[str]:
    """Every module (and imported name) ``source`` imports, relative imports resolved in ``package``."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
                names.extend([module] + [f"{module}.{a.name}" for a in node.names])
            elif node.module:
                names.extend([node.module] + [f"{node.module}.{a.name}" for a in node.names])
    return names


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_core_imports_no_protocol_engine() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 5
    bad = [(f.name, n) for f in files for n in _imports(f.read_text(), _package_of(f)) if _forbidden(n)]
    assert bad == []


def test_management_imports_no_protocol_engine() -> None:
    # the web console and $management share it: neither front end's engine belongs here
    files = sorted(MANAGEMENT.rglob("*.py"))
    assert len(files) >= 5
    bad = [(f.name, n) for f in files for n in _imports(f.read_text(), _package_of(f, MANAGEMENT)) if _forbidden(n)]
    assert bad == []


def test_the_checker_sees_relative_imports() -> None:
    source = "from ...transport import Connection\nfrom ..amqp1 import handler\nimport amqp10.io.net\nfrom . import store\n"
    names = _imports(source, "amqp10.broker.core")
    assert "amqp10.broker.core.store" in names
    assert [n for n in names if _forbidden(n)] == [
        "amqp10.transport",
        "amqp10.transport.Connection",
        "amqp10.broker.amqp1",
        "amqp10.broker.amqp1.handler",
        "amqp10.io.net",
    ]


def test_the_spark_connector_is_a_client_of_the_broker_not_a_part() -> None:
    # it reaches the broker over AMQP only; names both sides share live below (amqp10.addresses)
    spark = Path(amqp10.__file__).parent / "spark"
    files = sorted(spark.rglob("*.py"))
    assert len(files) >= 5
    bad = [
        (f.name, n)
        for f in files
        for n in _imports(f.read_text(), "amqp10.spark")
        if n == "amqp10.broker" or n.startswith("amqp10.broker.")
    ]
    assert bad == []
