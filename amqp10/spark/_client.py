"""A blocking connection for Spark's driver and tasks, with batch-sized operations.

Spark calls the data source from plain threads. :class:`BrokerClient` runs the
async client (:mod:`amqp10.client`) in an event loop thread (anyio's blocking
portal, as :mod:`amqp10.sync` does) and offers what the connector needs as
whole operations, one portal round trip each: read a chunk of a stream, drain
a queue into a batch, accept a batch, publish a list of messages and wait for
every outcome. Per-message round trips through the portal would cost more than
the AMQP work.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar, TypeVarTuple, Unpack

import anyio
import anyio.from_thread

from .. import errors
from ..client import Connection, Delivery, Outcome, Receiver, Sender, SettleMode, connect
from ..message import LazyMessage, Message
from ..types import Accepted, Released, Source, Target, symbol, timestamp
from .offsets import StreamInfo, address_of
from .options import ConnectKwargs, SourceOptions, StartSpec
from .rows import message_offset, open_message

__all__ = [
    "MANAGEMENT_ADDRESS",
    "STREAM_CAPABILITY",
    "STREAM_OFFSET_FILTER",
    "BrokerClient",
    "DataLossError",
    "StreamInfo",
    "connect_failure",
    "link_refusal",
    "read_range",
]

log = logging.getLogger("amqp10.spark")

MANAGEMENT_ADDRESS = "$management"
STREAM_OFFSET_FILTER = symbol("amqp10:stream-offset")
STREAM_CAPABILITY = symbol("stream")


CHUNK = 5000
"""Credit granted per round: a chunk of messages in flight per receiver (two, with the prefetch)."""

_T = TypeVar("_T")
_Args = TypeVarTuple("_Args")


@contextlib.asynccontextmanager
async def _connected(url: str, kwargs: ConnectKwargs) -> AsyncIterator[Connection]:
    async with await connect(url, **kwargs) as conn:
        yield conn


class BrokerClient:
    """One connection to the broker, usable from any thread; close it (or use ``with``)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.timeout = options.timeout
        kwargs = options.connect_kwargs()
        kwargs["max_buffered"] = 4 * CHUNK  # two chunks in flight per receiver, with room
        self._stack = contextlib.ExitStack()
        try:
            self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
            self._conn: Connection = self._stack.enter_context(
                self._portal.wrap_async_context_manager(_connected(options.url, kwargs))
            )
        except errors.AMQPError as exc:
            self._stack.close()
            raise connect_failure(exc, options) from None
        except BaseException:
            self._stack.close()
            raise
        self._senders: dict[tuple[str, bool], Sender] = {}

    def close(self) -> None:
        """Close the connection: unsettled deliveries go back to their queue."""
        self._stack.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def call(self, fn: Callable[[Unpack[_Args]], Awaitable[_T]], *args: *_Args) -> _T:
        """Run ``fn(*args)`` in the event loop thread; its result (or what it raised)."""
        return self._portal.call(fn, *args)

    # -- streams --------------------------------------------------------------------------
    def stream_info(self, address: str) -> StreamInfo | None:
        """The stream's offsets, or None if ``address`` is not a stream (or does not exist)."""
        request = Message(application_properties={"operation": "stream-info", "address": address})
        reply = self.call(self._request, request)
        status = (reply.application_properties or {}).get("status-code", 200)
        body = reply.body
        if status != 200 or not isinstance(body, dict):
            return None
        return {str(k): int(v) for k, v in body.items()}

    def stream_infos(self, address: str) -> list[StreamInfo] | None:
        """The stream-info of each partition of the stream at ``address`` (one, if it is not
        partitioned); None if ``address`` is not a stream."""
        info = self.stream_info(address)
        if info is None:
            return None
        n = info.get("partitions", 1)
        if n == 1:
            return [info]
        empty: StreamInfo = {"first": 0, "next": 0, "count": 0, "bytes": 0}
        return [self.stream_info(address_of(address, k, n)) or dict(empty) for k in range(n)]

    async def _request(self, request: Message) -> Message:
        return await self._conn.request(MANAGEMENT_ADDRESS, request, timeout=self.timeout)

    def open_stream(self, address: str, start: StartSpec) -> Receiver:
        """A receiver reading ``address`` as a stream from ``start``; it grants credit only when asked."""
        source = Source(
            address=address,
            filter={STREAM_OFFSET_FILTER: start},
            capabilities=[STREAM_CAPABILITY],
        )
        return self.call(self._open_receiver, source, SettleMode.AT_MOST_ONCE)

    def offset_at(self, address: str, ms: int, info: StreamInfo) -> int:
        """The offset of the first message of stream ``address`` stored at or after ``ms``.

        The stream's next offset if there is none (``info``: its stream-info).
        """
        receiver = self.open_stream(address, timestamp(ms))
        try:
            got = self.drain(receiver, 1)
        finally:
            self.close_link(receiver)
        offset = message_offset(LazyMessage(got[0].payload)) if got else None
        return info["next"] if offset is None else offset

    def open_queue(self, address: str, *, browse: bool = False) -> Receiver:
        """A receiver taking (or, with ``browse``, copying) from a queue; no credit until asked."""
        source = Source(address=address, distribution_mode=symbol("copy") if browse else None)
        mode = SettleMode.AT_MOST_ONCE if browse else SettleMode.AT_LEAST_ONCE
        return self.call(self._open_receiver, source, mode)

    async def _open_receiver(self, source: Source, mode: SettleMode) -> Receiver:
        try:
            return await self._conn.open_receiver(
                source.address, source=source, credit=0, settle_mode=mode, timeout=self.timeout
            )
        except errors.LinkError as exc:
            raise link_refusal(exc, self.options, str(source.address), "read") from None

    def fetch(self, receiver: Receiver, want: int, prefetch: int) -> list[bytes]:
        """Receive ``want`` messages that are known to exist (a stream range), then grant ``prefetch``.

        Returns fewer only if the broker sends nothing for ``timeout`` seconds.
        """
        return self.call(self._fetch, receiver, want, prefetch)

    async def _fetch(self, receiver: Receiver, want: int, prefetch: int) -> list[bytes]:
        missing = want - receiver.credit - receiver.buffered
        if missing > 0:
            receiver.add_credit(missing)
        out: list[bytes] = []
        while len(out) < want:
            # whatever has arrived, in one go: no wait, timer or wake-up per message
            # (streams ignore outcomes: any unsettled message is simply accepted)
            got = await receiver.fetch_payloads(want - len(out), timeout=self.timeout)
            if not got:
                break  # nothing for ``timeout`` seconds
            out += got
        if prefetch > 0:
            receiver.add_credit(prefetch)
        return out

    def drain(self, receiver: Receiver, most: int) -> list[Delivery]:
        """Whatever ``receiver``'s node has now, up to ``most`` messages (not settled)."""
        return self.call(self._drain, receiver, most)

    async def _drain(self, receiver: Receiver, most: int) -> list[Delivery]:
        out: list[Delivery] = []
        while len(out) < most:
            n = min(CHUNK, most - len(out))
            receiver.add_credit(n)
            await receiver.drain(timeout=self.timeout)
            before = len(out)
            if receiver.buffered:
                out += await receiver.fetch(receiver.buffered)
            if len(out) - before < n:
                break
        return out

    def settle(self, deliveries: Sequence[Delivery], *, accept: bool = True) -> None:
        """Accept (or release) ``deliveries`` in one go."""
        if deliveries:
            self.call(self._settle, list(deliveries), accept)

    async def _settle(self, deliveries: list[Delivery], accept: bool) -> None:
        pending = [d for d in deliveries if not d.settled]
        if pending:
            await pending[0].receiver.settle_all(pending, Accepted() if accept else Released())

    def close_link(self, link: Receiver | Sender) -> None:
        try:
            self.call(self._close_link, link)
        except errors.AMQPError as exc:
            log.debug("closing %r: %s", link, exc)

    async def _close_link(self, link: Receiver | Sender) -> None:
        await link.close(timeout=self.timeout)

    # -- publishing -----------------------------------------------------------------------
    def publish(
        self, address: str, payloads: Sequence[bytes], *, stream: bool = False, window: int = 500
    ) -> None:
        """Send encoded messages and wait until the broker accepted every one (at least once).

        Up to ``window`` messages are unsettled at a time. Raises
        :class:`~amqp10.errors.DeliveryError` if any is rejected or released.
        """
        if payloads:
            self.call(self._publish, address, list(payloads), stream, window)

    def publish_soon(
        self, address: str, payloads: Sequence[bytes], *, stream: bool = False, window: int = 2000
    ) -> Future[None]:
        """:meth:`publish` started in the event loop; the future's result is its outcome.

        The caller may prepare the next batch meanwhile; wait for one before
        starting the next, so that messages keep their order.
        """
        return self._portal.start_task_soon(self._publish, address, list(payloads), stream, window)

    async def _sender(self, address: str, stream: bool) -> Sender:
        key = (address, stream)
        sender = self._senders.get(key)
        if sender is None or not sender.is_open:
            target = Target(address=address, capabilities=[STREAM_CAPABILITY] if stream else None)
            try:
                sender = await self._conn.open_sender(
                    address,
                    settle_mode=SettleMode.AT_LEAST_ONCE,
                    target=target,
                    timeout=self.timeout,
                )
            except errors.LinkError as exc:
                raise link_refusal(exc, self.options, address, "write") from None
            self._senders[key] = sender
        return sender

    async def _publish(
        self, address: str, payloads: list[bytes], stream: bool, window: int
    ) -> None:
        sender = await self._sender(address, stream)
        failed: list[Outcome | None] = []

        def until_refused() -> Iterator[bytes]:
            for payload in payloads:
                if failed:
                    return  # stop sending; the outcomes of those in flight still count
                yield payload

        async with contextlib.aclosing(
            sender.pipeline(until_refused(), window=window, settled=False, timeout=self.timeout)
        ) as outcomes:
            async for outcome in outcomes:
                if not isinstance(outcome, Accepted):
                    failed.append(outcome)
        if failed:
            raise errors.DeliveryError(
                f"{len(failed)} message(s) to {address!r} were not accepted: {failed[0]!r}",
                outcome=failed[0],
            )


