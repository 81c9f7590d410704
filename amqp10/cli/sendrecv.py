"""``amqp10 send`` and ``amqp10 receive``: messages from the command line, and back.

::

    amqp10 send URL ADDRESS [MESSAGE ...] [--file F | -] [--count N] [--rate R] ...
    amqp10 receive URL ADDRESS [--count N] [--timeout S] [--format text|json|raw] ...

Each is a thin layer over the async client (:func:`amqp10.connect`), run on
asyncio. A person sees one summary line, an optional progress bar on stderr
(:mod:`amqp10.cli.progress`), and on failure one line on stderr and a non-zero
exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import json
import math
import sys
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO, TypeAlias, TypeVarTuple, Unpack

from ._common import Subparsers, bad_url, fail, first_error, log_to_stderr, one_line

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

    from ..client import Delivery, Outcome, ReconnectPolicy
    from ..message import Message
    from .progress import Progress

__all__ = [
    "CliError",
    "JsonValue",
    "PropertyValue",
    "add_parsers",
    "cmd_receive",
    "cmd_send",
    "message_to_json",
    "parse_key_value",
    "parse_property",
]

IN_FLIGHT = 256
"""Sends awaiting their outcome at once (pipelining: one round trip is not one message)."""

DEFAULT_TIMEOUT = 10.0

FLUSH_EVERY = 100
"""Printed messages are flushed (then accepted: at least once) at least this often,
and whenever no more are waiting."""


PropertyValue: TypeAlias = str | int | float | bool | None
"""An application property given with ``--property``: a string, or a JSON scalar."""

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""What :func:`json.dumps` writes: the form :func:`message_to_json` gives a message."""

_Args = TypeVarTuple("_Args")


class CliError(Exception):
    """A failure worded for one line on stderr; ``code`` is the exit code (2: usage)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# -- arguments ---------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def parse_key_value(text: str, what: str) -> tuple[str, JsonValue]:
    """``key=value`` (a string) or ``key:=JSON`` (a number, true/false, null, a list, a map);
    ``what`` names the argument in errors."""
    eq = text.find("=")
    if eq < 0:
        raise CliError(f"{what} {text!r}: expected KEY=VALUE or KEY:=JSON", 2)
    value: JsonValue
    if eq > 0 and text[eq - 1] == ":":
        key = text[: eq - 1]
        try:
            value = json.loads(text[eq + 1 :])
        except ValueError:
            raise CliError(f"{what} {text!r}: the value after ':=' is not JSON", 2) from None
    else:
        key, value = text[:eq], text[eq + 1 :]
    if not key:
        raise CliError(f"{what} {text!r}: the key is empty", 2)
    return key, value


def parse_property(text: str) -> tuple[str, PropertyValue]:
    """``key=value`` (a string) or ``key:=JSON`` (a number, true/false, null, ...)."""
    key, value = parse_key_value(text, "--property")
    if not isinstance(value, (str, int, float, bool)) and value is not None:  # dict, list
        raise CliError(f"--property {text!r}: application properties are simple values", 2)
    return key, value


URL_HELP = "amqp[s]://[user:pass@]host[:port], or ws[s]://[user:pass@]host[:port]/path"


def add_parsers(sub: Subparsers) -> None:
    """Add ``send`` and ``receive`` to the ``amqp10`` command's subparsers."""
    s = sub.add_parser(
        "send",
        help="send messages to an address",
        description="Send messages (arguments, lines of a file, or lines of stdin) and "
        "print how many the peer accepted.",
    )
    s.add_argument("url", metavar="URL", help=URL_HELP)
    s.add_argument("address", metavar="ADDRESS", help="the node to send to (a queue, topic, ...)")
    s.add_argument(
        "messages", nargs="*", metavar="MESSAGE", help="message bodies ('-': read stdin)"
    )
    s.add_argument("--file", "-f", metavar="FILE", help="one message per line ('-': stdin)")
    s.add_argument(
        "--count",
        "-n",
        type=_positive_int,
        metavar="N",
        help="send N messages, cycling through the given ones",
    )
    s.add_argument(
        "--rate", type=_positive_float, metavar="R", help="at most R messages per second"
    )
    s.add_argument(
        "--durable", action="store_true", help="mark messages durable (a broker stores them)"
    )
    s.add_argument(
        "--property", "-p", action="append", default=[], metavar="K=V",
        help="an application property (K:=JSON for a number, true/false or null); repeatable",
    )  # fmt: skip
    s.add_argument("--subject", help="the subject property")
    s.add_argument("--content-type", metavar="TYPE", help="the content-type property")
    s.add_argument(
        "--data", action="store_true", help="send bodies as data sections (bytes), not strings"
    )
    s.add_argument(
        "--settle", choices=["at-least-once", "at-most-once"], default="at-least-once",
        help="wait for each outcome (default), or send pre-settled",
    )  # fmt: skip
    _common_options(s)
    s.set_defaults(func=cmd_send)

    r = sub.add_parser(
        "receive",
        help="receive messages from an address",
        description="Print messages as they arrive (and accept them), until --count "
        "messages or --timeout seconds without one.",
    )
    r.add_argument("url", metavar="URL", help=URL_HELP)
    r.add_argument("address", metavar="ADDRESS", help="the node to receive from")
    r.add_argument("--count", "-n", type=_positive_int, metavar="N", help="stop after N messages")
    r.add_argument(
        "--format", choices=["text", "json", "raw"], default="text",
        help="text: the body, one per line; json: one object per line with every section "
        "(bytes as base64); raw: the body's bytes, nothing added",
    )  # fmt: skip
    r.add_argument(
        "--browse", action="store_true", help="read without consuming (distribution mode copy)"
    )
    r.add_argument(
        "--credit", type=_positive_int, default=100, metavar="N", help="credit window (default 100)"
    )
    _common_options(r, receiving=True)
    r.set_defaults(func=cmd_receive)


