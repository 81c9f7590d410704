"""MkDocs hook: the reference pages, generated from the code at build time so they cannot drift.

- ``reference/configuration.md``: every broker configuration key, walked from the pydantic
  models in :mod:`amqp10.broker.config` (meaning from each ``Field(description=...)``);
- ``reference/cli.md``: every command and option, walked from the argparse parser
  :func:`amqp10.cli.build_parser` returns;
- ``reference/spark-options.md``: every option of the Spark data source,
  :data:`amqp10.spark.options.OPTIONS`;
- ``reference/state-machines.md``: the transition tables of the engine and the SASL layer.

A generator that breaks raises, and the build stops: nothing is skipped silently.
``tests/test_docs.py`` runs the generators too.
"""

from __future__ import annotations

import argparse
import enum
import json
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic.fields import FieldInfo

GENERATED = "Generated from the code when the documentation is built; edit the code, not this page."


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


# -- broker configuration ------------------------------------------------------------------


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """``(model, is_list)`` when ``annotation`` is a model or a list of models."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, True
    return None, False


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (", optional" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    if origin is list:
        (item,) = args
        model, _ = _model_of(annotation)
        return "list of tables" if model else f"list of {_type_name(item)}"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"table of {_type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    if annotation in _TYPE_NAMES:
        return _TYPE_NAMES[annotation]
    raise TypeError(f"no documentation name for the type {annotation!r}")


def _bounds(field: FieldInfo) -> str:
    words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    parts = []
    for m in field.metadata:
        for attr, sign in words.items():
            value = getattr(m, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def _toml_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, PurePath):
        return f"`{json.dumps(str(value))}`"
    if isinstance(value, BaseModel):
        return "the table's defaults"
    if isinstance(value, list):
        if value and all(isinstance(v, BaseModel) for v in value):
            return (
                "one entry with the defaults below" if len(value) == 1 else f"{len(value)} entries"
            )
        return f"`{json.dumps(value)}`"
    if isinstance(value, (str, int, float)):
        return f"`{json.dumps(value)}`"
    if isinstance(value, dict | tuple) and not value:
        return "empty"
    raise TypeError(f"no documentation form for the default {value!r}")


def config_sections(
    model: type[BaseModel], prefix: str = "", header: str = ""
) -> Iterator[tuple[str, type[BaseModel], list[tuple[str, str, str, str]]]]:
    """``(toml header, model, rows)`` for ``model`` and, after it, each table inside it.

    Each row is ``(dotted key, type, default, meaning)``; a field without a description
    raises, since the description is where the meaning lives.
    """
    rows = []
    nested = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        if not field.description:
            raise ValueError(f"{model.__name__}.{name} has no Field(description=...)")
        kind = _type_name(field.annotation)
        bounds = _bounds(field)
        if bounds:
            kind += f" ({bounds})"
        default = "(required)" if field.is_required() else _toml_value(field.default)
        rows.append((f"`{key}`", kind, default, field.description))
        sub, is_list = _model_of(field.annotation)
        if sub is not None:
            table = key.replace("[]", "")  # TOML: [a.b] after [[a]] is b in the last a
            sub_header = f"[[{table}]]" if is_list else f"[{table}]"
            nested.append((sub, f"{key}[]." if is_list else f"{key}.", sub_header))
    yield header, model, rows
    for sub, sub_prefix, sub_header in nested:
        yield from config_sections(sub, sub_prefix, sub_header)


def config_reference() -> str:
    from amqp10.broker.config import BrokerConfig

    out = [
        "# Broker configuration",
        "",
        GENERATED,
        "",
        "`amqp10 broker --config FILE` reads a TOML file; every key is optional and the file is",
        "validated before the broker starts (a bad value stops it with one line naming the key).",
        "Command-line flags (`--port`, `--data-dir`, ...) override the file. In the tables a key",
        "`a.b` is `b` in the table `[a]`, and `a[].b` is `b` in each `[[a]]` entry.",
        "",
    ]
    for header, model, rows in config_sections(BrokerConfig):
        out += [f"## `{header}`" if header else "## Top level", ""]
        doc = (model.__doc__ or "").strip()
        if doc:
            out += [" ".join(doc.split()), ""]
        out += _table(("key", "type", "default", "meaning"), rows)
    return "\n".join(out)


# -- command line ----------------------------------------------------------------------------


def _expand_help(action: argparse.Action, prog: str) -> str:
    """An action's help with its ``%(default)s``-style fields filled in, as argparse does."""
    if not action.help:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return action.help % params


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        repeat = {"*": f"[{name} ...]", "+": f"{name} [{name} ...]", "?": f"[{name}]"}
        return f"`{repeat.get(str(action.nargs), name)}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return f"`{names} {metavar}`"


