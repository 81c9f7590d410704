"""Opening connections: :func:`connect` (from URLs) and :func:`connect_with` (from options).

Each target is dialled (:func:`~amqp10.client.dial.dial`) and opened within
its time limit; a list of targets, or a reconnect policy, is tried in turn as
the policy allows. The :class:`~amqp10.client.Connection` returned keeps the
targets and policy, to re-make itself after a drop.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl as _ssl
import uuid
from collections.abc import Sequence
from typing import Any

import anyio

from .. import errors
from ..io.net import peer_name
from ._common import DEFAULT_TIMEOUT
from .azure import is_connection_string, parse_connection_string
from .claims import Claims, connection_string_claims
from .connection import Connection
from .dial import ConnectOptions, ProtocolFactory, client_protocol, dial, ssl_context
from .reconnect import ReconnectPolicy, Schedule, once_each
from .url import parse_url

__all__ = ["connect", "connect_with"]

log = logging.getLogger("amqp10.client")


async def connect(
    url: str | Sequence[str] = "amqp://127.0.0.1",
    *,
    container_id: str | None = None,
    hostname: str | None = None,
    idle_timeout: float | None = None,
    ssl: _ssl.SSLContext | bool | None = None,
    sasl: bool = True,
    sasl_mechanisms: list[str] | tuple[str, ...] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_frame_size: int = 65536,
    channel_max: int = 65535,
    properties: dict[Any, Any] | None = None,
    max_buffered: int = 1000,
    reconnect: ReconnectPolicy | bool | None = None,
    claims: Claims | None = None,
    websocket: bool = False,
) -> Connection:
    """Connect, open the AMQP connection, and return it (use with ``async with``).

    ``url``: ``amqp://[user:pass@]host[:port]`` or ``amqps://`` (TLS, port
    5671); ``ws://host[:port]/path`` or ``wss://`` for AMQP over WebSockets
    (the path is the HTTP resource, e.g. ``/$amqp``); or a list of them: tried in turn (once each, or as ``reconnect``
    says). ``ssl``: an ``ssl.SSLContext`` (client certificates, private CAs),
    True for the system defaults, or None to follow the scheme; host names are
    verified unless the context says otherwise. SASL: ANONYMOUS without
    credentials, else SCRAM or PLAIN with the URL's user and password
    (``sasl_mechanisms`` lists the ones to use, in order, e.g. ``["EXTERNAL"]``
    with a TLS client certificate); ``sasl=False`` speaks plain AMQP to peers
    without SASL. ``idle_timeout``: seconds of
    silence after which we drop the peer (and ask it to keep us alive).
    ``timeout``: bound on connecting, and the default for every later wait.
    ``max_buffered``: deliveries held for the application across receivers
    before the connection stops reading (back-pressure).

    ``reconnect``: a :class:`~amqp10.client.reconnect.ReconnectPolicy` (True:
    the default one). The first connect retries as the policy says, and a
    dropped connection is re-made: sessions begun again, links re-attached
    under their names (same container-id), unsettled sends resumed or sent
    again (at least once). Calls made meanwhile wait, within their timeouts.

    ``claims``: claims-based security (:class:`~amqp10.client.claims.Claims`): each
    link first puts a token for its entity on ``$cbs``, renewed before it expires.
    ``url`` may also be an Azure connection string
    (``Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=...``,
    see :mod:`amqp10.client.azure`): it connects to ``amqps://NAMESPACE`` (with
    ``websocket=True``: ``wss://NAMESPACE:443/$servicebus/websocket``; the emulator's:
    plain ``amqp://`` on its port) and puts SAS tokens signed with its key.

    Raises :class:`~amqp10.errors.ConnectError`, :class:`~amqp10.errors.TLSError`,
    :class:`~amqp10.errors.AuthenticationError`, :class:`~amqp10.errors.ConnectionError`
    or :class:`~amqp10.errors.TimeoutError`; :class:`~amqp10.errors.ReconnectError`
    when a list of URLs or a policy's attempts are used up.
    """
    urls = [url] if isinstance(url, str) else list(url)
    if not urls:
        raise ValueError("connect() needs at least one URL")
    if isinstance(url, str) and is_connection_string(url):
        cs = parse_connection_string(url)
        urls = [cs.url(websocket=websocket)]
        hostname = hostname or cs.host
        claims = claims or connection_string_claims(cs)
    elif websocket:
        raise ValueError("websocket=True is for Azure connection strings; a URL says ws:// or wss:// itself")
    cid = container_id or f"amqp10-{uuid.uuid4()}"
    targets = []
    for one in urls:
        u = parse_url(one)
        targets.append(
            ConnectOptions(
                url=u,
                container_id=cid,
                hostname=hostname or u.vhost or u.host,
                idle_timeout=idle_timeout,
                ssl_context=ssl_context(ssl, u),
                sasl_mechanisms=tuple(sasl_mechanisms) if sasl_mechanisms else None,
                sasl=sasl,
                timeout=timeout,
                max_frame_size=max_frame_size,
                channel_max=channel_max,
                properties=properties,
                max_buffered=max_buffered,
            )
        )
    policy = ReconnectPolicy() if reconnect is True else (reconnect or None)
    conn = await connect_with(targets, reconnect=policy)
    if claims is not None:
        if claims.resource is None:
            claims = dataclasses.replace(claims, resource=f"sb://{targets[0].url.host}")
        conn.use_claims(claims)
    return conn


async def connect_with(
    options: ConnectOptions | Sequence[ConnectOptions],
    protocol_factory: ProtocolFactory | None = None,
    *,
    reconnect: ReconnectPolicy | None = None,
) -> Connection:
    """:func:`connect` from prepared options (one per URL, all with the same container-id).

    Without ``reconnect`` a single target is tried once and its failure raised
    as it is; several are tried once each, in order.
    """
    targets = (options,) if isinstance(options, ConnectOptions) else tuple(options)
    if not targets:
        raise ValueError("connect_with() needs at least one ConnectOptions")
    if len({t.container_id for t in targets}) != 1:
        raise ValueError("every target of one connection must use the same container_id")
    factory = protocol_factory or client_protocol
    first = reconnect if reconnect is not None else once_each(len(targets))
    if reconnect is None and len(targets) == 1:
        conn = await _connect_once(targets[0], factory, targets[0].timeout)
        index = 0
    else:
        conn, index = await _connect_any(targets, factory, first)
    conn._policy = reconnect
    conn._targets = targets
    conn._target = index
    conn._factory = factory
    return conn


async def _connect_any(
    targets: tuple[ConnectOptions, ...], factory: ProtocolFactory, policy: ReconnectPolicy
) -> tuple[Connection, int]:
    """The first connect, tried on each target in turn, as ``policy`` allows."""
    schedule = Schedule(policy, len(targets), 0, anyio.current_time())
    while True:
        step = schedule.next(anyio.current_time())
        if step is None:
            break
        delay, index = step
        if delay:
            await anyio.sleep(delay)
        opts = targets[index]
        limit = max(min(opts.timeout, schedule.remaining(anyio.current_time())), 0.001)
        try:
            return await _connect_once(opts, factory, limit), index
        except errors.AMQPError as exc:
            schedule.last_error = exc
            if not policy.retryable(exc):
                raise
            log.info("connect attempt %d failed: %s", schedule.attempts, exc)
    elapsed = anyio.current_time() - schedule.started
    last = schedule.last_error
    names = ", ".join(peer_name(t.url.host, t.url.port) for t in targets)
    n = schedule.attempts
    raise errors.ReconnectError(
        f"gave up connecting to {names} after {n} attempt{'s' if n != 1 else ''} "
        f"in {elapsed:.1f}s; last error: {last}",
        attempts=n,
        elapsed=elapsed,
        last_error=last,
    ) from last


async def _connect_once(
    options: ConnectOptions, factory: ProtocolFactory, limit: float
) -> Connection:
    """Connect to one target and wait for the open, within ``limit`` seconds."""
    u = options.url
    started = anyio.current_time()
    engine, protocol, stream = await dial(options, factory, limit)
    conn = Connection(
        engine,
        stream,
        peer=peer_name(u.host, u.port),
        protocol=protocol,
        timeout=options.timeout,
        max_buffered=options.max_buffered,
    )
    engine.open()
    tg = anyio.create_task_group()
    await tg.__aenter__()
    try:
        tg.start_soon(conn._run)
        remaining = max(limit - (anyio.current_time() - started), 0.0)
        await conn._wait_open(remaining, limit)
    except BaseException as exc:
        await conn._settle_failure(exc)
        await tg.__aexit__(None, None, None)
        await conn._driver.close_if_unused()
        raise
    conn._tg = tg
    return conn