def _common_options(p: argparse.ArgumentParser, *, receiving: bool = False) -> None:
    if receiving:
        p.add_argument(
            "--timeout", type=_positive_float, metavar="S",
            help="stop after S seconds without a message (also bounds connecting; "
            "default: wait for messages until interrupted)",
        )  # fmt: skip
    else:
        p.add_argument(
            "--timeout", type=_positive_float, default=DEFAULT_TIMEOUT, metavar="S",
            help=f"bound on connecting and on each message's outcome (default {DEFAULT_TIMEOUT:g})",
        )  # fmt: skip
    p.add_argument("--reconnect", action="store_true", help="re-connect if the connection drops")
    p.add_argument(
        "--progress",
        action="store_true",
        help="show a progress bar even if stderr is not a terminal",
    )


# -- running ---------------------------------------------------------------------------------
def _run(command: str, main: Callable[[Unpack[_Args]], Awaitable[int]], *args: *_Args) -> int:
    """Run ``main(*args)`` on asyncio; every failure becomes one line on stderr."""
    import logging

    import anyio

    from .. import errors

    # the client's warnings (a reconnect: lost, back) as lines like our own
    log_to_stderr(logging.Formatter(f"amqp10 {command}: %(message)s"), logging.WARNING)
    try:
        result = anyio.run(main, *args)
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        fail(command, "interrupted")
        return 130
    except CliError as exc:
        fail(command, str(exc))
        return exc.code
    except (errors.AMQPError, OSError, ValueError) as exc:
        fail(command, one_line(exc))
        return 1
    except BaseExceptionGroup as group:
        first = first_error(group)
        if isinstance(first, BrokenPipeError):
            return _reader_gone()
        if isinstance(first, KeyboardInterrupt):
            fail(command, "interrupted")
            return 130
        fail(command, one_line(first))
        return first.code if isinstance(first, CliError) else 1
    except Exception as exc:  # a bug of ours: still one line (the type says where to look)
        fail(command, f"internal error: {type(exc).__name__}: {one_line(exc)}")
        return 1
    return result


