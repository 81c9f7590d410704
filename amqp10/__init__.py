"""amqp10: a pure-Python AMQP 1.0 peer (library, broker, and interop tooling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

# The client API, imported on first use so that ``import amqp10`` stays cheap
# (and the engine, codec and broker can be used without anyio loaded).
_LAZY = {
    "connect": "amqp10.client",
    "serve": "amqp10.client",
    "listen": "amqp10.client",
    "SettleMode": "amqp10.client",
    "ReconnectPolicy": "amqp10.client",
}

if TYPE_CHECKING:
    from .client import ReconnectPolicy, SettleMode, connect, listen, serve


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'amqp10' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["ReconnectPolicy", "SettleMode", "__version__", "connect", "listen", "serve"]
