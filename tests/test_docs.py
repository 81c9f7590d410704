"""The generated reference pages (docs/hooks/reference.py) cover everything they document."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel, Field

from amqp10.broker.config import BrokerConfig
from amqp10.cli import build_parser

HOOK = Path(__file__).resolve().parent.parent / "docs" / "hooks" / "reference.py"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of ``model``, walked independently of the generator."""
    keys = []
    for name, field in model.model_fields.items():
        key = prefix + name
        keys.append(key)
        annotation = field.annotation
        item = getattr(annotation, "__args__", (None,))[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += _config_keys(annotation, key + ".")
        elif isinstance(item, type) and issubclass(item, BaseModel):
            keys += _config_keys(item, key + "[].")
    return keys


def test_every_config_key_is_documented(reference: ModuleType) -> None:
    text = reference.config_reference()
    keys = _config_keys(BrokerConfig)
    assert "limits.credit_window" in keys and "addresses[].policy.overflow" in keys
    for key in keys:
        assert f"| `{key}` |" in text, key
    for header in ("[[listeners]]", "[sasl]", "[[addresses]]", "[addresses.policy]", "[limits]"):
        assert f"## `{header}`" in text


def test_config_rows_carry_type_default_and_meaning(reference: ModuleType) -> None:
    text = reference.config_reference()
    assert (
        "| `listeners[].port` | integer (≥ 0, ≤ 65535) | `5672` | port to listen on (0: any free port) |"
        in text
    )
    assert (
        '| `default_policy.overflow` | one of "block", "drop-oldest", "reject", "drop-head", '
        '"reject-publish", "reject-publish-dlx" | `"block"` |'
        in text
    )
    assert '| `store.path` | path | `"data/amqp10.sqlite3"` |' in text
    assert "| `addresses[].pattern` | string | (required) |" in text


def test_every_config_field_has_a_description() -> None:
    missing = []

    def walk(model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            if not field.description:
                missing.append(f"{model.__name__}.{name}")
            for t in (field.annotation, *getattr(field.annotation, "__args__", ())):
                if isinstance(t, type) and issubclass(t, BaseModel):
                    walk(t)

    walk(BrokerConfig)
    assert not missing, f"add Field(description=...) to {', '.join(missing)}"


def test_a_field_without_description_breaks_the_generator(reference: ModuleType) -> None:
    class Inner(BaseModel):
        depth: int = 3

    class Outer(BaseModel):
        inner: Inner = Field(Inner(), description="a table")

    with pytest.raises(ValueError, match=r"Inner\.depth has no Field\(description"):
        list(reference.config_sections(Outer))


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_cli_command_and_option_is_documented(reference: ModuleType) -> None:
    text = reference.cli_reference()
    parsers = _parsers(build_parser())
    assert {"amqp10 broker", "amqp10 users add", "amqp10 send", "amqp10 receive"} <= {
        p.prog for p in parsers
    }
    for parser in parsers:
        section = text.split(f"## `{parser.prog}`\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            for name in action.option_strings or [action.metavar or action.dest]:
                assert name in section, f"{parser.prog}: {name}"
            assert action.help, f"{parser.prog}: {action.dest} has no help text"
            assert reference._expand_help(action, parser.prog) in section
            for choice in action.choices or ():
                assert f"`{choice}`" in section


def test_every_spark_option_is_documented(reference: ModuleType) -> None:
    from amqp10.spark.options import OPTIONS, SourceOptions

    text = reference.spark_reference()
    parse = inspect.getsource(SourceOptions.parse)
    for option in OPTIONS:
        for name in (option.name, *option.aliases):
            assert f"`{name}`" in text, name
        assert f'_get(opts, "{option.name}")' in parse, f"parse() does not read {option.name}"
    assert parse.count("_get(opts, ") == len(OPTIONS)
    assert "opts.get(" not in parse  # every read goes through the documented table


def test_spark_options_still_parse_by_any_case_and_alias() -> None:
    from amqp10.spark.options import SourceOptions

    opts = SourceOptions.parse(
        {"PATH": "orders", "Username": "bob", "password": "pw", "MAXMESSAGESPERBATCH": "5"}
    )
    assert opts.address == "orders"
    assert opts.url == "amqp://bob:pw@127.0.0.1"
    assert opts.max_messages_per_batch == 5
    assert SourceOptions.parse({"address": "a", "path": "b"}).address == "a"


def test_every_state_transition_is_listed(reference: ModuleType) -> None:
    from amqp10.sasl import state as sasl_state
    from amqp10.transport import connection_state, link_state, session_state

    text = reference.state_machines_reference()
    tables = [
        ("## Connection", connection_state.TRANSITIONS),
        ("## Session", session_state.TRANSITIONS),
        ("## Link", link_state.TRANSITIONS),
        ("## SASL (client)", sasl_state.CLIENT_TRANSITIONS),
        ("## SASL (server)", sasl_state.SERVER_TRANSITIONS),
    ]
    for heading, table in tables:
        section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
        for (state, inp), new in table.items():
            assert f"| `{state.name}` | {inp.value} | `{new.name}` |" in section


def test_the_examples_table_names_every_spark_option() -> None:
    """examples/README.md keeps a hand-written table for readers of the repository."""
    from amqp10.spark.options import OPTIONS

    readme = (HOOK.parents[2] / "examples" / "README.md").read_text()
    table = readme.split("### Options", 1)[1].split("\n### ", 1)[0]
    for option in OPTIONS:
        assert f"`{option.name}`" in table, option.name
