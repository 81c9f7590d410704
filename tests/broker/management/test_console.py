"""The web console's HTTP side without a browser: login, cookies, CSRF, JSON errors, pages.

A real broker on 127.0.0.1 with a users file (``admin`` has the administrator tag,
``carol`` has none); requests go over real sockets with :mod:`http.client`. The
browser tests are in test_console_browser.py.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10 import sync
from amqp10.broker.config import BrokerConfig
from amqp10.broker.console import Console, console_routes
from amqp10.broker.core import Broker
from amqp10.broker.core.store import DROP_NODE
from amqp10.broker.guard import ConnectionGuard
from amqp10.broker.users import add_user
from amqp10.io.http import HttpRequest
from amqp10.message import Message
from tests.broker.conftest import RunningBroker, broker_with, held_commits

T = 10.0


@pytest.fixture(scope="module")
def console_users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-users") / "users.toml"
    add_user(path, "admin", "s3cret", tags=["administrator"])
    add_user(path, "carol", "hunter2")
    return path


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, console_users: Path
) -> Iterator[RunningBroker]:
    with broker_with(
        tmp_path_factory.mktemp("console-broker"),
        sasl={"users_file": console_users},
        security={"login_delay_base": 0.0},  # failed logins here must not slow the others
    ) as b:
        yield b


class Client:
    """One browser-like client: keeps the session cookie and the CSRF token."""

    def __init__(self, b: RunningBroker) -> None:
        assert b.service.http_port is not None
        self.port = b.service.http_port
        self.cookie: str | None = None
        self.csrf = ""

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=T)
        try:
            h = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
            if self.cookie:
                h.setdefault("Cookie", self.cookie)
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                h.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def call(self, method: str, name: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        status, _, raw = self.request(method, f"/console/api/{name}", body, headers)
        return status, json.loads(raw)

    def change(self, name: str, body: Any) -> tuple[int, Any]:
        return self.call("POST", name, body, **{"X-CSRF-Token": self.csrf})

    def login(
        self, user: str = "admin", password: str = "s3cret"
    ) -> tuple[int, dict[str, str], Any]:
        status, headers, raw = self.request(
            "POST", "/console/api/login", {"username": user, "password": password}
        )
        if status == 200:
            self.cookie = headers["set-cookie"].split(";", 1)[0]
            self.csrf = json.loads(raw)["csrf"]
        return status, headers, json.loads(raw)


def fill(b: RunningBroker, queue: str, n: int) -> None:
    with sync.connect(f"amqp://admin:s3cret@{b.url}", timeout=T) as conn:
        sender = conn.open_sender(queue)
        for i in range(n):
            sender.send(Message(body=f"{queue} {i}"))


def depth(b: RunningBroker, queue: str) -> int | None:
    node = b.broker.nodes.get(queue)
    return None if node is None else int(node.count)


def test_login_sets_a_strict_http_only_cookie(broker: RunningBroker) -> None:
    c = Client(broker)
    assert c.call("GET", "overview") == (401, {"error": "not logged in (or the session expired)"})
    status, headers, body = c.login()
    assert status == 200 and body["user"] == "admin" and len(body["csrf"]) >= 32
    cookie = headers["set-cookie"]
    assert re.match(r"amqp10_console=[\w-]{32,}; ", cookie)
    for flag in ("HttpOnly", "SameSite=Strict", "Path=/console"):
        assert flag in cookie
    assert c.call("GET", "session") == (200, {"user": "admin", "csrf": c.csrf})
    status, data = c.call("GET", "overview")
    assert status == 200 and {"overview", "nodes", "connections"} <= data.keys()
    # logging out ends the session (it needs the CSRF token too)
    assert c.change("logout", {})[0] == 200
    assert c.call("GET", "overview")[0] == 401


@pytest.mark.parametrize(
    ("user", "password", "status", "error"),
    [
        ("admin", "wrong", 401, "wrong user name or password"),
        ("nobody", "s3cret", 401, "wrong user name or password"),
        (
            "carol",
            "hunter2",
            403,
            "user 'carol' may not use the console: it needs the administrator tag",
        ),
        ("", "x", 400, "give a username and a password"),
        ("x\0admin", "s3cret", 400, "a username or password cannot hold a NUL character"),
    ],
)
def test_failed_logins(
    broker: RunningBroker, user: str, password: str, status: int, error: str
) -> None:
    c = Client(broker)
    got, headers, body = c.login(user, password)
    assert (got, body) == (status, {"error": error})
    assert "set-cookie" not in headers


def test_state_changes_need_the_csrf_token_json_and_our_origin(broker: RunningBroker) -> None:
    fill(broker, "csrf-q", 3)
    c = Client(broker)
    c.login()
    target = {"vhost": "/", "type": "queue", "name": "csrf-q"}
    refused = [
        c.call("POST", "purge", target),  # no token
        c.call("POST", "purge", target, **{"X-CSRF-Token": "forged"}),
        c.call(
            "POST", "purge", target, **{"X-CSRF-Token": c.csrf, "Origin": "http://evil.example"}
        ),
    ]
    assert [s for s, _ in refused] == [403, 403, 403]
    assert refused[2][1] == {"error": "cross-origin request from http://evil.example"}
    # a form post (what another site can make a browser send) is not JSON
    status, _, raw = c.request(
        "POST",
        "/console/api/purge",
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": c.csrf},
    )
    assert (status, json.loads(raw)) == (
        415,
        {"error": "the body must be JSON (content-type application/json)"},
    )
    assert depth(broker, "csrf-q") == 3  # nothing happened
    # GET cannot change anything
    assert c.call("GET", "purge") == (405, {"error": "method GET not allowed"})
    assert c.change("purge", target) == (200, {"purged": 3})
    assert depth(broker, "csrf-q") == 0
    # without a session, the token alone is nothing
    anonymous = Client(broker)
    anonymous.csrf = c.csrf
    assert anonymous.change("purge", target)[0] == 401


def test_a_delete_is_answered_once_the_store_has_committed_it(broker: RunningBroker) -> None:
    fill(broker, "held-q", 1)
    c = Client(broker)
    c.login()
    out: list[tuple[int, Any]] = []
    worker = threading.Thread(target=lambda: out.append(c.change("delete", {"vhost": "/", "type": "queue", "name": "held-q"})))
    with held_commits(broker) as reached:
        worker.start()
        reached(lambda ops: any(op[0] == DROP_NODE and op[2] == "held-q" for op in ops))
        worker.join(0.5)  # the queue is gone from memory, its record not yet from the store
        assert worker.is_alive() and out == []
    worker.join(T)
    assert out == [(200, {"deleted": "held-q"})]


def test_peek_delete_and_errors_are_json_with_a_reason(broker: RunningBroker) -> None:
    fill(broker, "peek-q", 4)
    c = Client(broker)
    c.login()
    status, data = c.call("GET", "peek?vhost=/&type=queue&name=peek-q&count=2")
    assert status == 200
    assert [m["body"] for m in data["messages"]] == ["peek-q 0", "peek-q 1"]
    assert depth(broker, "peek-q") == 4  # peeking leaves them in place
    status, node = c.call("GET", "node?vhost=/&type=queue&name=peek-q")
    assert status == 200 and node["depth"] == 4 and node["enqueued"] == 4
    assert c.call("GET", "node?vhost=/&type=queue&name=missing") == (
        404,
        {"error": "no queue 'missing' in vhost '/'"},
    )
    assert c.call("GET", "node?vhost=/&type=exchange&name=x") == (
        400,
        {"error": "type must be one of queue, stream, subscription, not 'exchange'"},
    )
    assert c.call("GET", "peek?vhost=/&type=queue&name=peek-q&count=many") == (
        400,
        {"error": "count must be a number, not 'many'"},
    )
    status, err = c.call("GET", "peek?vhost=/&type=queue&name=peek-q&count=1000")
    assert status == 400 and "peek limit" in err["error"]
    assert c.change("delete", {"vhost": "/", "type": "queue", "name": "peek-q"}) == (
        200,
        {"deleted": "peek-q"},
    )
    assert depth(broker, "peek-q") is None
    assert c.change("delete", {"vhost": "/", "type": "queue", "name": "peek-q"})[0] == 404
    status, _, raw = c.request(
        "POST",
        "/console/api/purge",
        headers={"Content-Type": "application/json", "X-CSRF-Token": c.csrf},
    )
    assert status == 400  # an empty body names no node
    assert b"Traceback" not in raw


def test_pages_are_package_data_and_load_nothing_from_the_network(broker: RunningBroker) -> None:
    c = Client(broker)
    for path, ctype in [
        ("/console/", "text/html"),
        ("/console", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ]:
        status, headers, body = c.request("GET", path)
        assert status == 200 and headers["content-type"].startswith(ctype)
        csp = headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        # no absolute URL at all: every script, style and request stays on this origin
        assert not re.search(rb"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", body, re.I), path


def test_without_a_users_file_nobody_logs_in(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        status, _, body = Client(b).login()
        assert (status, body) == (
            503,
            {"error": "the console needs a users file ([sasl] users_file) to log in"},
        )


def test_the_quick_start_opens_from_loopback_without_a_login(tmp_path: Path) -> None:
    """No users file, anonymous allowed: a browser on this machine is the guest at once."""
    with broker_with(tmp_path) as b:
        c = Client(b)
        status, headers, raw = c.request("GET", "/console/api/session")
        body = json.loads(raw)
        assert (status, body["user"], body["guest"]) == (200, "guest", True)
        cookie = headers["set-cookie"]
        for flag in ("HttpOnly", "SameSite=Strict", "Path=/console"):
            assert flag in cookie
        c.cookie, c.csrf = cookie.split(";", 1)[0], body["csrf"]
        assert c.call("GET", "session")[1] == body  # the same session from now on
        with sync.connect(f"amqp://{b.url}", timeout=T) as conn:  # anonymous
            sender = conn.open_sender("guest.q")
            for body_text in ("a", "b"):
                sender.send(Message(body=body_text))
        status, overview = c.call("GET", "overview")
        assert status == 200 and "guest.q" in {n["name"] for n in overview["nodes"]}
        assert c.change("purge", {"name": "guest.q"}) == (200, {"purged": 2})
        assert c.call("POST", "purge", {"name": "guest.q"})[0] == 403  # still needs its CSRF token


def test_the_guest_is_loopback_only_and_only_without_users(
    tmp_path: Path, broker: RunningBroker
) -> None:
    async def session(console: Console, peer: str) -> int:
        request = HttpRequest(
            method="GET", target="/console/api/session", path="/console/api/session", headers=(), peer=peer
        )
        handler = console_routes(console)["/console/api/session"].get
        assert handler is not None
        return (await handler(request)).status

    config = BrokerConfig()
    guard = ConnectionGuard(config.security)
    open_console = Console(Broker(config), lambda: None, guard)
    assert anyio.run(session, open_console, "127.0.0.1:5000") == 200
    assert anyio.run(session, open_console, "[::1]:5000") == 200
    assert anyio.run(session, open_console, "192.0.2.7:5000") == 401  # not from this machine
    closed = BrokerConfig(sasl={"allow_anonymous": False})
    no_anonymous = Console(Broker(closed), lambda: None, ConnectionGuard(closed.security))
    assert anyio.run(session, no_anonymous, "127.0.0.1:5000") == 401
    # with a users file: a login, as before, from loopback too
    assert Client(broker).call("GET", "session")[0] == 401


def test_console_can_be_turned_off(tmp_path: Path) -> None:
    with broker_with(tmp_path, http={"console": False}) as b:
        c = Client(b)
        assert c.request("GET", "/console/")[0] == 404
        assert c.call("POST", "login", {"username": "a", "password": "b"})[0] == 404


def test_a_bad_body_is_a_400_not_a_trace(broker: RunningBroker) -> None:
    c = Client(broker)
    c.login()
    status, _, raw = c.request(
        "POST",
        "/console/api/close-connection",
        headers={"Content-Type": "application/json", "X-CSRF-Token": c.csrf},
    )
    assert (status, json.loads(raw)) == (400, {"error": "give the connection's name"})
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=T)
    try:
        body = b'{"name": '
        conn.request(
            "POST",
            "/console/api/close-connection",
            body=body,
            headers={
                "Cookie": c.cookie or "",
                "Content-Type": "application/json",
                "X-CSRF-Token": c.csrf,
            },
        )
        r = conn.getresponse()
        status, data = r.status, json.loads(r.read())
    finally:
        conn.close()
    assert status == 400 and data["error"].startswith("the body is not JSON")
    assert c.change("close-connection", {"name": "nobody"}) == (
        404,
        {"error": "no connection 'nobody'"},
    )


def test_an_unused_session_expires(tmp_path: Path, console_users: Path) -> None:
    minutes = 0.002  # 120 ms
    with broker_with(
        tmp_path, sasl={"users_file": console_users}, http={"console_session_minutes": minutes}
    ) as b:
        c = Client(b)
        assert c.login()[0] == 200
        time.sleep(minutes * 60 * 3)  # only ever more expired the longer it waits
        assert c.call("GET", "overview") == (
            401,
            {"error": "not logged in (or the session expired)"},
        )
