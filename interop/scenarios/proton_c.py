"""The scenarios driven by Proton's C example clients (``send``, ``receive``, ``send-ssl``).

The examples are what Debian ships in ``libqpid-proton11-dev-examples``,
compiled unchanged (see :mod:`interop.peers.proton_c`). They take
``host port address count [user password]`` and do one thing each: ``send``
sends ``count`` unsettled messages (a map body) and wants each accepted,
``receive`` accepts ``count`` messages, ``send-ssl`` is ``send`` over TLS
(with a user and password: SASL PLAIN and a verified server certificate;
without: ANONYMOUS and no verification); ``receive`` on ``topic://`` addresses and
wildcards with ``send`` to topics is the topic row. Whatever they cannot express is n/a.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..peers.base import HOST, Process
from ..peers.proton_c import build_examples
from . import Ctx, NotApplicable, ScenarioFailed, check

__all__ = [
    "NA",
    "common_na",
    "dispatch",
    "dpkg_version",
    "expect_no_message",
    "idle_then_receive",
    "logins",
    "prepare",
    "run",
    "run_binary",
    "topic_subscribers",
]

WAIT = 20.0
EMPTY_WAIT = 1.0
IDLE_WAIT_MAX = 12.0


def common_na(only: str) -> dict[str, str]:
    """Why scenarios are n/a for both the C and the C++ examples (``only`` names which)."""
    return {
        "at-most-once": f"{only} only send unsettled (at-least-once)",
        "rcv-settle-second": f"{only} have no rcv-settle-mode option",
        "outcome-reject": f"{only} only accept",
        "outcome-release": f"{only} only accept",
        "outcome-modify": f"{only} only accept",
        "link-resume": f"{only} have no link recovery",
        "attach-answer": f"{only} print nothing of the peer's attach",
        "durable-subscription": f"{only} have no durable subscription",
        "shared-subscription": f"{only} have no shared subscription",
        "message-groups": f"{only} set no group-id",
    }


_ONLY = "Proton's C examples"
NA = {
    **common_na(_ONLY),
    "large-message": f"{_ONLY} only send a small map body",
    "message-sections": f"{_ONLY} only send a small map body",
    "drain": f"{_ONLY} have no drain option",
    "request-response": f"{_ONLY} have no dynamic receiver or reply-to",
    "browse": f"{_ONLY} have no distribution-mode option",
    "transactions": f"{_ONLY} have no transactions",
    "anonymous-relay": f"{_ONLY} have no sender without a target",
    "selector": f"{_ONLY} set no source filter",
    "filter-expressions": f"{_ONLY} set no source filter",
    "no-local": f"{_ONLY} set no source filter",
    "scheduled-delivery": f"{_ONLY} set no message annotations",
}

_binaries: dict[str, Path] = {}


def prepare(install: bool = False) -> None:
    """Build the examples (raises PeerUnavailable with the reason if that cannot be done)."""
    _binaries.update(build_examples(install=install))


def run_binary(
    binary: Path, *args: Any, env: dict[str, str] | None = None, timeout: float = WAIT
) -> str:
    """Run a compiled example to its end (bounded); its stdout, or a one-line failure."""
    argv = [str(binary), *map(str, args)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"{binary.name} did not finish within {timeout:g}s") from None
    if r.returncode != 0:
        err = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[
            -1
        ]
        raise ScenarioFailed(f"{binary.name} failed: {err}")
    return r.stdout


def _run(name: str, *args: Any, env: dict[str, str] | None = None, timeout: float = WAIT) -> str:
    if not _binaries:
        prepare()
    return run_binary(_binaries[name], *args, env=env, timeout=timeout)


def _send(ctx: Ctx, address: str, n: int) -> None:
    out = _run("send", HOST, ctx.ep.port, address, n)
    check(f"{n} messages sent and acknowledged" in out, f"send said: {out.strip()[-80:]!r}")


def _receive(ctx: Ctx, address: str, n: int) -> list[str]:
    out = _run("receive", HOST, ctx.ep.port, address, n)
    check(f"{n} messages received" in out, f"receive said: {out.strip()[-80:]!r}")
    return re.findall(r'\{"sequence"=(\d+)\}', out)


def expect_no_message(argv: list[str], address: str) -> None:
    """A receiver for one message (``argv``) must still be waiting after EMPTY_WAIT seconds."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=EMPTY_WAIT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate(timeout=5)
        return
    name = Path(argv[0]).name
    raise ScenarioFailed(f"{address} should be empty, but {name} got: {out.strip()[-80:]!r}")


