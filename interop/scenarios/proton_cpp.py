"""The scenarios driven by Proton's C++ examples (Debian ``libqpid-proton11-dev-examples``).

They are compiled unchanged with g++ against ``libqpid-proton-cpp12-dev`` (see
:func:`interop.peers.proton_c.build_cpp_examples`) and run as they are meant to
be run, with a URL and a count: ``simple_send``/``simple_recv`` (``-a URL -m N``;
``{"sequence"=i}`` map bodies, every send must be accepted), ``helloworld``,
``multithreaded_client``, ``multithreaded_client_flow_control`` and
``reconnect_client`` (each sends and receives on one address), ``simple_connect``
(``-s`` forces SASL; ``-u/-p/-m PLAIN -i`` logs in with PLAIN), ``server`` answering
``client`` (a dynamic reply queue; the server opens one sender per reply address,
so it is no anonymous-relay user), ``queue_browser`` (distribution-mode copy),
``colour_send`` with ``selected_recv`` (a JMS selector ``colour = 'green'``; also the
topic publisher and subscribers of the topic row).
``queue_browser`` and ``selected_recv`` never end by themselves: they are
stopped once they printed what the node held and nothing more came. What the
examples cannot express is n/a.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ..peers.base import HOST, Process
from ..peers.proton_c import build_cpp_examples
from . import Ctx, NotApplicable, check
from .proton_c import (
    common_na,
    dispatch,
    dpkg_version,
    expect_no_message,
    idle_then_receive,
    logins,
    run_binary,
    topic_subscribers,
)

__all__ = ["NA", "client_version", "prepare", "run"]

WAIT = 20.0
EMPTY_WAIT = 1.0

_ONLY = "Proton's C++ examples"
NA = {
    **common_na(_ONLY),
    "large-message": f"{_ONLY} only send small bodies",
    "message-sections": f"{_ONLY} that talk to a broker set no header, annotations or footer",
    "drain": f"{_ONLY} never set drain",
    "transactions": f"{_ONLY} (0.37) have no transactions",
    "anonymous-relay": f"{_ONLY}' server opens one sender per reply address, no anonymous one",
    "filter-expressions": f"{_ONLY} set only a JMS selector filter (selected_recv)",
    "no-local": f"{_ONLY} set only a JMS selector filter (selected_recv)",
    "scheduled-delivery": f"{_ONLY}' scheduled_send waits in the client: no x-opt-delivery-time",
}

_binaries: dict[str, Path] = {}


def prepare(install: bool = False) -> None:
    """Build the examples (raises PeerUnavailable with the reason if that cannot be done)."""
    _binaries.update(build_cpp_examples(install=install))


def _run(name: str, *args: object, env: dict[str, str] | None = None) -> str:
    if not _binaries:
        prepare()
    return run_binary(_binaries[name], *args, env=env, timeout=WAIT)


def _url(ctx: Ctx, address: str = "") -> str:
    return f"{HOST}:{ctx.ep.port}" + (f"/{address}" if address else "")


def _send(
    ctx: Ctx, address: str, n: int, *extra: str, url: str = "", env: dict[str, str] | None = None
) -> None:
    out = _run("simple_send", "-a", url or _url(ctx, address), "-m", n, *extra, env=env)
    check("all messages confirmed" in out, f"simple_send said: {out.strip()[-80:]!r}")


def _receive(ctx: Ctx, address: str, n: int) -> list[str]:
    out = _run("simple_recv", "-a", _url(ctx, address), "-m", n)
    return out.strip().splitlines()


def _sequence(n: int) -> list[str]:
    return ['{"sequence"=%d}' % i for i in range(1, n + 1)]


def _expect_empty(ctx: Ctx, address: str) -> None:
    """``simple_recv -m 1`` must still be waiting after EMPTY_WAIT seconds."""
    expect_no_message([str(_binaries["simple_recv"]), "-a", _url(ctx, address), "-m", "1"], address)


def _printed(ctx: Ctx, name: str, args: list[str], n: int) -> list[str]:
    """Run an example that never ends; its lines once it printed ``n`` and EMPTY_WAIT passed."""
    with tempfile.TemporaryDirectory(prefix="proton-cpp-") as tmp:
        p = Process([str(_binaries[name]), *args], Path(tmp) / f"{name}.log")
        try:
            p.wait_count(r".", n, WAIT)
            time.sleep(EMPTY_WAIT)  # anything beyond n would show up now
            return [ln for ln in p.output().splitlines() if ln.strip()]
        finally:
            p.stop(grace=2)


# -- scenarios ----------------------------------------------------------------------------
def sasl_anonymous(ctx: Ctx) -> None:
    before = logins(ctx, "ANONYMOUS")
    _run("simple_connect", "-a", _url(ctx), "-s")
    check(
        logins(ctx, "ANONYMOUS", before + 1) > before, "the broker logged no SASL ANONYMOUS login"
    )


def sasl_plain(ctx: Ctx) -> None:
    if ctx.ep.plain is None:
        raise NotApplicable("the peer has no PLAIN credentials")
    user, password = ctx.ep.plain
    before = logins(ctx, "PLAIN")
    # -i: PLAIN over a connection without TLS (the example refuses it otherwise)
    _run("simple_connect", "-a", _url(ctx), "-u", user, "-p", password, "-m", "PLAIN", "-i")
    check(logins(ctx, "PLAIN", before + 1) > before, "the broker logged no SASL PLAIN login")


def at_least_once(ctx: Ctx) -> None:
    a = ctx.addr()
    _send(ctx, a, 10)
    got = _receive(ctx, a, 10)
    check(got == _sequence(10), f"simple_recv got {got}")
    _expect_empty(ctx, a)
    out = _run("helloworld", _url(ctx), ctx.addr("hello"))
    check(out.strip() == "Hello World!", f"helloworld said {out.strip()!r}")
    out = _run("multithreaded_client", _url(ctx), ctx.addr("mt"), 20)
    check("20 messages sent and received" in out, f"multithreaded_client said {out[-80:]!r}")
    out = _run("multithreaded_client_flow_control", _url(ctx), ctx.addr("mtfc"), 10, 2)
    check(
        "20 messages sent and received" in out, f"multithreaded_client_flow_control: {out[-80:]!r}"
    )
    out = _run("reconnect_client", _url(ctx), ctx.addr("rc"), 5)
    check(out.count('{"sequence"=') == 5, f"reconnect_client said {out[-80:]!r}")


def outcome_accept(ctx: Ctx) -> None:
    a = ctx.addr()
    _send(ctx, a, 1)  # simple_send counts a confirmation only for accepted
    check(_receive(ctx, a, 1) == _sequence(1), "received something else")  # simple_recv accepts
    _expect_empty(ctx, a)


def request_response(ctx: Ctx) -> None:
    a = ctx.addr()
    with tempfile.TemporaryDirectory(prefix="proton-cpp-") as tmp:
        server = Process([str(_binaries["server"]), _url(ctx), a], Path(tmp) / "server.log")
        try:
            check(server.wait_for("Server connected", WAIT), "server did not connect")
            out = _run("client", "-a", _url(ctx, a)).strip().splitlines()
        finally:
            server.stop(grace=2)
    check(len(out) == 4, f"client printed {out}")
    for line in out:
        request, _, answer = line.partition(" => ")
        check(answer == request.upper(), f"client printed {line!r}")


def browse(ctx: Ctx) -> None:
    a = ctx.addr()
    _send(ctx, a, 5)
    seen = _printed(ctx, "queue_browser", [_url(ctx), a], 5)
    check(seen == _sequence(5), f"queue_browser printed {seen}")
    check(_receive(ctx, a, 5) == _sequence(5), "the browsed messages were not all left")


def selector(ctx: Ctx) -> None:
    a = ctx.addr()
    out = _run("colour_send", "-a", _url(ctx, a), "-m", 10)
    check("all messages confirmed" in out, f"colour_send said {out.strip()[-80:]!r}")
    green = _printed(ctx, "selected_recv", [_url(ctx), a], 5)
    check(green == [f"green {i}" for i in (1, 3, 5, 7, 9)], f"selected_recv printed {green}")
    red = _run("simple_recv", "-a", _url(ctx, a), "-m", 5).strip().splitlines()
    check(red == [f"red {i}" for i in (2, 4, 6, 8, 10)], f"after it, simple_recv got {red}")


def tls(ctx: Ctx) -> str | None:
    ep = ctx.ep
    if ep.tls_port is None or ep.ca is None:
        raise NotApplicable("the peer has no TLS listener")
    a = ctx.addr()
    env = dict(os.environ, SSL_CERT_FILE=str(ep.ca))  # OpenSSL's default trust store: our CA
    _send(ctx, a, 3, url=f"amqps://{HOST}:{ep.tls_port}/{a}", env=env)
    check(_receive(ctx, a, 3) == _sequence(3), "received something else")
    return None


def idle_timeout(ctx: Ctx) -> None:
    """``simple_recv`` waits, idle, past the broker's idle timeout; then a message still reaches it."""
    a = ctx.addr()
    argv = [str(_binaries["simple_recv"]), "-a", _url(ctx, a), "-m", "1"]
    out = idle_then_receive(ctx, argv, lambda: _send(ctx, a, 1))
    check(out.strip() == _sequence(1)[0], f"simple_recv said {out!r}")


