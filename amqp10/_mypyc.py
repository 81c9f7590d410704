"""``mypyc_attr`` for the opt-in compiled build (setup.py's ``COMPILED``), free in the pure one.

mypyc reads ``@mypyc_attr(allow_interpreted_subclasses=True)`` on a compiled class whose
subclasses stay interpreted (a compiled class without it refuses them, and calls its own
methods rather than their overrides). mypy_extensions comes with mypy, which the pure
install does not need: at run time the decorator is a no-op of our own.

This module itself stays interpreted (it is not in ``COMPILED``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*attrs: Any, **kwattrs: Any) -> Any:
        return lambda cls: cls


class Referable:
    """An interpreted base for a compiled class whose instances are weakly referenced
    (a queue, a ``WeakKeyDictionary`` key of the Service Bus front end's; a virtual host,
    the 1.0 front end's wildcard subscriptions' key): a compiled
    class has no ``__weakref__`` slot unless it derives from an interpreted class."""


__all__ = ["Referable", "mypyc_attr"]