def idle_then_receive(ctx: Ctx, argv: list[str], send: Callable[[], None]) -> str:
    """The receiver ``argv`` (for one message) waits, idle, past the peer's idle timeout;
    then ``send()`` sends it a message: its output once it ended by itself."""
    ep = ctx.ep
    if not ep.idle_timeout:
        raise NotApplicable("the peer has no idle timeout configured")
    name = Path(argv[0]).name
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(min(2.5 * ep.idle_timeout, IDLE_WAIT_MAX))
        if p.poll() is not None:
            out = p.communicate(timeout=5)[0]
            raise ScenarioFailed(f"{name} ended while idle: {out.strip()[-80:]!r}")
        send()
        out, _ = p.communicate(timeout=WAIT)
        check(p.returncode == 0, f"{name} said: {out.strip()[-80:]!r}")
        return out
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=5)


def dpkg_version(package: str) -> str:
    """The installed version of a Debian package ('?' if unknown)."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "?"


def dispatch(
    table: dict[str, Callable[[Ctx], str | None]], na: dict[str, str], who: str, ctx: Ctx
) -> str | None:
    """Run ``ctx.scenario`` from ``table``; n/a with ``na``'s reason if it is not there."""
    fn = table.get(ctx.scenario)
    if fn is None:
        raise NotApplicable(na.get(ctx.scenario, f"{who} cannot do this"))
    return fn(ctx)


def _expect_empty(ctx: Ctx, address: str) -> None:
    """``receive ... 1`` must still be waiting after EMPTY_WAIT seconds."""
    expect_no_message([str(_binaries["receive"]), HOST, str(ctx.ep.port), address, "1"], address)


WARMUPS = 30  # sends at most, one at a time, until a topic subscriber shows it is attached


def topic_subscribers(
    start: Callable[[str], Process], send: Callable[[str], None], base: str
) -> None:
    """Topics as the example programs can show them: ``start(address)`` runs a receiver that
    prints a line per message and never ends by itself; ``send(address)`` sends one message.

    A topic keeps only what arrives while someone subscribes and the examples print nothing
    when attached, so a warm-up message goes to each subscriber's topic, one at a time,
    until it printed one; once in-flight warm-ups had EMPTY_WAIT to arrive, each line count
    is the baseline. Then: ``topic://B.news`` reaches both of its subscribers,
    ``topic://B.news.deep`` only the ``#`` one, ``topic://B.other`` the ``*`` and ``#`` ones.
    """
    subs = {
        "one": start(f"topic://{base}.news"),
        "two": start(f"topic://{base}.news"),
        "star": start(f"topic://{base}.*"),
        "hash": start(f"topic://{base}.#"),
    }
    try:
        for name, p in subs.items():
            for _ in range(WARMUPS):
                if p.all_matches(r"\S"):
                    break
                send(f"topic://{base}.news")
                p.wait_count(r"\S", 1, EMPTY_WAIT)
            check(p.all_matches(r"\S"), f"the {name} subscriber got none of {WARMUPS} messages")
        time.sleep(EMPTY_WAIT)
        before = {k: len(p.all_matches(r"\S")) for k, p in subs.items()}
        for leaf in ("news", "news.deep", "other"):
            send(f"topic://{base}.{leaf}")
        want = {"one": 1, "two": 1, "star": 2, "hash": 3}
        for k, p in subs.items():
            p.wait_count(r"\S", before[k] + want[k], WAIT)
        time.sleep(EMPTY_WAIT)  # anything more would show up now
        got = {k: len(p.all_matches(r"\S")) - before[k] for k, p in subs.items()}
        check(
            got == want, f"after news, news.deep and other, the subscribers got {got}, not {want}"
        )
    finally:
        for p in subs.values():
            p.stop(grace=2)


def logins(ctx: Ctx, mech: str, want: int = 0, timeout: float = WAIT) -> int:
    """How many SASL ``mech`` logins the broker logged, waiting (bounded) until ``want``:
    a line reaches the log a moment after the client that caused it has ended."""
    pattern = rf"authenticated as \S+ with {mech}"
    proc = ctx.ep.extra.get("process")
    if isinstance(proc, Process):
        return len(proc.wait_count(pattern, want, timeout))
    return len(re.findall(pattern, ctx.ep.log_text()))


