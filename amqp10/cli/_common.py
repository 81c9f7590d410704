"""What the ``amqp10`` commands share: their log lines and their one-line errors.

A person sees failures as one line on stderr, ``amqp10 COMMAND: what went
wrong``, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TypeAlias

__all__ = ["KeyValueFormatter", "Subparsers", "fail", "first_error", "log_to_stderr", "one_line"]

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``ArgumentParser.add_subparsers()`` returns: where each command adds its parser."""


class KeyValueFormatter(logging.Formatter):
    """Structured log lines: ``ts=... level=... logger=... msg="..."``, with ``fields``
    (e.g. ``worker=2``) after the level."""

    def __init__(self, **fields: object) -> None:
        super().__init__()
        self.fields = "".join(f" {k}={v}" for k, v in fields.items())

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        msg = record.getMessage().replace('"', "'")
        line = (
            f"ts={ts}.{int(record.msecs):03d}Z level={record.levelname.lower()}{self.fields} "
            f'logger={record.name} msg="{msg}"'
        )
        if record.exc_info:
            line += f' exc="{self.formatException(record.exc_info).splitlines()[-1]}"'
        return line


def log_to_stderr(formatter: logging.Formatter, level: int | str) -> None:
    """Send the ``amqp10`` loggers' records at ``level`` and above to stderr, and only there."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    log = logging.getLogger("amqp10")
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def fail(command: str, text: str) -> None:
    """Say on stderr, in one line, why ``amqp10 COMMAND`` failed."""
    print(f"amqp10 {command}: {text}", file=sys.stderr)


def one_line(exc: BaseException) -> str:
    """An exception's text on one line (its type's name if it has none)."""
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def bad_url(command: str, url: str) -> bool:
    """Whether ``url`` is not an AMQP URL; if so, say why on stderr in one line."""
    from ..client.url import parse_url

    try:
        parse_url(url)
    except ValueError as exc:
        fail(command, one_line(exc))
        return True
    return False


def first_error(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups; ``exc`` itself if none."""
    for _ in range(16):
        if not isinstance(exc, BaseExceptionGroup) or not exc.exceptions:
            break
        exc = exc.exceptions[0]
    return exc