def connect_failure(exc: errors.AMQPError, options: SourceOptions) -> errors.AMQPError:
    """``exc`` (connecting failed) as one line that names the option to fix."""
    where = options.safe_url
    if isinstance(exc, errors.AuthenticationError):
        return errors.AuthenticationError(
            f"the broker at {where} refused the login (wrong user name or password, or a SASL "
            "mechanism it does not offer): check options 'user' and 'password' (or the "
            "credentials in 'url')",
            condition=exc.condition,
        )
    if isinstance(exc, errors.TLSError):
        return errors.TLSError(
            f"TLS with the broker at {where} failed ({exc}): check options 'ca', 'cert', 'key'",
            condition=exc.condition,
        )
    if isinstance(exc, errors.ConnectionError):
        return errors.ConnectError(
            f"cannot reach the broker at {where} ({exc}): is it running there? check option 'url'",
            condition=exc.condition,
        )
    return exc


def link_refusal(
    exc: errors.LinkError, options: SourceOptions, address: str, verb: str
) -> errors.LinkError:
    """The broker refused a link to ``address``: one line that names the option to fix."""
    where = options.safe_url
    if exc.condition == "amqp:not-found":
        text = (
            f"there is no node {address!r} on the broker at {where}: check option 'address' "
            "(or create the node first)"
        )
    elif exc.condition == "amqp:unauthorized-access":
        text = (
            f"the broker at {where} does not let this user {verb} {address!r}: check option "
            "'user', or the broker's permissions"
        )
    else:
        text = f"the broker at {where} refused to let us {verb} {address!r}: {exc}"
    return errors.LinkError(text, condition=exc.condition, description=exc.description)