# -- scenarios ----------------------------------------------------------------------------
def sasl_anonymous(ctx: Ctx) -> str | None:
    a = ctx.addr()
    before = logins(ctx, "ANONYMOUS")
    _send(ctx, a, 1)
    check(_receive(ctx, a, 1) == ["1"], "received something else")
    if logins(ctx, "ANONYMOUS", before + 2, EMPTY_WAIT) < before + 2:
        raise NotApplicable(
            "send/receive connected and worked, but without a SASL layer (Proton C adds one only when asked)"
        )
    return None


def sasl_plain(ctx: Ctx) -> str | None:
    ep = ctx.ep
    if ep.plain is None or ep.tls_port is None or ep.ca is None:
        raise NotApplicable("the peer has no PLAIN credentials or no TLS listener")
    a = ctx.addr()
    before = logins(ctx, "PLAIN")
    env = dict(os.environ, SSL_CERT_FILE=str(ep.ca))  # OpenSSL's default trust store: our CA
    out = _run("send-ssl", HOST, ep.tls_port, a, 1, *ep.plain, env=env)
    check("1 messages sent and acknowledged" in out, f"send-ssl said: {out.strip()[-80:]!r}")
    check("secure connection" in out, "send-ssl did not verify the server certificate")
    check(_receive(ctx, a, 1) == ["1"], "received something else")
    check(logins(ctx, "PLAIN", before + 1) > before, "the broker logged no SASL PLAIN login")
    return None


def at_least_once(ctx: Ctx) -> str | None:
    a = ctx.addr()
    _send(ctx, a, 10)
    got = _receive(ctx, a, 10)
    check(got == [str(i) for i in range(1, 11)], f"received sequence {got}")
    _expect_empty(ctx, a)
    return None


def outcome_accept(ctx: Ctx) -> str | None:
    a = ctx.addr()
    _send(ctx, a, 1)  # send.c fails unless the broker says accepted
    check(_receive(ctx, a, 1) == ["1"], "received something else")  # receive.c accepts
    _expect_empty(ctx, a)
    return None


def tls(ctx: Ctx) -> str | None:
    ep = ctx.ep
    if ep.tls_port is None:
        raise NotApplicable("the peer has no TLS listener")
    a = ctx.addr()
    out = _run("send-ssl", HOST, ep.tls_port, a, 3)
    check("3 messages sent and acknowledged" in out, f"send-ssl said: {out.strip()[-80:]!r}")
    check(
        "connection: " in out and "TLS" in out,
        f"send-ssl reported no TLS session: {out.strip()[:80]!r}",
    )
    check(_receive(ctx, a, 3) == ["1", "2", "3"], "received something else")
    return "without credentials send-ssl does not verify the server (ANONYMOUS_PEER)"


def idle_timeout(ctx: Ctx) -> str | None:
    """``receive`` waits, idle, past the broker's idle timeout; then a message still reaches it."""
    a = ctx.addr()
    argv = [str(_binaries["receive"]), HOST, str(ctx.ep.port), a, "1"]
    out = idle_then_receive(ctx, argv, lambda: _send(ctx, a, 1))
    check("1 messages received" in out, f"receive said: {out.strip()[-80:]!r}")
    return None


def topic_wildcard(ctx: Ctx) -> None:
    """``receive`` on topic addresses and wildcards, ``send`` to topics."""
    with tempfile.TemporaryDirectory(prefix="proton-c-") as tmp:
        n = iter(range(10))

        def start(address: str) -> Process:
            # stdbuf: a line per message through the pipe (receive.c uses stdio's printf)
            argv = [
                "stdbuf",
                "-oL",
                str(_binaries["receive"]),
                HOST,
                str(ctx.ep.port),
                address,
                "1000",
            ]
            return Process(argv, Path(tmp) / f"receive-{next(n)}.log")

        topic_subscribers(
            start, lambda address: _send(ctx, address, 1), f"interop.ctopics.{ctx.prefix}"
        )


SCENARIOS = {
    "sasl-anonymous": sasl_anonymous,
    "topic-wildcard": topic_wildcard,
    "sasl-plain": sasl_plain,
    "at-least-once": at_least_once,
    "outcome-accept": outcome_accept,
    "tls": tls,
    "idle-timeout": idle_timeout,
}


def client_version() -> str:
    return f"Proton C examples {dpkg_version('libqpid-proton11-dev-examples')}"


def run(ctx: Ctx) -> str | None:
    if not _binaries:
        prepare()
    return dispatch(SCENARIOS, NA, _ONLY, ctx)