def topic_wildcard(ctx: Ctx) -> None:
    """``selected_recv`` on topic addresses and wildcards, ``colour_send -m 1`` to topics.

    (``simple_recv`` would do, but it drops a message whose id is below its count as a
    duplicate, and every ``simple_send -m 1`` sends id 1; ``selected_recv`` prints all it
    gets, and each ``colour_send -m 1`` is one green message.)
    """
    with tempfile.TemporaryDirectory(prefix="proton-cpp-") as tmp:
        n = iter(range(10))

        def start(address: str) -> Process:
            argv = [str(_binaries["selected_recv"]), _url(ctx), address]
            return Process(argv, Path(tmp) / f"selected_recv-{next(n)}.log")

        def send(address: str) -> None:
            out = _run("colour_send", "-a", _url(ctx, address), "-m", 1)
            check("all messages confirmed" in out, f"colour_send said {out.strip()[-80:]!r}")

        topic_subscribers(start, send, f"interop.cpptopics.{ctx.prefix}")


SCENARIOS = {
    "sasl-anonymous": sasl_anonymous,
    "topic-wildcard": topic_wildcard,
    "sasl-plain": sasl_plain,
    "at-least-once": at_least_once,
    "outcome-accept": outcome_accept,
    "request-response": request_response,
    "browse": browse,
    "selector": selector,
    "tls": tls,
    "idle-timeout": idle_timeout,
}


def client_version() -> str:
    return f"Proton C++ examples {dpkg_version('libqpid-proton-cpp12-dev')}"


def run(ctx: Ctx) -> str | None:
    if not _binaries:
        prepare()
    return dispatch(SCENARIOS, NA, _ONLY, ctx)
