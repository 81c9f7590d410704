"""Connection URLs: amqp[s]:// with a vhost, ws[s]:// with an HTTP path."""

from __future__ import annotations

import pytest

from amqp10.client.url import parse_url


@pytest.mark.parametrize(
    ("text", "scheme", "port", "tls", "websocket", "vhost", "path"),
    [
        ("host", "amqp", 5672, False, False, None, None),
        ("amqps://host/vh", "amqps", 5671, True, False, "vh", None),
        ("ws://host", "ws", 80, False, True, None, "/"),
        ("wss://host", "wss", 443, True, True, None, "/"),
        ("ws://host:8672/$amqp", "ws", 8672, False, True, None, "/$amqp"),
        (
            "WSS://host:9/$servicebus/websocket?x=1",
            "wss",
            9,
            True,
            True,
            None,
            "/$servicebus/websocket?x=1",
        ),
    ],
)
def test_schemes(
    text: str,
    scheme: str,
    port: int,
    tls: bool,
    websocket: bool,
    vhost: str | None,
    path: str | None,
) -> None:
    u = parse_url(text)
    assert (u.scheme, u.port, u.tls, u.websocket, u.vhost, u.path) == (
        scheme,
        port,
        tls,
        websocket,
        vhost,
        path,
    )


def test_websocket_url_keeps_credentials_and_prints_its_path() -> None:
    u = parse_url("ws://alice:s%40cret@127.0.0.1:8672/$amqp")
    assert (u.username, u.password, u.host) == ("alice", "s@cret", "127.0.0.1")
    assert str(u) == "ws://alice@127.0.0.1:8672/$amqp"
    assert "s@cret" not in repr(u)


def test_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="use amqp://, amqps://, ws:// or wss://"):
        parse_url("http://host")
