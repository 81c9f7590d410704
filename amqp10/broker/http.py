"""The broker's HTTP listener: AMQP over WebSockets and the health endpoints.

One listener (config ``[http]``) serves everything a browser, a load balancer
or a firewall-bound client needs. The routes are one table,
:func:`broker_routes`:

- ``/$amqp`` and ``/``: the WebSocket upgrade (subprotocol ``amqp``); the
  upgraded stream goes to the same per-connection handler as a TCP connection,
  so SASL, limits and everything after are the same;
- ``/healthz``: 200 while the process serves;
- ``/readyz``: 200 when the listeners are bound and the store is open, else 503
  with the reason;
- ``/metrics``: Prometheus metrics in the text format (:mod:`.metrics`), unless
  ``[http] metrics = false``;
- ``/console`` and ``/console/api/...``: the web console (:mod:`.console`, added by
  the service), unless ``[http] console = false``; with it ``/api/...``, RabbitMQ's
  HTTP API (:mod:`.rabbitmq_api`), unless ``[http] rabbitmq_api = false``.

With ``[http] rabbitmq_api_port`` (RabbitMQ's 15672) the same routes are served on that
port too, without TLS unless the listener has it.

Everything else is 404 as JSON.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from ..io.http import HttpRequest, HttpResponse, HttpServer, Route, WebSocketHandler
from ..io.net import Listener
from ..io.tls import server_context
from .config import BrokerConfig
from .metrics import CONTENT_TYPE

__all__ = ["AMQP_WEBSOCKET_PATHS", "Listen", "broker_routes", "start_http"]

log = logging.getLogger("amqp10.broker")

MAX_BODY = 16 * 1024 * 1024
"""Bytes one request body may carry (a definitions import is the biggest)."""

AMQP_WEBSOCKET_PATHS = ("/$amqp", "/", "/$servicebus/websocket")
"""Where AMQP over WebSockets is served (``/`` for clients that do not name a path;
``/$servicebus/websocket``: where the Azure SDKs connect)."""


def broker_routes(
    *,
    amqp: WebSocketHandler,
    not_ready: Callable[[], str | None],
    metrics: Callable[[], Awaitable[bytes]] | None = None,
) -> dict[str, Route]:
    """The route table: ``amqp`` takes upgraded connections, ``not_ready()`` says why not
    ready, ``metrics()`` writes the Prometheus text (None: no ``/metrics``)."""

    async def healthz(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(200, {"status": "ok"})

    async def readyz(request: HttpRequest) -> HttpResponse:
        reason = not_ready()
        if reason is not None:
            return HttpResponse.json(503, {"status": "not ready", "reason": reason})
        return HttpResponse.json(200, {"status": "ready"})

    routes = {path: Route(websocket=amqp) for path in AMQP_WEBSOCKET_PATHS}
    routes["/healthz"] = Route(get=healthz)
    routes["/readyz"] = Route(get=readyz)
    if metrics is not None:
        scrape = metrics

        async def metrics_page(request: HttpRequest) -> HttpResponse:
            return HttpResponse(200, await scrape(), content_type=CONTENT_TYPE)

        routes["/metrics"] = Route(get=metrics_page)
    return routes


Listen = Callable[[str, str, int, "ssl.SSLContext | None"], Awaitable[Listener]]
"""How a listener is got: ``listen(name, host, port, ssl_context)``; ``name`` is one of
:func:`amqp10.broker.service.listen_points`' names (``http``, ``rabbitmq_api``, ``amqp0``...)."""


async def start_http(
    config: BrokerConfig,
    routes: dict[str, Route],
    task_group: TaskGroup,
    connections: TaskGroup,
    *,
    listen: Listen,
) -> Listener:
    """Get the HTTP listener of ``config.http`` from ``listen`` and serve ``routes`` on it.

    ``listen`` is the service's: it binds, or wraps a worker's inherited sockets.

    The accept loop runs in ``task_group``, each connection in ``connections``.
    Raises :class:`~amqp10.errors.ConnectError` if the address is unusable.
    """
    http = config.http
    ctx = server_context(http.tls_cert, http.tls_key) if http.tls_cert is not None else None
    listener = await listen("http", http.host, config.http_port, ctx)
    timeout = config.limits.handshake_timeout
    server = HttpServer(
        routes,
        request_timeout=timeout,
        max_ws_message_size=http.max_ws_message_size,
        max_connections=config.limits.max_connections,
        max_body=MAX_BODY,
    )
    scheme = "wss" if ctx else "ws"
    log.info(
        "HTTP on %s%s: AMQP over WebSockets at %s://%s/$amqp, %s",
        listener.address,
        " (TLS)" if ctx else "",
        scheme,
        listener.address,
        ", ".join(p for p in routes if p not in AMQP_WEBSOCKET_PATHS and p.count("/") == 1),
    )
    task_group.start_soon(_serve, listener, server, connections, timeout)
    if http.rabbitmq_api_port is not None:
        extra = await listen("rabbitmq_api", http.host, http.rabbitmq_api_port, ctx)
        log.info("HTTP also on %s (rabbitmq_api_port): the console and /api/", extra.address)
        task_group.start_soon(_serve_until_cancelled, extra, server, connections, timeout)
    return listener


async def _serve(
    listener: Listener, server: HttpServer, connections: TaskGroup, timeout: float
) -> None:
    await listener.serve(server.handle, connections, handshake_timeout=timeout)


async def _serve_until_cancelled(
    listener: Listener, server: HttpServer, connections: TaskGroup, timeout: float
) -> None:
    """Serve a listener the service does not know of: it closes when its task ends."""
    try:
        await _serve(listener, server, connections, timeout)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await listener.aclose()