def _default(action: argparse.Action) -> str:
    value = action.default
    if action.nargs == 0:  # a flag: store_true / store_const / count
        return "off"
    if value is None or value is argparse.SUPPRESS:
        return "required" if action.required and action.nargs not in ("*", "?") else ""
    return f"`{value}`"


def cli_commands(
    parser: argparse.ArgumentParser, path: str, summary: str = ""
) -> Iterator[tuple[str, str, argparse.ArgumentParser, list[argparse.Action]]]:
    """``(command path, summary, parser, arguments)`` for ``parser`` and each subcommand."""
    arguments = []
    subcommands = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    subcommands.append((f"{path} {name}", helps.get(name, ""), sub))
        elif not isinstance(action, argparse._HelpAction) and action.help is not argparse.SUPPRESS:
            arguments.append(action)
    yield path, summary, parser, arguments
    for sub_path, sub_summary, sub in subcommands:
        yield from cli_commands(sub, sub_path, sub_summary)


def cli_reference() -> str:
    from amqp10.cli import build_parser

    parser = build_parser()
    out = ["# Command line", "", GENERATED, ""]
    for path, summary, sub, arguments in cli_commands(parser, parser.prog):
        out += [f"## `{path}`", ""]
        for text in (summary, sub.description):
            if text:
                out += [" ".join(text.split()), ""]
        out += ["```text", sub.format_usage().strip(), "```", ""]
        if arguments:
            rows = [
                (
                    _argument(a),
                    _default(a),
                    ", ".join(f"`{c}`" for c in a.choices) if a.choices else "",
                    _expand_help(a, sub.prog),
                )
                for a in arguments
            ]
            out += _table(("argument", "default", "choices", "meaning"), rows)
    return "\n".join(out)


# -- Spark data source -----------------------------------------------------------------------


def spark_reference() -> str:
    from amqp10.spark.options import OPTIONS

    rows = [
        (
            ", ".join(f"`{n}`" for n in (o.name, *o.aliases)),
            o.default,
            o.meaning,
        )
        for o in OPTIONS
    ]
    return "\n".join(
        [
            "# Spark data source options",
            "",
            GENERATED,
            "",
            'Options of `spark.read`/`readStream`/`write`/`writeStream` with `format("amqp10")`,',
            "given as `.option(name, value)`; names are case-insensitive. See",
            "`examples/README.md` for the read schema and a pipeline to run.",
            "",
            *_table(("option", "default", "meaning"), rows),
        ]
    )


# -- state machines ----------------------------------------------------------------------------


def _machines() -> list[tuple[str, str, Mapping[tuple[Any, Any], Any], Callable[[], str] | None]]:
    from amqp10.sasl import state as sasl_state
    from amqp10.transport import _diagrams

    machines: list[tuple[str, str, Mapping[tuple[Any, Any], Any], Callable[[], str] | None]] = []
    for name, (table, _start) in _diagrams.TABLES.items():
        machines.append(
            (
                name.capitalize(),
                f"`TRANSITIONS` in `amqp10/transport/{name}_state.py`",
                table,
                lambda name=name: _diagrams.dot(name),
            )
        )
    for role, table in (
        ("client", sasl_state.CLIENT_TRANSITIONS),
        ("server", sasl_state.SERVER_TRANSITIONS),
    ):
        where = f"`{role.upper()}_TRANSITIONS` in `amqp10/sasl/state.py`"
        machines.append((f"SASL ({role})", where, table, None))
    return machines


def _input_name(value: enum.Enum) -> str:
    return str(value.value) if isinstance(value.value, str) else value.name


def state_machines_reference() -> str:
    out = [
        "# State machines",
        "",
        GENERATED,
        "",
        "Each endpoint's state machine is a table `(state, input) -> new state` in its own",
        "module; a pair that is not in the table is not allowed (from the peer: a protocol",
        "error, answered with the matching close, end or detach; from the application: an",
        "`IllegalStateError`).",
        "",
    ]
    for title, where, table, draw in _machines():
        out += [f"## {title}", "", f"The table: {where}.", ""]
        rows = [(f"`{s.name}`", _input_name(i), f"`{n.name}`") for (s, i), n in table.items()]
        out += _table(("state", "input", "new state"), rows)
        if draw is not None:
            out += [
                "Graphviz source drawn from the same table (`dot -Tsvg` renders it):",
                "",
                "```dot",
                draw().rstrip(),
                "```",
                "",
            ]
    return "\n".join(out)


PAGES: dict[str, Callable[[], str]] = {
    "reference/configuration.md": config_reference,
    "reference/cli.md": cli_reference,
    "reference/spark-options.md": spark_reference,
    "reference/state-machines.md": state_machines_reference,
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages (a generator that fails stops the build)."""
    for uri, generate in PAGES.items():
        files.append(File.generated(config, uri, content=generate()))
    return files
