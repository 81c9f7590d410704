"""``amqp10 admin``: a running broker's entities, over AMQP ``$management``.

::

    amqp10 admin queues|streams|topics|subscriptions|exchanges|bindings|connections|vhosts|policies [--json]
    amqp10 admin get TYPE NAME [--json]
    amqp10 admin create TYPE [NAME] [KEY=VALUE | KEY:=JSON ...]
    amqp10 admin update TYPE NAME KEY=VALUE | KEY:=JSON ...
    amqp10 admin delete TYPE NAME
    amqp10 admin purge NAME [--type queue|subscription]
    amqp10 admin peek NAME [--count N] [--offset N] [--type queue|stream|subscription] [--json]
    amqp10 admin close-connection NAME
    amqp10 admin types
    amqp10 admin export FILE | import FILE

each with ``--url URL`` (default ``amqp://127.0.0.1:5672``), ``--timeout S``,
``--vhost NAME`` and ``--node ADDRESS``.

The requests are the OASIS AMQP Management draft's (QUERY, READ, CREATE, UPDATE,
DELETE, GET-OPERATIONS; PURGE and PEEK are ours), sent to ``$management`` (another
address with ``--node``) over the connection ``--url`` names, credentials included
(``amqp://user:pass@host:port``, as for ``amqp10 send``). Listings page through QUERY. ``export`` and ``import`` use
this broker's ``export-definitions`` and ``import-definitions``. A refusal is one
line on stderr with the broker's status code and reason, and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import Subparsers, bad_url, fail, one_line
from .sendrecv import URL_HELP, CliError, parse_key_value

if TYPE_CHECKING:
    import amqp10.sync

__all__ = ["Client", "Refused", "add_parser", "print_import_outcome"]

LISTINGS: dict[str, tuple[str, list[str]]] = {
    "queues": ("queue", ["name", "depth", "consumers", "unacked", "publish_rate", "deliver_rate", "durable"]),
    "streams": ("stream", ["name", "depth", "bytes", "consumers", "first_offset", "next_offset"]),
    "topics": ("topic", ["name", "subscriptions", "depth", "publish_rate"]),
    "subscriptions": ("subscription", ["name", "topic", "depth", "consumers", "deliver_rate"]),
    "exchanges": ("exchange", ["name", "exchange_type", "durable", "internal", "bindings"]),
    "bindings": ("binding", ["source", "destination_type", "destination", "routing_key", "arguments"]),
    "connections": ("connection", ["name", "user", "protocol", "vhost", "container_id", "sessions", "links"]),
    "vhosts": ("vhost", ["name", "queues", "exchanges", "connections", "depth", "description"]),
    "policies": ("policy", ["name", "pattern", "apply_to", "priority", "definition"]),
}
"""Each listing verb: the entity type it queries and the table's columns."""

DEFAULT_URL = "amqp://127.0.0.1:5672"