def _reader_gone() -> int:
    """stdout's reader went away (``| head``): stop quietly, as Unix tools do."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass
    return 0


def _progress(args: argparse.Namespace, total: int | None, *, prints: bool = False) -> Progress:
    """The bar: on request, or on a terminal's stderr (unless messages print to it too)."""
    from .progress import Progress

    auto = sys.stderr.isatty() and not (prints and sys.stdout.isatty())
    return Progress(total, sys.stderr, enabled=args.progress or auto)


def _policy(args: argparse.Namespace) -> ReconnectPolicy | None:
    if not args.reconnect:
        return None
    from ..client.reconnect import ReconnectPolicy

    return ReconnectPolicy(max_time=max(args.timeout or DEFAULT_TIMEOUT, 30.0))


# -- send --------------------------------------------------------------------------------------
@dataclass
class SendStats:
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    released: int = 0
    modified: int = 0
    first_refusal: str | None = None
    error: BaseException | None = None

    @property
    def refused(self) -> int:
        return self.rejected + self.released + self.modified


def cmd_send(args: argparse.Namespace) -> int:
    if bad_url("send", args.url):
        return 2
    try:
        properties = dict(parse_property(p) for p in args.property)
    except (ValueError, CliError) as exc:
        fail("send", str(exc))
        return 2
    use_stdin = args.file == "-" or args.messages == ["-"]
    if args.file is not None and args.messages:
        fail("send", "give messages as arguments or with --file, not both")
        return 2
    if args.file is None and not args.messages and sys.stdin.isatty():
        fail("send", "nothing to send: give messages as arguments, --file FILE, or - for stdin")
        return 2
    if args.file is None and not args.messages:
        use_stdin = True
    if args.file not in (None, "-"):
        try:
            with open(args.file, "rb"):
                pass
        except OSError as exc:
            fail("send", f"cannot read {args.file}: {(exc.strerror or str(exc)).lower()}")
            return 2
    return _run("send", _send, args, properties, use_stdin)


