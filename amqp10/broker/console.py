"""The web console: static pages from package data and a small JSON API over management.

``/console`` serves ``index.html``, ``app.js`` and ``app.css`` from
``amqp10/broker/static/console`` (plain files: no build step, nothing loaded from
the network; the Content-Security-Policy allows this origin only). The page
talks to ``/console/api/...``:

- ``POST login`` (``{"username", "password"}``): the password is checked by the
  SASL PLAIN mechanism against the users file, with the same back-off after failed
  logins as AMQP logins (:mod:`.guard`); or, with ``[oauth2]``, ``{"token"}``: an OAuth
  2 token (JWT), its ``tag:`` scopes the user's tags and its other scopes the
  permissions, the session ending when the token expires (RabbitMQ's management UI
  logs in with a token too). The user needs one of ``[management] admin_tags``. The answer sets a session cookie (``HttpOnly``, ``SameSite=Strict``,
  path ``/console``) and returns a CSRF token;
- ``GET session``, ``GET overview`` (broker totals, nodes, connections), ``GET node``
  and ``GET peek`` (``?vhost=&type=&name=``, optionally ``&count=&offset=``): reading
  needs the cookie;
- ``POST purge``, ``POST delete``, ``POST close-connection``, ``POST logout``: changing
  state also needs the ``X-CSRF-Token`` header of the session, a JSON body and, when
  the browser sends one, an ``Origin`` of this host.
- ``rmq/PATH`` (any method): RabbitMQ's HTTP API ``/api/PATH`` (:mod:`.rabbitmq_api`)
  as the session's user, for the pages beside Overview and Connections (queues with
  publish and get, exchanges and bindings, virtual hosts, users and permissions,
  policies, definitions download and upload); reading needs the cookie, changing the
  CSRF token and origin as above.

On a broker without a users file that allows anonymous connections, ``GET session``
from a loopback address opens a session for the guest (the anonymous caller, who may do
everything there) without a login, as RabbitMQ's ``guest`` works only from localhost
(:mod:`.http_login`); ``POST login`` still answers 503 there.

Every action is a call of :class:`~amqp10.broker.management.Management`, the
operations ``$management`` runs: the console has no logic of its own. Errors are
``{"error": reason}`` with the management status (400, 401, 403, 404, 409), never a
stack trace.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from ..io.http import HttpRequest, HttpResponse, Route
from ..sasl.credentials import CredentialStore
from .core import Broker
from .guard import ConnectionGuard, source_of
from .http_login import GUEST, HttpLogin
from .management import (
    Caller,
    Management,
    ManagementError,
    delete_node,
    peek_node,
    purge_node,
    read_node,
)
from .oauth import TokenGrant, TokenValidator
from .rabbitmq_api import API_METHODS, RabbitApi

__all__ = ["COOKIE", "Console", "console_routes"]

log = logging.getLogger("amqp10.broker.console")

COOKIE = "amqp10_console"
CSRF_HEADER = "x-csrf-token"
MAX_SESSIONS = 1000
PEEK_DEFAULT = 10
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = (
    (
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
)
RABBIT_PREFIX = "/console/api/rmq/"
"""Where the console's pages reach RabbitMQ's HTTP API (as the session's user)."""
NODE_TYPES = ("queue", "stream", "subscription")
"""The entity types the console lists as nodes (what has a depth)."""


@dataclass
class _Session:
    user: str | None
    """The user logged in; None: the loopback guest of a broker without a users file."""
    csrf: str
    last_used: float
    grant: TokenGrant | None = None
    """What the OAuth 2 token the session logged in with allows (None: a password login)."""

    @property
    def caller(self) -> Caller:
        """Who the session's requests come from, for management."""
        return Caller(user=self.user, grant=self.grant)


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Console:
    """Console sessions and the API's handlers, for one broker.

    ``users()`` is the credential store of the users file (None: no users file, so
    nobody can log in); ``secure``: the listener is TLS (cookies get ``Secure``);
    ``tokens`` checks OAuth 2 tokens (None: ``[oauth2]`` is not set: no token logins).
    """

    def __init__(
        self,
        broker: Broker,
        users: Callable[[], CredentialStore | None],
        guard: ConnectionGuard,
        *,
        session_seconds: float = 1800.0,
        secure: bool = False,
        clock: Callable[[], float] = time.monotonic,
        tokens: TokenValidator | None = None,
    ) -> None:
        self.broker = broker
        self.management = Management.of(broker)
        self.users = users
        self.guard = guard
        self.login_rules = HttpLogin(
            users, guard, allow_anonymous=broker.config.sasl.allow_anonymous, tokens=tokens
        )
        """Who gets in (shared with RabbitMQ's HTTP API): see :mod:`.http_login`."""
        self.rabbit = RabbitApi(broker, self.login_rules)
        """RabbitMQ's HTTP API: the pages beside Overview and Connections call it through
        ``/console/api/rmq/...`` with the session's user."""
        self.session_seconds = session_seconds
        self.secure = secure
        self.clock = clock
        self._sessions: dict[str, _Session] = {}

    # -- sessions -----------------------------------------------------------------------
    async def login(self, username: str, password: str, peer: str) -> tuple[str, _Session]:
        """Check the password as SASL PLAIN does and the admin tag; a new session."""
        if not self.login_rules.has_users:
            raise _Refused(503, "the console needs a users file ([sasl] users_file) to log in")
        user = await self.login_rules.check_password(username, password, peer)
        if user is None:
            raise _Refused(401, "wrong user name or password")
        if not self.management.access.administers(Caller(user=user)):
            tags = " or ".join(self.management.config.admin_tags) or "(none)"
            log.info("console: %s may not log in (no %s tag)", user, tags)
            raise _Refused(403, f"user {user!r} may not use the console: it needs the {tags} tag")
        token, session = self._new_session(user)
        log.info("console: %s logged in from %s", user, source_of(peer))
        return token, session

    def token_login(self, jwt: str, peer: str) -> tuple[str, _Session]:
        """Check an OAuth 2 token (and its tags: an admin tag); a new session that ends
        with the token."""
        grant = self.login_rules.check_token(jwt, peer)
        if grant is None:
            raise _Refused(401, "the token does not log in (not valid, or expired)")
        if not self.management.access.administers(Caller(user=grant.user, grant=grant)):
            tags = " or ".join(self.management.config.admin_tags) or "(none)"
            raise _Refused(403, f"user {grant.user!r} may not use the console: its token gives no {tags} tag")
        token, session = self._new_session(grant.user, grant)
        log.info("console: %s logged in with a token from %s", grant.user, source_of(peer))
        return token, session

    def _new_session(self, user: str | None, grant: TokenGrant | None = None) -> tuple[str, _Session]:
        self._expire()
        if len(self._sessions) >= MAX_SESSIONS:  # the oldest goes
            oldest = min(self._sessions, key=lambda t: self._sessions[t].last_used)
            del self._sessions[oldest]
        token = secrets.token_urlsafe(32)
        session = self._sessions[token] = _Session(user, secrets.token_urlsafe(32), self.clock(), grant)
        return token, session

    def session_of(self, request: HttpRequest) -> tuple[str, _Session]:
        """The request's session (401 without a valid cookie)."""
        token = _cookie(request, COOKIE)
        session = self._sessions.get(token) if token else None
        now = self.clock()
        if session is None or now - session.last_used > self.session_seconds or self._ran_out(session):
            if token:
                self._sessions.pop(token, None)
            raise _Refused(401, "not logged in (or the session expired)")
        session.last_used = now
        return token or "", session

    def _ran_out(self, session: _Session) -> bool:
        """Whether the token ``session`` logged in with has expired."""
        return session.grant is not None and self.login_rules.token_expired(session.grant)

    def _expire(self) -> None:
        now = self.clock()
        for token in [
            t
            for t, s in self._sessions.items()
            if now - s.last_used > self.session_seconds or self._ran_out(s)
        ]:
            del self._sessions[token]

    def check_change(self, request: HttpRequest) -> tuple[str, _Session]:
        """A state change: the session, its CSRF token, a JSON body, and our own origin."""
        token, session = self.session_of(request)
        sent = request.header(CSRF_HEADER) or ""
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise _Refused(403, f"missing or wrong {CSRF_HEADER} header")
        origin = request.header("origin")
        host = request.header("host")
        if origin is not None and origin.split("://", 1)[-1] != host:
            raise _Refused(403, f"cross-origin request from {origin}")
        return token, session

    def cookie(self, token: str, max_age: int | None = None) -> tuple[str, str]:
        parts = [f"{COOKIE}={token}", "Path=/console", "HttpOnly", "SameSite=Strict"]
        if max_age is not None:
            parts.append(f"Max-Age={max_age}")
        if self.secure:
            parts.append("Secure")
        return ("set-cookie", "; ".join(parts))

    # -- the API's handlers -------------------------------------------------------------
    async def api_login(self, request: HttpRequest) -> HttpResponse:
        body = _json_body(request)
        jwt = body.get("token")
        if jwt is not None:
            if not isinstance(jwt, str) or not jwt.strip():
                raise _Refused(400, "give the token")
            token, session = self.token_login(jwt.strip(), request.peer)
            return _json(200, _session_body(session), self.cookie(token))
        username, password = body.get("username"), body.get("password")
        if (
            not isinstance(username, str)
            or not isinstance(password, str)
            or not username
            or not password
        ):
            raise _Refused(400, "give a username and a password")
        if "\0" in username or "\0" in password:
            raise _Refused(400, "a username or password cannot hold a NUL character")
        token, session = await self.login(username, password, request.peer)
        return _json(200, _session_body(session), self.cookie(token))

    async def api_logout(self, request: HttpRequest) -> HttpResponse:
        token, _ = self.check_change(request)
        self._sessions.pop(token, None)
        return _json(200, {"logged_out": True}, self.cookie("", max_age=0))

    async def api_session(self, request: HttpRequest) -> HttpResponse:
        try:
            _, session = self.session_of(request)
        except _Refused:
            if not self.login_rules.loopback_guest(request.peer):
                raise
            # the quick start: no users file, anonymous allowed, a browser on this machine
            token, session = self._new_session(None)
            log.info("console: the loopback guest came in from %s", source_of(request.peer))
            return _json(200, _session_body(session), self.cookie(token))
        return _json(200, _session_body(session))

    async def api_overview(self, request: HttpRequest) -> HttpResponse:
        _, session = self.session_of(request)
        m, caller = self.management, session.caller
        overview = await m.overview_whole(caller)
        nodes = []
        for vhost in overview["vhosts"]:
            for kind in NODE_TYPES:
                nodes.extend(await m.list_whole(caller, kind, vhost=vhost))
        return _json(
            200,
            {
                "overview": overview,
                "nodes": nodes,
                "connections": await m.list_whole(caller, "connection"),
                "time": time.time(),
            },
        )

    async def api_node(self, request: HttpRequest) -> HttpResponse:
        _, session = self.session_of(request)
        kind, name, vhost = _node_query(request)
        return _json(200, await self.management.on_owner(session.caller, read_node, kind, name, vhost=vhost))

    async def api_peek(self, request: HttpRequest) -> HttpResponse:
        _, session = self.session_of(request)
        kind, name, vhost = _node_query(request)
        query = request.query()
        count = query.get("count", str(PEEK_DEFAULT))
        offset = query.get("offset", "0")
        for label, value in (("count", count), ("offset", offset)):
            if not value.isdigit():
                raise _Refused(400, f"{label} must be a number, not {value!r}")
        args = {"count": int(count), "offset": int(offset)}
        messages = await self.management.on_owner(session.caller, peek_node, kind, name, vhost=vhost, args=args)
        return _json(200, {"messages": messages})

    async def api_purge(self, request: HttpRequest) -> HttpResponse:
        _, session = self.check_change(request)
        kind, name, vhost = _node_body(request)
        n = int(await self.management.on_owner(session.caller, purge_node, kind, name, vhost=vhost))  # (once stored)
        log.info("console: %s purged %s %r (%d messages)", session.user, kind, name, n)
        return _json(200, {"purged": n})

    async def api_delete(self, request: HttpRequest) -> HttpResponse:
        _, session = self.check_change(request)
        kind, name, vhost = _node_body(request)
        await self.management.on_owner(session.caller, delete_node, kind, name, vhost=vhost)  # (once stored)
        log.info("console: %s deleted %s %r", session.user, kind, name)
        return _json(200, {"deleted": name})

    async def api_rabbit(self, request: HttpRequest) -> HttpResponse:
        """``/console/api/rmq/PATH``: RabbitMQ's ``/api/PATH`` as the session's user (reading
        needs the cookie, changing also the CSRF token and our own origin)."""
        if request.method in ("GET", "HEAD"):
            _, session = self.session_of(request)
        else:
            _, session = self.check_change(request)
        caller = session.caller

        async def session_caller(_: HttpRequest) -> Caller:
            return caller

        path = request.path[len(RABBIT_PREFIX) :]
        response = await self.rabbit.answer(request, path, session_caller, challenge=False)
        return replace(response, headers=(*_SECURITY_HEADERS, *response.headers))

    async def api_close_connection(self, request: HttpRequest) -> HttpResponse:
        _, session = self.check_change(request)
        name = _json_body(request).get("name")
        if not isinstance(name, str):
            raise _Refused(400, "give the connection's name")
        reason = f"closed from the web console by {session.user}"
        await self.management.close_connection_whole(session.caller, name, reason)
        return _json(200, {"closed": name})


def _session_body(session: _Session) -> dict[str, Any]:
    """What the page learns of its session: who (the guest shown by name) and its CSRF token."""
    if session.user is None:
        return {"user": GUEST, "guest": True, "csrf": session.csrf}
    return {"user": session.user, "csrf": session.csrf}


def _json(status: int, value: Any, *headers: tuple[str, str]) -> HttpResponse:
    return HttpResponse.json(status, value, headers=(*_SECURITY_HEADERS, *headers))


def _cookie(request: HttpRequest, name: str) -> str | None:
    for key, value in request.headers:
        if key != "cookie":
            continue
        for part in value.split(";"):
            k, _, v = part.strip().partition("=")
            if k == name:
                return v
    return None


def _json_body(request: HttpRequest) -> dict[str, Any]:
    ctype = (request.header("content-type") or "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise _Refused(415, "the body must be JSON (content-type application/json)")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise _Refused(400, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _Refused(400, "the body must be a JSON object")
    return body


def _checked_node(kind: Any, name: Any, vhost: Any) -> tuple[str, str, str]:
    if kind not in NODE_TYPES:
        raise _Refused(400, f"type must be one of {', '.join(NODE_TYPES)}, not {kind!r}")
    if not isinstance(name, str) or not name:
        raise _Refused(400, "give the node's name")
    if not isinstance(vhost, str) or not vhost:
        raise _Refused(400, "give the node's virtual host")
    return kind, name, vhost


def _node_query(request: HttpRequest) -> tuple[str, str, str]:
    q = request.query()
    return _checked_node(q.get("type", "queue"), q.get("name"), q.get("vhost", "/"))


def _node_body(request: HttpRequest) -> tuple[str, str, str]:
    b = _json_body(request)
    return _checked_node(b.get("type", "queue"), b.get("name"), b.get("vhost", "/"))


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


def _answering(handler: Handler) -> Handler:
    """``handler`` with refusals and management errors answered as JSON errors."""

    async def answer(request: HttpRequest) -> HttpResponse:
        try:
            return await handler(request)
        except _Refused as exc:
            return HttpResponse.error(exc.status, str(exc), headers=_SECURITY_HEADERS)
        except ManagementError as exc:
            return HttpResponse.error(exc.status, exc.description, headers=_SECURITY_HEADERS)

    return answer


def _static(name: str) -> Handler:
    data = (
        resources.files("amqp10")
        .joinpath("broker")
        .joinpath("static")
        .joinpath("console")
        .joinpath(name)
        .read_bytes()
    )
    content_type = _STATIC[name]

    async def serve(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, data, content_type=content_type, headers=_SECURITY_HEADERS)

    return serve


def console_routes(console: Console) -> dict[str, Route]:
    """The console's pages and API, to add to the HTTP listener's routes."""
    post = frozenset({"POST"})
    index = _static("index.html")
    routes = {
        "/console": Route(get=index),
        "/console/": Route(get=index),
        "/console/app.js": Route(get=_static("app.js")),
        "/console/app.css": Route(get=_static("app.css")),
    }
    api: dict[str, tuple[Handler, frozenset[str] | None]] = {
        "login": (console.api_login, post),
        "logout": (console.api_logout, post),
        "session": (console.api_session, None),
        "overview": (console.api_overview, None),
        "node": (console.api_node, None),
        "peek": (console.api_peek, None),
        "purge": (console.api_purge, post),
        "delete": (console.api_delete, post),
        "close-connection": (console.api_close_connection, post),
    }
    for name, (handler, methods) in api.items():
        route = (
            Route(get=_answering(handler))
            if methods is None
            else Route(get=_answering(handler), methods=methods)
        )
        routes[f"/console/api/{name}"] = route
    routes[RABBIT_PREFIX + "*"] = Route(get=_answering(console.api_rabbit), methods=API_METHODS)
    return routes