PAGE = 500
"""Rows asked for per QUERY (a listing pages until a short page)."""
MAX_PAGES = 10_000


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``admin`` and its verbs on the ``amqp10`` command's subparsers."""
    a = sub.add_parser("admin", help="list, create, delete, purge ... a running broker's entities ($management)")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=DEFAULT_URL, metavar="URL", help=f"the broker: {URL_HELP} (default {DEFAULT_URL})")
    common.add_argument("--timeout", type=float, default=10.0, metavar="S", help="bound on connecting and on each request (default 10)")
    common.add_argument("--vhost", metavar="NAME", help="the virtual host to manage (opens the connection to 'vhost:NAME')")
    common.add_argument("--node", default="$management", metavar="ADDRESS", help="the management node's address (default $management)")
    verbs = _Verbs(a.add_subparsers(dest="admin_command", required=True, metavar="VERB"), common)
    for verb, (kind, _) in LISTINGS.items():
        v = verbs.add_parser(verb, help=f"list the {kind} entities as a table")
        v.add_argument("--json", action="store_true", help="every attribute, as a JSON list of objects")
        v.set_defaults(func=_cmd(_list), entity_type=kind)
    g = verbs.add_parser("get", help="one entity's attributes (READ)")
    g.add_argument("type", metavar="TYPE", help="the entity type (queue, exchange, connection, ...)")
    g.add_argument("name", metavar="NAME", help="the entity's name")
    g.add_argument("--json", action="store_true", help="as a JSON object")
    g.set_defaults(func=_cmd(_get))
    c = verbs.add_parser("create", help="create an entity (CREATE)")
    c.add_argument("type", metavar="TYPE", help="the entity type (queue, stream, topic, exchange, binding, policy, vhost)")
    c.add_argument(
        "items", nargs="*", metavar="NAME | KEY=VALUE | KEY:=JSON",
        help="the name (a binding's is not needed), then attributes: key=string or key:=JSON, "
        "e.g. durable:=false arguments:='{\"x-max-length\": 10}' exchange_type=topic",
    )  # fmt: skip
    c.set_defaults(func=_cmd(_create))
    u = verbs.add_parser("update", help="change an entity's attributes (UPDATE)")
    u.add_argument("type", metavar="TYPE", help="the entity type (policy, vhost, ...)")
    u.add_argument("name", metavar="NAME", help="the entity's name")
    u.add_argument("attributes", nargs="+", metavar="KEY=VALUE | KEY:=JSON", help="the attributes to change")
    u.set_defaults(func=_cmd(_update))
    d = verbs.add_parser("delete", help="delete an entity (DELETE)")
    d.add_argument("type", metavar="TYPE", help="the entity type")
    d.add_argument("name", metavar="NAME", help="the entity's name")
    d.set_defaults(func=_cmd(_delete))
    p = verbs.add_parser("purge", help="drop every message of a queue (PURGE)")
    p.add_argument("name", metavar="NAME", help="the queue's (or subscription's) name")
    p.add_argument("--type", default="queue", choices=["queue", "subscription"], help="what NAME is (default queue)")
    p.set_defaults(func=_cmd(_purge))
    k = verbs.add_parser("peek", help="show the first messages of a queue, left in place (PEEK)")
    k.add_argument("name", metavar="NAME", help="the queue's (stream's, subscription's) name")
    k.add_argument("--count", "-n", type=int, default=10, metavar="N", help="how many messages (default 10)")
    k.add_argument("--offset", type=int, default=0, metavar="N", help="the position of the first (default 0: the next to be delivered)")
    k.add_argument("--type", default="queue", choices=["queue", "stream", "subscription"], help="what NAME is (default queue)")
    k.add_argument("--json", action="store_true", help="every field, as a JSON list of objects")
    k.set_defaults(func=_cmd(_peek))
    x = verbs.add_parser("close-connection", help="close a client connection (DELETE of a connection)")
    x.add_argument("name", metavar="NAME", help="the connection's name (see the connections listing)")
    x.set_defaults(func=_cmd(_close))
    t = verbs.add_parser("types", help="the entity types and their operations (GET-OPERATIONS)")
    t.add_argument("--json", action="store_true", help="as a JSON object")
    t.set_defaults(func=_cmd(_types))
    e = verbs.add_parser("export", help="write the broker's definitions (RabbitMQ JSON) to a file")
    e.add_argument("file", metavar="FILE", help="where to write them ('-': standard output)")
    e.set_defaults(func=_cmd(_export))
    i = verbs.add_parser("import", help="import a definitions file (RabbitMQ JSON) into the broker")
    i.add_argument("file", metavar="FILE", help="the definitions file ('-': standard input)")
    i.set_defaults(func=_cmd(_import))
    return a