async def _lines(args: argparse.Namespace, use_stdin: bool) -> AsyncGenerator[str, None]:
    import anyio

    if use_stdin:
        f = anyio.wrap_file(sys.stdin)
        async for line in f:
            yield line.rstrip("\r\n")
        return
    try:
        af = await anyio.open_file(args.file, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {(exc.strerror or str(exc)).lower()}") from None
    async with af:
        async for line in af:
            yield line.rstrip("\r\n")


async def _bodies(args: argparse.Namespace, use_stdin: bool) -> AsyncGenerator[str, None]:
    """The message bodies to send: ``--count`` of them, cycling, or each once."""
    count = args.count
    if args.messages and not use_stdin:
        given: list[str] = args.messages
        n = count if count is not None else len(given)
        for i in range(n):
            yield given[i % len(given)]
        return
    seen: list[str] = []
    sent = 0
    async with aclosing(_lines(args, use_stdin)) as lines:
        async for line in lines:
            if count is not None:
                if sent >= count:
                    return
                seen.append(line)
            yield line
            sent += 1
    if count is not None and sent < count:
        if not seen:
            raise CliError("nothing to send: the input has no lines")
        while sent < count:  # bounded: count more
            yield seen[sent % len(seen)]
            sent += 1


def _message(args: argparse.Namespace, body: str, properties: dict[str, PropertyValue]) -> Message:
    from ..message import Message

    msg = Message(body.encode() if args.data else body, body_type="data" if args.data else "value")
    if args.durable:
        msg.durable = True
    if args.subject is not None:
        msg.subject = args.subject
    if args.content_type is not None:
        msg.content_type = args.content_type
    if properties:
        msg.application_properties = dict(properties)
    return msg


async def _send(
    args: argparse.Namespace, properties: dict[str, PropertyValue], use_stdin: bool
) -> int:
    import anyio

    import amqp10

    from ..client._common import describe_outcome
    from ..message import Message
    from ..types import Accepted, Modified, Rejected, Released

    stats = SendStats()
    total = (
        args.count
        if args.count is not None
        else (len(args.messages) if not use_stdin and args.messages else None)
    )
    bar = _progress(args, total)
    presettled = args.settle == "at-most-once"
    conn = await amqp10.connect(args.url, timeout=args.timeout, reconnect=_policy(args))
    async with conn:
        sender = await conn.open_sender(args.address, settle_mode=args.settle)
        # a reader fills a bounded queue; IN_FLIGHT lanes send from it, each waiting for
        # its message's outcome: messages are queued on the link in the input's order
        queue_in, queue_out = anyio.create_memory_object_stream[Message](IN_FLIGHT)
        started = anyio.current_time()

        def count(outcome: Outcome | None) -> None:
            stats.sent += 1
            if presettled or isinstance(outcome, Accepted):
                stats.accepted += 1
                return
            if isinstance(outcome, Rejected):
                stats.rejected += 1
            elif isinstance(outcome, Released):
                stats.released += 1
            elif isinstance(outcome, Modified):
                stats.modified += 1
            if stats.first_refusal is None:
                stats.first_refusal = describe_outcome(outcome)

        async def read() -> None:
            async with queue_in, aclosing(_bodies(args, use_stdin)) as bodies:
                i = 0
                async for body in bodies:
                    if args.rate is not None:
                        wait = started + i / args.rate - anyio.current_time()
                        if wait > 0:
                            await anyio.sleep(wait)
                    await queue_in.send(_message(args, body, properties))
                    i += 1

        async def lane(messages: MemoryObjectReceiveStream[Message]) -> None:
            async with messages:
                async for msg in messages:
                    try:
                        outcome = await sender.send(msg, timeout=args.timeout)
                    except Exception as exc:
                        if stats.error is None:
                            stats.error = exc
                        tg.cancel_scope.cancel()
                        return
                    count(outcome)
                    bar.update(stats.sent)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            async with queue_out:
                for _ in range(IN_FLIGHT):
                    tg.start_soon(lane, queue_out.clone())
        elapsed = anyio.current_time() - started
    bar.update(stats.sent, force=True)
    bar.finish()
    if stats.error is not None:
        raise CliError(f"{one_line(stats.error)} (after {stats.sent} sent)") from None
    if stats.sent == 0:
        raise CliError("nothing to send: the input has no lines")
    rate = stats.sent / elapsed if elapsed > 0 else 0.0
    if presettled:
        print(f"sent {stats.sent} (pre-settled) in {elapsed:.3f}s ({rate:,.0f} msg/s)")
        return 0
    print(
        f"sent {stats.sent}, accepted {stats.accepted}, rejected {stats.rejected}, "
        f"released {stats.released}, modified {stats.modified} in {elapsed:.3f}s "
        f"({rate:,.0f} msg/s)"
    )
    if stats.refused:
        fail("send", f"{stats.refused} of {stats.sent} not accepted (first: {stats.first_refusal})")
        return 1
    return 0


# -- receive ------------------------------------------------------------------------------------
def cmd_receive(args: argparse.Namespace) -> int:
    if bad_url("receive", args.url):
        return 2
    return _run("receive", _receive, args)


async def _receive(args: argparse.Namespace) -> int:
    import amqp10

    from .. import errors
    from ..types import Source, symbol

    bar = _progress(args, args.count, prints=True)
    out = sys.stdout
    idle = args.timeout if args.timeout is not None else math.inf
    connect_timeout = args.timeout if args.timeout is not None else DEFAULT_TIMEOUT
    source = Source(address=args.address, distribution_mode=symbol("copy")) if args.browse else None
    got = 0
    timed_out = False
    conn = await amqp10.connect(args.url, timeout=connect_timeout, reconnect=_policy(args))
    async with conn:
        # no more credit than messages wanted: what we take but do not print goes back
        # to the queue on closing, out of order
        credit = min(args.credit, args.count) if args.count is not None else args.credit
        receiver = await conn.open_receiver(args.address, credit=credit, source=source)
        printed: list[Delivery] = []  # written, not yet flushed: accepted once they are out

        async def flush() -> None:
            out.flush()
            await receiver.accept_all([p for p in printed if not p.settled])
            printed.clear()

        while args.count is None or got < args.count:
            try:
                d = await receiver.receive(timeout=idle)
            except errors.TimeoutError:
                timed_out = True
                break
            try:
                message = d.message
            except Exception as exc:  # undecodable: say so, refuse it, go on
                fail("receive", f"undecodable message skipped: {one_line(exc)}")
                if not d.remote_settled:
                    await d.reject()
                continue
            _write(out, message, args.format)
            printed.append(d)
            got += 1
            bar.update(got)
            if receiver.buffered == 0 or len(printed) >= FLUSH_EVERY:
                await flush()
        await flush()
    bar.update(got, force=True)
    bar.finish()
    if timed_out and args.count is not None:
        raise CliError(
            f"timed out after {args.timeout:g}s without a message ({got} of {args.count} received)"
        )
    return 0


def _write(out: TextIO, message: Message, fmt: str) -> None:
    """Print one message (the caller flushes)."""
    if fmt == "json":
        out.write(json.dumps(message_to_json(message), ensure_ascii=False) + "\n")
    elif fmt == "raw":
        out.flush()
        out.buffer.write(_body_bytes(message))
    else:
        out.write(_body_text(message) + "\n")


def _body_bytes(message: Message) -> bytes:
    body = message.body
    if message.body_type == "data":
        return b"".join(bytes(b) for b in body or ())
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return b"" if body is None else json.dumps(_jsonable(body)).encode()


def _body_text(message: Message) -> str:
    body = message.body
    if message.body_type == "value" and isinstance(body, str):
        return body
    if message.body_type == "data" or isinstance(body, (bytes, bytearray, memoryview)):
        return _body_bytes(message).decode("utf-8", errors="backslashreplace")
    if body is None:
        return ""
    return json.dumps(_jsonable(body), ensure_ascii=False)


def message_to_json(message: Message) -> dict[str, JsonValue]:
    """A message as JSON-ready data: every section present, bytes as base64.

    ``body`` is the body (a data body, or a binary value, as base64 with
    ``"binary": true``); ``body_type`` is ``value``, ``data`` or ``sequence``.
    """
    doc: dict[str, JsonValue] = {}
    for name in ("header", "delivery_annotations", "message_annotations", "properties"):
        section = getattr(message, name)
        if section is not None:
            doc[name] = _jsonable(section)
    if message.application_properties is not None:
        doc["application_properties"] = _jsonable(message.application_properties)
    doc["body_type"] = message.body_type
    body = message.body
    if message.body_type == "data" or isinstance(body, (bytes, bytearray, memoryview)):
        doc["body"] = base64.b64encode(_body_bytes(message)).decode("ascii")
        doc["binary"] = True
    else:
        doc["body"] = _jsonable(body)
    if message.footer is not None:
        doc["footer"] = _jsonable(message.footer)
    return doc


def _jsonable(value: object, depth: int = 0) -> JsonValue:
    """Plain JSON values for AMQP ones (bounded depth: the codec bounds nesting anyway)."""
    from ..types import Array, Composite, Described

    if depth > 64:
        return "..."
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)  # symbol, char: plain strings
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (uuid.UUID, _dt.datetime)):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    if isinstance(value, dict):
        return {_key(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, Array)):
        items = value.elements if isinstance(value, Array) else value
        return [_jsonable(v, depth + 1) for v in items]
    if isinstance(value, Composite):
        fields = ((f.attr, getattr(value, f.attr)) for f in type(value).FIELDS)
        return {k: _jsonable(v, depth + 1) for k, v in fields if v is not None}
    if isinstance(value, Described):
        return {
            "descriptor": _jsonable(value.descriptor, depth + 1),
            "value": _jsonable(value.value, depth + 1),
        }
    return str(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (bytes, bytearray)):
        return base64.b64encode(bytes(key)).decode("ascii")
    return json.dumps(_jsonable(key)) if not isinstance(key, (int, float, bool)) else str(key)