def read_range(
    client: BrokerClient,
    address: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
    open_item: Callable[[bytes], Any] = open_message,
    offset_of: Callable[[Any], int | None] = message_offset,
) -> Iterator[tuple[list[int], list[Any]]]:
    """Every message of stream ``address`` in ``[start, end)``, a chunk at a time.

    Yields ``(offsets, messages)``, each message as ``open_item`` opens it from
    its bytes (:func:`~.rows.open_message` by default), its stream offset read by
    ``offset_of``. Reads by offset filter with exactly ``end -
    start`` credit in total, so the broker never sends past the range; the next
    chunk's credit is granted before the current chunk is handed out, so the
    broker keeps sending while Spark converts. Offsets retention has dropped
    raise :class:`DataLossError` (``fail_on_data_loss``) or are skipped with a
    warning; a wait longer than the timeout raises.
    """

    def gone(a: int, b: int) -> int:
        return _gone(address, a, b, fail_on_data_loss)

    if end <= start:
        return
    receiver = client.open_stream(address, start)
    try:
        total = end - start
        want = granted = min(CHUNK, total)
        pos = start
        while pos < end and want > 0:
            prefetch = min(CHUNK, total - granted)
            try:
                batch = client.fetch(receiver, want, prefetch)
            except errors.ConnectionError as exc:
                raise errors.ConnectionError(
                    f"lost the broker at {client.options.safe_url} while reading stream "
                    f"{address!r} at offset {pos} of [{start}, {end}) ({exc}): this batch fails, "
                    "and reads the same offsets when Spark runs it again",
                    condition=exc.condition,
                ) from None
            granted += prefetch
            offsets: list[int] = []
            messages: list[Any] = []
            for payload in batch:
                message = open_item(payload)
                offset = offset_of(message)
                if offset is None:
                    raise errors.AMQPError(
                        f"stream {address!r} sent a message without x-opt-offset"
                    )
                if offset >= end:
                    pos = gone(pos, end)
                    break
                if offset > pos:
                    pos = gone(pos, offset)
                if offset >= pos:
                    offsets.append(offset)
                    messages.append(message)
                    pos = offset + 1
            if messages:
                yield offsets, messages
            if pos >= end:
                return
            if len(batch) < want:
                info = client.stream_info(address)
                if info is not None and info["first"] >= end:
                    gone(pos, end)
                    return
                raise errors.TimeoutError(
                    f"stream {address!r}: nothing received for {client.timeout:g}s at offset {pos} "
                    f"while reading [{start}, {end}) (stream info: {info})"
                )
            want = prefetch
        if pos < end:  # every credit used up, yet offsets missing at the end: retention
            gone(pos, end)
    finally:
        client.close_link(receiver)


class DataLossError(errors.AMQPError):
    """Offsets a read needs are no longer in the stream (``failOnDataLoss``)."""


def _gone(address: str, start: int, end: int, fail: bool) -> int:
    """Offsets ``[start, end)`` are gone: raise, or log and return the position after them."""
    if fail:
        raise DataLossError(
            f"stream {address!r}: offsets [{start}, {end}) are no longer retained (retention "
            "removed them); set option failOnDataLoss=false to skip them"
        )
    log.warning("stream %r: offsets [%d, %d) are no longer retained; skipped", address, start, end)
    return end