class _Verbs:
    """The verbs' subparsers, each with the options every verb takes (after the verb)."""

    def __init__(self, sub: Subparsers, common: argparse.ArgumentParser) -> None:
        self.sub = sub
        self.common = common

    def add_parser(self, name: str, *, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = self.sub.add_parser(name, help=help, parents=[self.common])
        return p


# -- talking to the broker ---------------------------------------------------------------------------
class Refused(Exception):
    """The broker answered with a status that is not 2xx: ``status`` and ``reason``."""

    def __init__(self, what: str, status: Any, reason: str) -> None:
        super().__init__(f"{what}: {status} {reason}".strip())
        self.status = status
        self.reason = reason


class Client:
    """Requests to the management node over one connection (our blocking client)."""

    def __init__(self, conn: amqp10.sync.Connection, node: str, timeout: float) -> None:
        self.conn = conn
        self.node = node
        self.timeout = timeout

    def call(self, operation: str, type: str | None = None, name: str | None = None, body: Any = None, **props: Any) -> tuple[Any, dict[str, Any]]:
        """The response's body and application properties; raises :class:`Refused` for a non-2xx status."""
        from ..message import Message

        app: dict[str, Any] = {"operation": operation, **props}
        if type is not None:
            app["type"] = type
        if name is not None:
            app["name"] = name
        reply = self.conn.request(self.node, Message(body=body, application_properties=app), timeout=self.timeout)
        p = dict(reply.application_properties or {})
        status = p.get("statusCode", p.get("status-code"))
        if not isinstance(status, int) or not 200 <= status < 300:
            reason = p.get("statusDescription")
            if reason is None and isinstance(reply.body, dict):
                reason = reply.body.get("error")
            what = " ".join(str(w) for w in (operation, type, name) if w)
            raise Refused(what, status, str(reason or ""))
        return reply.body, p

    def query(self, kind: str, attributes: list[str]) -> tuple[list[str], list[list[Any]]]:
        """Every entity of ``kind``: the attribute names and the rows, page by page."""
        rows: list[list[Any]] = []
        names = attributes
        for page in range(MAX_PAGES):
            body, _ = self.call("QUERY", body={"attributeNames": attributes}, entityType=kind, offset=page * PAGE, count=PAGE)
            if not isinstance(body, dict) or not isinstance(body.get("results"), list):
                raise Refused(f"QUERY {kind}", "", "the response is not a map with results")
            names = list(body.get("attributeNames") or attributes)
            rows.extend(body["results"])
            if len(body["results"]) < PAGE:
                break
        return names, rows


Action = Callable[[argparse.Namespace, Client], int]


def _cmd(action: Action) -> Callable[[argparse.Namespace], int]:
    """``action`` run with a client on the URL's connection; every failure one line on stderr."""

    def run(args: argparse.Namespace) -> int:
        import amqp10.sync
        from amqp10 import errors

        if bad_url("admin", args.url):
            return 2
        try:
            hostname = None if args.vhost is None else f"vhost:{args.vhost}"
            with amqp10.sync.connect(args.url, hostname=hostname, timeout=args.timeout) as conn:
                return action(args, Client(conn, args.node, args.timeout))
        except Refused as exc:
            fail("admin", str(exc))
            return 1
        except CliError as exc:
            fail("admin", str(exc))
            return exc.code
        except (errors.AMQPError, OSError, ValueError) as exc:
            fail("admin", one_line(exc))
            return 1
        except KeyboardInterrupt:
            fail("admin", "interrupted")
            return 130

    return run


# -- the verbs ----------------------------------------------------------------------------------------
def _list(args: argparse.Namespace, c: Client) -> int:
    kind = args.entity_type
    columns = next(cols for k, cols in LISTINGS.values() if k == kind)
    names, rows = c.query(kind, [] if args.json else columns)
    if args.json:
        _print_json([dict(zip(names, row, strict=False)) for row in rows])
    else:
        _print_table(names, rows)
    return 0


def _get(args: argparse.Namespace, c: Client) -> int:
    body, _ = c.call("READ", args.type, args.name)
    if args.json or not isinstance(body, dict):
        _print_json(body)
    else:
        width = max((len(str(k)) for k in body), default=0)
        for key, value in body.items():
            print(f"{str(key).ljust(width)}  {_cell(value)}")
    return 0


def _attributes(items: list[str]) -> dict[str, Any]:
    return dict(parse_key_value(item, "attribute") for item in items)


def _create(args: argparse.Namespace, c: Client) -> int:
    names = [i for i in args.items if "=" not in i]
    if len(names) > 1:
        raise CliError(f"one name, then KEY=VALUE attributes (got names {names!r})", 2)
    name = names[0] if names else ""
    body, _ = c.call("CREATE", args.type, name, _attributes([i for i in args.items if "=" in i]))
    made = body.get("name", name) if isinstance(body, dict) else name
    print(f"created {args.type} {made}")
    return 0


def _update(args: argparse.Namespace, c: Client) -> int:
    c.call("UPDATE", args.type, args.name, _attributes(args.attributes))
    print(f"updated {args.type} {args.name}")
    return 0


def _delete(args: argparse.Namespace, c: Client) -> int:
    c.call("DELETE", args.type, args.name)
    print(f"deleted {args.type} {args.name}")
    return 0


def _purge(args: argparse.Namespace, c: Client) -> int:
    body, _ = c.call("PURGE", args.type, args.name)
    n = body.get("purged") if isinstance(body, dict) else None
    print(f"purged {n} message(s) from {args.type} {args.name}")
    return 0


def _peek(args: argparse.Namespace, c: Client) -> int:
    for option, value in (("--count", args.count), ("--offset", args.offset)):
        if value < 0:
            raise CliError(f"{option} must not be negative, not {value}", 2)
    body, _ = c.call("PEEK", args.type, args.name, count=args.count, offset=args.offset)
    messages = body if isinstance(body, list) else []
    if args.json:
        _print_json(messages)
        return 0
    columns = ["position", "message_id", "subject", "size", "delivery_count", "body"]
    _print_table(columns, [[m.get(k) if isinstance(m, dict) else None for k in columns] for m in messages])
    return 0


def _close(args: argparse.Namespace, c: Client) -> int:
    c.call("DELETE", "connection", args.name)
    print(f"closed connection {args.name}")
    return 0


def _types(args: argparse.Namespace, c: Client) -> int:
    body, _ = c.call("GET-OPERATIONS", "org.amqp.management", "self")
    if args.json or not isinstance(body, dict):
        _print_json(body)
        return 0
    _print_table(["type", "operations"], [[t, " ".join(ops) if isinstance(ops, dict) else ops] for t, ops in body.items()])
    return 0


def _export(args: argparse.Namespace, c: Client) -> int:
    body, _ = c.call("export-definitions")
    text = body if isinstance(body, str) else json.dumps(body, indent=2)
    if args.file == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        Path(args.file).write_text(text)
        print(f"exported the definitions to {args.file}")
    return 0


def _import(args: argparse.Namespace, c: Client) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as exc:
        raise CliError(one_line(exc)) from None
    body, _ = c.call("import-definitions", body=text)
    return print_import_outcome(body if isinstance(body, dict) else {}, args.url)


def print_import_outcome(outcome: dict[str, Any], where: str) -> int:
    """Print what a live import did (warnings, skipped entries, counts); 1 if it skipped any."""
    for w in outcome.get("warnings", []):
        print(f"warning: {w}")
    for e in outcome.get("skipped", []):
        print(f"skipped: {e}")
    counts = outcome.get("imported", {})
    summary = ", ".join(f"{n} {kind}(s)" for kind, n in counts.items() if n) or "nothing"
    print(f"imported into {where}: {summary}")
    return 1 if outcome.get("skipped") else 0


# -- output ------------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return " ".join(str(value).split())


def _print_table(columns: list[str], rows: list[list[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(col), *(len(r[i]) for r in cells if i < len(r))]) for i, col in enumerate(columns)]
    print("  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)).rstrip())


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))
