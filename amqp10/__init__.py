"""amqp10: a pure-Python AMQP 1.0 peer (library, broker, and interop tooling)."""

from __future__ import annotations

__version__ = "0.1.0"
