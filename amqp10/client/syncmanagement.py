"""The blocking :class:`Management` (``amqp10.sync.connect(...).management()``): each call
runs the async one (:mod:`.management`) in the connection's event loop and returns what
it returns, raises what it raises. No logic of its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

from ..management import ExchangeInfo, QueueInfo
from . import management as _management
from .syncloop import Loop

__all__ = ["Management"]

T = TypeVar("T")


class Management:
    """Queues, exchanges and bindings on the peer (see :class:`amqp10.client.Management`);
    use as ``with`` to detach its links at the end."""

    __slots__ = ("_loop", "_m")

    def __init__(self, loop: Loop, management: _management.Management) -> None:
        self._loop = loop
        self._m = management

    def __repr__(self) -> str:
        return repr(self._m)

    @property
    def protocol(self) -> str:
        """``rabbitmq`` or ``oasis``."""
        return self._m.protocol

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        result: T = self._loop.call(partial(fn, *args, **kwargs))
        return result

    def declare_queue(
        self,
        name: str,
        *,
        type: str | None = None,
        durable: bool = True,
        auto_delete: bool = False,
        exclusive: bool = False,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> QueueInfo:
        return self._run(
            self._m.declare_queue, name, type=type, durable=durable, auto_delete=auto_delete,
            exclusive=exclusive, arguments=arguments, timeout=timeout,
        )  # fmt: skip

    def delete_queue(
        self, name: str, *, if_unused: bool = False, if_empty: bool = False, timeout: float | None = None
    ) -> int:
        return self._run(self._m.delete_queue, name, if_unused=if_unused, if_empty=if_empty, timeout=timeout)

    def purge_queue(self, name: str, *, timeout: float | None = None) -> int:
        return self._run(self._m.purge_queue, name, timeout=timeout)

    def queue_info(self, name: str, *, timeout: float | None = None) -> QueueInfo:
        return self._run(self._m.queue_info, name, timeout=timeout)

    def list_queues(self, *, timeout: float | None = None) -> list[QueueInfo]:
        return self._run(self._m.list_queues, timeout=timeout)

    def declare_exchange(
        self,
        name: str,
        type: str = "direct",
        *,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        self._run(
            self._m.declare_exchange, name, type, durable=durable, auto_delete=auto_delete,
            internal=internal, arguments=arguments, timeout=timeout,
        )  # fmt: skip

    def delete_exchange(self, name: str, *, timeout: float | None = None) -> None:
        self._run(self._m.delete_exchange, name, timeout=timeout)

    def list_exchanges(self, *, timeout: float | None = None) -> list[ExchangeInfo]:
        return self._run(self._m.list_exchanges, timeout=timeout)

    def bind(
        self,
        source: str,
        *,
        destination_queue: str | None = None,
        destination_exchange: str | None = None,
        binding_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        self._run(
            self._m.bind, source, destination_queue=destination_queue, destination_exchange=destination_exchange,
            binding_key=binding_key, arguments=arguments, timeout=timeout,
        )  # fmt: skip

    def unbind(
        self,
        source: str,
        *,
        destination_queue: str | None = None,
        destination_exchange: str | None = None,
        binding_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        self._run(
            self._m.unbind, source, destination_queue=destination_queue, destination_exchange=destination_exchange,
            binding_key=binding_key, arguments=arguments, timeout=timeout,
        )  # fmt: skip

    def close(self, *, timeout: float | None = None) -> None:
        self._run(self._m.close, timeout=timeout)

    def __enter__(self) -> Management:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
