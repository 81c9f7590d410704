"""A consumer's source filter-set (Part 3 §3.5.8): which filters the broker applies, and how.

Known filters (by descriptor symbol or code):

- ``apache.org:selector-filter:string`` (0x0000468C:0x00000004): a JMS message selector;
- ``amqp:sql-filter`` (0x120): an OASIS "AMQP Filter Expressions" SQL expression;
- ``amqp:properties-filter`` (0x173), ``amqp:application-properties-filter`` (0x174):
  the OASIS property filters (a map of fields to reference values);
- ``apache.org:no-local-filter:list`` (0x0000468C:0x00000003): not the messages the
  consumer's own connection published;
- ``rabbitmq:stream-filter`` (a string or a list of strings), with
  ``rabbitmq:stream-match-unfiltered`` (a boolean): RabbitMQ's stream filtering, the
  messages whose ``x-stream-filter-value`` annotation is one of the values (and, if
  asked, those without one); exact here, where RabbitMQ's Bloom filter lets the
  client drop false positives.

Other entries are not applied, and are left out of the attach answer, so the
client can tell (§3.5.8). A known filter whose value is wrong refuses the
attach: :class:`FilterError` carries the description (for a selector, the column).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.message import QueuedMessage
from ..core.selector import SelectorError, compile_selector, match_properties
from .message import stream_filter_value

__all__ = ["FilterError", "both", "consumer_filters"]

Predicate = Callable[[QueuedMessage], bool]


def both(a: Predicate, b: Predicate) -> Predicate:
    """The messages both ``a`` and ``b`` see (a consumer's filters and its session, say)."""
    return lambda m: a(m) and b(m)


_SELECTOR, _SQL, _PROPERTIES, _APP_PROPERTIES, _NO_LOCAL = "selector", "sql", "p", "ap", "no-local"
_STREAM_FILTER, _MATCH_UNFILTERED = "stream-filter", "match-unfiltered"
_KINDS: dict[str | int, str] = {
    "apache.org:selector-filter:string": _SELECTOR,
    0x0000468C00000004: _SELECTOR,
    "amqp:sql-filter": _SQL,
    0x120: _SQL,
    "amqp:properties-filter": _PROPERTIES,
    0x173: _PROPERTIES,
    "amqp:application-properties-filter": _APP_PROPERTIES,
    0x174: _APP_PROPERTIES,
    "apache.org:no-local-filter:list": _NO_LOCAL,
    0x0000468C00000003: _NO_LOCAL,
    "rabbitmq:stream-filter": _STREAM_FILTER,
    "rabbitmq:stream-match-unfiltered": _MATCH_UNFILTERED,
}


class FilterError(ValueError):
    """A known filter whose value cannot be applied (the attach is refused: amqp:invalid-field)."""


def _kind_of(value: Any) -> str | None:
    descriptor = getattr(value, "descriptor", None)
    if isinstance(descriptor, str):
        return _KINDS.get(str(descriptor))
    if isinstance(descriptor, int):
        return _KINDS.get(int(descriptor))
    return None


def _compile(kind: str, value: Any) -> Predicate | None:
    if kind in (_SELECTOR, _SQL):
        if not isinstance(value, str):
            raise FilterError(f"a selector must be a string, not {type(value).__name__}")
        if not value.strip():
            return None  # JMS: an empty selector is no selector
        try:
            return compile_selector(value, "jms" if kind == _SELECTOR else "sql")
        except SelectorError as exc:
            raise FilterError(f"selector {value!r}: {exc}") from None
    if not isinstance(value, Mapping) or not value:
        raise FilterError("a properties filter must be a non-empty map")
    try:
        section = "properties" if kind == _PROPERTIES else "application-properties"
        return match_properties({str(k): v for k, v in value.items()}, section=section)
    except ValueError as exc:
        raise FilterError(str(exc)) from None


class ConsumerFilters:
    """What a consumer's filter-set asks for, as the broker applies it."""

    __slots__ = ("applied", "no_local", "predicates")

    def __init__(self) -> None:
        self.applied: dict[Any, Any] = {}
        """The filter-set entries applied (echoed in the attach answer), as the client sent them."""
        self.predicates: list[Predicate] = []
        self.no_local = False

    def predicate(self, connection: object) -> Predicate | None:
        """Every applied filter at once (None: no filter); no-local leaves out what
        ``connection`` published."""
        preds = list(self.predicates)
        if self.no_local:
            preds.append(lambda m: m.origin is not connection)
        if not preds:
            return None
        if len(preds) == 1:
            return preds[0]
        return lambda m: all(p(m) for p in preds)


def consumer_filters(filter_set: Mapping[Any, Any] | None) -> ConsumerFilters:
    """Read a source's filter-set; raises :class:`FilterError` for a known filter that is wrong."""
    out = ConsumerFilters()
    stream_values: frozenset[str] | None = None
    unfiltered = False
    for key, value in (filter_set or {}).items():
        kind = _kind_of(value)
        if kind is None:
            continue  # not ours (or the stream offset, which the stream reads itself)
        if kind == _NO_LOCAL:
            out.no_local = True
        elif kind == _STREAM_FILTER:
            stream_values = _filter_values(value.value)
        elif kind == _MATCH_UNFILTERED:
            unfiltered = value.value is True
        else:
            predicate = _compile(kind, value.value)
            if predicate is not None:
                out.predicates.append(predicate)
        out.applied[key] = value
    if stream_values is not None:
        out.predicates.append(_by_filter_value(stream_values, unfiltered))
    return out


def _filter_values(value: Any) -> frozenset[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise FilterError("rabbitmq:stream-filter must be a string or a list of strings")
    return frozenset(values)


def _by_filter_value(values: frozenset[str], unfiltered: bool) -> Predicate:
    def matches(m: QueuedMessage) -> bool:
        v = stream_filter_value(m)
        return unfiltered if v is None else v in values

    return matches
