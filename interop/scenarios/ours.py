"""The scenarios driven by our async client (``amqp10.connect``).

Each scenario opens its own connection(s) and uses fresh addresses, so a
failure leaves nothing behind for the next one. Every wait is bounded (``WAIT``
per operation, ``LIMIT`` per scenario).

A few checks read what the peer put in its attach or open frame (the
settle modes it agreed to, its idle-time-out, its unsettled map): the client
API does not expose those, so :func:`_remote_attach` and :func:`_remote_open`
read the engine endpoint behind the client object.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from amqp10 import errors
from amqp10.client import Connection, SettleMode, TransactionError, connect
from amqp10.client.url import parse_url
from amqp10.io.tls import client_context
from amqp10.message import Message
from amqp10.types import Accepted, ReceiverSettleMode, Rejected, SenderSettleMode, Source, symbol

from . import Ctx, NotApplicable, ScenarioFailed, check

__all__ = ["SCENARIOS", "run"]

WAIT = 10.0  # seconds for any one operation
LIMIT = 60.0  # seconds for a whole scenario
EMPTY_WAIT = 0.8  # seconds we wait to conclude that nothing more comes
IDLE = 2.0  # the idle timeout we ask the peer to honour
IDLE_WAIT_MAX = 12.0  # longest we sit idle in the idle-timeout scenario
LARGE = 1024 * 1024

Fn = Callable[[Ctx], Awaitable["str | None"]]


async def _connect(ctx: Ctx, **kwargs: Any) -> Connection:
    kwargs.setdefault("timeout", WAIT)
    url = kwargs.pop("url", ctx.ep.url)
    if "ssl" not in kwargs and ctx.ep.ca is not None and parse_url(url).tls:
        kwargs["ssl"] = client_context(cafile=ctx.ep.ca)  # e.g. every scenario over wss://
    return await connect(url, **kwargs)


def _remote_attach(link: Any) -> Any:
    return link._link.remote_attach


def _remote_open(conn: Connection) -> Any:
    return conn._engine.remote_open


def _body(d: Any) -> Any:
    return d.message.body


async def _send_all(
    conn: Connection, address: str, bodies: list[Any], mode: SettleMode = SettleMode.AT_LEAST_ONCE
) -> None:
    async with await conn.open_sender(address, settle_mode=mode) as snd:
        for b in bodies:
            outcome = await snd.send(Message(body=b), timeout=WAIT)
            if mode is SettleMode.AT_MOST_ONCE:
                check(outcome is None, f"a pre-settled send returned {outcome!r}")
            else:
                check(
                    isinstance(outcome, Accepted),
                    f"send of {b!r} was answered with {outcome!r}, not accepted",
                )


async def _expect_empty(conn: Connection, address: str) -> None:
    async with await conn.open_receiver(address, credit=1) as rcv:
        try:
            d = await rcv.receive(timeout=EMPTY_WAIT)
        except errors.TimeoutError:
            return
        body = _body(d)
        await d.release()
        raise ScenarioFailed(f"{address} should be empty, but it still had {body!r}")


async def _roundtrip(conn: Connection, address: str) -> None:
    body = f"ping-{uuid.uuid4().hex[:8]}"
    await _send_all(conn, address, [body])
    async with await conn.open_receiver(address, credit=1) as rcv:
        d = await rcv.receive(timeout=WAIT)
        check(_body(d) == body, f"received {_body(d)!r}, sent {body!r}")
        await d.accept()


# -- scenarios --------------------------------------------------------------------------
async def sasl_anonymous(ctx: Ctx) -> str | None:
    async with await _connect(ctx, sasl_mechanisms=["ANONYMOUS"]) as conn:
        await _roundtrip(conn, ctx.addr())
    return None


async def sasl_plain(ctx: Ctx) -> str | None:
    if ctx.ep.plain is None:
        raise NotApplicable("the peer has no PLAIN credentials configured")
    user, password = ctx.ep.plain
    url = ctx.ep.url.replace("://", f"://{user}:{password}@", 1)
    async with await _connect(ctx, url=url, sasl_mechanisms=["PLAIN"]) as conn:
        await _roundtrip(conn, ctx.addr())
    return None


async def at_most_once(ctx: Ctx) -> str | None:
    a, bodies = ctx.addr(), [f"m{i}" for i in range(10)]
    async with await _connect(ctx) as conn:
        await _send_all(conn, a, bodies, SettleMode.AT_MOST_ONCE)
        async with await conn.open_receiver(
            a, settle_mode=SettleMode.AT_MOST_ONCE, credit=20
        ) as rcv:
            peer_mode = _remote_attach(rcv).snd_settle_mode
            if peer_mode != SenderSettleMode.SETTLED:
                raise NotApplicable(
                    f"the peer's sender answered snd-settle-mode {_mode_name(peer_mode)}, not settled"
                )
            got = [await rcv.receive(timeout=WAIT) for _ in bodies]
        check([_body(d) for d in got] == bodies, f"received {[_body(d) for d in got]}")
        unsettled = [d for d in got if not d.remote_settled]
        check(not unsettled, f"{len(unsettled)} of the deliveries were not pre-settled")
    return None


async def at_least_once(ctx: Ctx) -> str | None:
    a, bodies = ctx.addr(), [f"m{i}" for i in range(10)]
    async with await _connect(ctx) as conn:
        await _send_all(conn, a, bodies)
        async with await conn.open_receiver(
            a, settle_mode=SettleMode.AT_LEAST_ONCE, credit=20
        ) as rcv:
            got = [await rcv.receive(timeout=WAIT) for _ in bodies]
            check([_body(d) for d in got] == bodies, f"received {[_body(d) for d in got]}")
            check(
                not any(d.remote_settled for d in got),
                "the peer pre-settled deliveries on an at-least-once link",
            )
            for d in got:
                await d.accept()
        await _expect_empty(conn, a)
    return None


async def rcv_settle_second(ctx: Ctx) -> str | None:
    a = ctx.addr()
    async with await _connect(ctx) as conn:
        async with await conn.open_sender(a, settle_mode=SettleMode.TWO_PHASE) as snd:
            mode = _remote_attach(snd).rcv_settle_mode
            if mode != ReceiverSettleMode.SECOND:
                raise NotApplicable(
                    f"the peer's receiver answered rcv-settle-mode {_rcv_name(mode)}, not second"
                )
            outcome = await snd.send(Message(body="two-phase"), timeout=WAIT)
            check(isinstance(outcome, Accepted), f"the send was answered with {outcome!r}")
        async with await conn.open_receiver(a, settle_mode=SettleMode.TWO_PHASE, credit=1) as rcv:
            mode = _remote_attach(rcv).rcv_settle_mode
            if mode != ReceiverSettleMode.SECOND:
                raise NotApplicable(
                    f"the peer's sender answered rcv-settle-mode {_rcv_name(mode)}, not second"
                )
            d = await rcv.receive(timeout=WAIT)
            check(_body(d) == "two-phase", f"received {_body(d)!r}")
            await d.accept()
            with anyio.move_on_after(WAIT):
                while not d.settled:  # settled once the sender settles after our accept
                    await anyio.sleep(0.02)
            check(d.settled, "the sender never settled after our accept (rcv-settle-mode second)")
        await _expect_empty(conn, a)
    return None


async def _outcome(ctx: Ctx, kind: str) -> str | None:
    a = ctx.addr()
    note = None
    async with await _connect(ctx) as conn:
        await _send_all(conn, a, [f"{kind}-me"])
        async with await conn.open_receiver(a, credit=1) as rcv:
            _require_outcome(rcv, kind)
            d = await rcv.receive(timeout=WAIT)
            check(_body(d) == f"{kind}-me", f"received {_body(d)!r}")
            if kind == "accept":
                await d.accept()
            elif kind == "reject":
                await d.reject()
            elif kind == "release":
                await d.release()
            else:
                await d.modify(delivery_failed=True)
            if kind in ("release", "modify"):
                try:
                    again = await rcv.receive(timeout=WAIT)
                except errors.TimeoutError:
                    raise ScenarioFailed(f"the {kind}d message was not redelivered") from None
                check(_body(again) == f"{kind}-me", f"redelivered {_body(again)!r}")
                count = again.message.delivery_count
                if kind == "modify" and count < 1:
                    note = f"redelivered with header.delivery-count {count} (delivery-failed should count)"
                if kind == "release" and count != 0:
                    note = f"redelivered with header.delivery-count {count} (released should not count)"
                await again.accept()
        await _expect_empty(conn, a)
    return note


_OUTCOME_SYMBOLS = {
    "accept": "amqp:accepted:list",
    "reject": "amqp:rejected:list",
    "release": "amqp:released:list",
    "modify": "amqp:modified:list",
}


def _require_outcome(rcv: Any, kind: str) -> None:
    """n/a if the peer's source lists the outcomes it supports and ``kind`` is not one (§3.5.3)."""
    outcomes = getattr(rcv.remote_source, "outcomes", None)
    if outcomes is None:
        return
    offered = [str(o) for o in (outcomes if isinstance(outcomes, (list, tuple)) else [outcomes])]
    if _OUTCOME_SYMBOLS[kind] not in offered:
        names = ", ".join(o.split(":")[1] for o in offered)
        raise NotApplicable(f"the peer's source supports only the outcomes {names}")


async def outcome_accept(ctx: Ctx) -> str | None:
    return await _outcome(ctx, "accept")


async def outcome_reject(ctx: Ctx) -> str | None:
    return await _outcome(ctx, "reject")


async def outcome_release(ctx: Ctx) -> str | None:
    return await _outcome(ctx, "release")


async def outcome_modify(ctx: Ctx) -> str | None:
    return await _outcome(ctx, "modify")


async def large_message(ctx: Ctx) -> str | None:
    a = ctx.addr()
    payload = os.urandom(LARGE)
    async with await _connect(ctx) as conn:
        async with await conn.open_sender(a, settle_mode=SettleMode.AT_LEAST_ONCE) as snd:
            outcome = await snd.send(Message(payload, body_type="data"), timeout=WAIT * 3)
            check(isinstance(outcome, Accepted), f"the 1 MiB send was answered with {outcome!r}")
        async with await conn.open_receiver(a, credit=1) as rcv:
            d = await rcv.receive(timeout=WAIT * 3)
            body = d.message.body
            data = b"".join(body) if isinstance(body, list) else bytes(body)
            check(data == payload, f"received {len(data)} bytes that differ from the {LARGE} sent")
            await d.accept()
    return None


async def drain(ctx: Ctx) -> str | None:
    a = ctx.addr()
    async with await _connect(ctx) as conn:
        await _send_all(conn, a, ["d0", "d1"])
        async with await conn.open_receiver(a, credit=0) as rcv:
            rcv.add_credit(5)
            await rcv.drain(timeout=WAIT)
            check(rcv.credit == 0, f"credit after the drain is {rcv.credit}, not 0")
            got = []
            while rcv.buffered:
                got.append(await rcv.receive(timeout=WAIT))
            check(
                [_body(d) for d in got] == ["d0", "d1"],
                f"the drain brought {[_body(d) for d in got]}",
            )
            for d in got:
                await d.accept()
    return None


async def request_response(ctx: Ctx) -> str | None:
    a = ctx.addr("requests")
    async with await _connect(ctx) as server, await _connect(ctx) as client:
        requests = await server.open_receiver(a, credit=5)

        async def serve() -> None:
            d = await requests.receive(timeout=WAIT)
            req = d.message
            await d.accept()
            await server.reply(d, Message(body=str(req.body).upper()), timeout=WAIT)

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            request = Message(body="ping")
            response = await client.request(a, request, timeout=WAIT)
        check(response.body == "PING", f"the response body is {response.body!r}")
        check(
            response.correlation_id == request.id,
            "the response's correlation-id is not the request's id",
        )
        await requests.close()
    return None


async def anonymous_relay(ctx: Ctx) -> str | None:
    """Proton's server.py/client.py shape with our client: the server answers each
    request through one sender with no target, to the request's reply-to."""
    a = ctx.addr("requests")
    async with await _connect(ctx) as server, await _connect(ctx) as client:
        if not server.anonymous_relay:
            raise NotApplicable("the peer does not offer ANONYMOUS-RELAY")
        requests = await server.open_receiver(a, credit=5)
        relay = await server.open_sender(None)
        replies = await client.open_receiver(dynamic=True, credit=5)
        words = ["tic", "tac", "toe"]

        async def serve() -> None:
            for _ in words:
                d = await requests.receive(timeout=WAIT)
                req = d.message
                await d.accept()
                reply = Message(body=str(req.body).upper(), to=req.reply_to, correlation_id=req.correlation_id)
                outcome = await relay.send(reply, timeout=WAIT)
                check(isinstance(outcome, Accepted), f"the relay answered {outcome!r}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            ask = await client.open_sender(a)
            for i, w in enumerate(words):
                await ask.send(Message(body=w, reply_to=replies.address, correlation_id=i), timeout=WAIT)
            got = []
            for _ in words:
                d = await replies.receive(timeout=WAIT)
                got.append((d.message.correlation_id, d.message.body))
                await d.accept()
        check(got == [(0, "TIC"), (1, "TAC"), (2, "TOE")], f"the replies were {got}")
        unknown = await relay.send(Message(body="x", to=ctx.addr("absent")), timeout=WAIT)
        note = None
        if not isinstance(unknown, Rejected):
            note = f"a message to no node got {type(unknown).__name__}, not rejected"
        await requests.close()
    return note


async def browse(ctx: Ctx) -> str | None:
    a, bodies = ctx.addr(), ["b0", "b1", "b2"]
    async with await _connect(ctx) as conn:
        await _send_all(conn, a, bodies)
        src = Source(address=a, distribution_mode=symbol("copy"))
        async with await conn.open_receiver(a, source=src, credit=10) as browser:
            mode = getattr(browser.remote_source, "distribution_mode", None)
            if mode != "copy":
                raise NotApplicable(f"the peer answered distribution-mode {mode!r}, not copy")
            seen = [await browser.receive(timeout=WAIT) for _ in bodies]
            check([_body(d) for d in seen] == bodies, f"browsed {[_body(d) for d in seen]}")
            for d in seen:
                if not d.settled:
                    await d.accept()
        async with await conn.open_receiver(a, credit=10) as rcv:
            got = []
            for _ in bodies:
                try:
                    got.append(await rcv.receive(timeout=WAIT))
                except errors.TimeoutError:
                    raise ScenarioFailed(
                        f"the browsed messages were consumed: {len(got)} of {len(bodies)} left after browsing"
                    ) from None
            check(
                [_body(d) for d in got] == bodies,
                f"after browsing, consumed {[_body(d) for d in got]}",
            )
            for d in got:
                await d.accept()
    return None


FIDELITY_BODY = {
    "text": "h\u00e9llo \u2713",
    "n": 42,
    "neg": -7,
    "pi": 3.5,
    "flag": True,
    "list": [1, "two", None],
    "bin": b"\x00\xff",
}
FIDELITY_APP = {"s": "str", "i": 7, "neg": -5, "b": True, "f": 1.25, "none": None}


def _fidelity_message(reply_to: str) -> Message:
    m = Message(body=dict(FIDELITY_BODY))
    m.durable = True
    m.priority = 7
    m.ttl = 600.0
    m.message_annotations = {"x-opt-interop": "yes"}
    m.id = uuid.UUID(int=0x1234)
    m.subject = "fidelity"
    m.reply_to = reply_to  # in the peer's address syntax: a JMS broker qualifies it otherwise
    m.correlation_id = "corr-1"
    m.content_type = "application/x-interop"
    m.creation_time = 1700000000.0
    m.group_id = "group"
    m.group_sequence = 3
    m.reply_to_group_id = "reply-group"
    m.application_properties = dict(FIDELITY_APP)
    m.footer = {"x-opt-footer": "f"}
    return m


def _fidelity_diff(sent: Message, got: Message) -> tuple[list[str], list[str]]:
    """(fields that differ and must not, fields the peer dropped that it may drop)."""
    bad = []
    if got.body != sent.body:
        bad.append(f"body {got.body!r}")
    for name in ("durable", "priority", "id", "subject", "reply_to", "correlation_id", "content_type",
                 "creation_time", "group_id", "group_sequence", "reply_to_group_id"):  # fmt: skip
        if getattr(got, name) != getattr(sent, name):
            bad.append(f"{name} {getattr(got, name)!r}")
    if (got.application_properties or {}) != sent.application_properties:
        bad.append(f"application-properties {got.application_properties!r}")
    if (got.message_annotations or {}).get(symbol("x-opt-interop")) != "yes":
        bad.append("message-annotation x-opt-interop")
    dropped = []
    if not got.footer:
        dropped.append("footer")
    if got.ttl is None:
        dropped.append("header.ttl")
    return bad, dropped


async def message_sections(ctx: Ctx) -> str | None:
    a = ctx.addr()
    sent = _fidelity_message(ctx.ep.address("interop.reply"))
    async with await _connect(ctx) as conn:
        async with await conn.open_sender(a, settle_mode=SettleMode.AT_LEAST_ONCE) as snd:
            outcome = await snd.send(sent, timeout=WAIT)
            check(isinstance(outcome, Accepted), f"the send was answered with {outcome!r}")
        async with await conn.open_receiver(a, credit=1) as rcv:
            d = await rcv.receive(timeout=WAIT)
            got = d.message
            await d.accept()
    bad, dropped = _fidelity_diff(sent, got)
    check(not bad, "changed in transit: " + "; ".join(bad))
    return f"the peer dropped: {', '.join(dropped)}" if dropped else None


async def tls(ctx: Ctx) -> str | None:
    ep = ctx.ep
    if ep.tls_url is None or ep.ca is None:
        raise NotApplicable("the peer has no TLS listener")
    async with await _connect(ctx, url=ep.tls_url, ssl=client_context(cafile=ep.ca)) as conn:
        await _roundtrip(conn, ctx.addr())
    return None


async def idle_timeout(ctx: Ctx) -> str | None:
    notes = []
    async with await _connect(ctx, idle_timeout=IDLE) as conn:
        remote = _remote_open(conn)
        peer_ms = getattr(remote, "idle_time_out", None)
        peer = peer_ms / 1000 if peer_ms else None
        longest = max(IDLE, peer or 0)
        wait = min(2.5 * longest, IDLE_WAIT_MAX)
        if peer is None:
            notes.append("the peer advertises no idle-time-out: only checked that it keeps ours")
        elif 2.5 * peer > IDLE_WAIT_MAX:
            notes.append(f"the peer's idle-time-out is {peer:g}s: idle for {wait:g}s only")
        await anyio.sleep(wait)
        check(conn.is_open, f"the connection dropped while idle: {conn.error}")
        await _roundtrip(conn, ctx.addr())
    return "; ".join(notes) or None


async def link_resume(ctx: Ctx) -> str | None:
    """Detach a receiver holding unsettled deliveries, re-attach it resuming (§2.6.13).

    The peer supports resumption if its attach carries an unsettled map; if it
    does, the deliveries we still hold must be settleable on the new link.
    """
    from amqp10.client.receiver import Receiver as ClientReceiver

    a = ctx.addr()
    async with await _connect(ctx) as conn:
        await _send_all(conn, a, ["r0", "r1"])
        name = f"interop-resume-{ctx.prefix}"
        # the source asks to outlive the link (Part 3 §3.5.6), or there is nothing to resume
        kept = Source(address=a, timeout=60)
        rcv = await conn.open_receiver(a, credit=2, name=name, source=kept)
        held = [await rcv.receive(timeout=WAIT) for _ in range(2)]
        check([_body(d) for d in held] == ["r0", "r1"], f"received {[_body(d) for d in held]}")
        old = rcv._link
        deliveries = list(old.unsettled.values())  # held, unsettled: they cross the re-attach
        await rcv.detach(timeout=WAIT)
        session = conn._session_for(None)
        link = session._session.receiver(
            name,
            source=kept,
            target=old.target,
            snd_settle_mode=old.snd_settle_mode,
            rcv_settle_mode=old.rcv_settle_mode,
            resume_deliveries=deliveries,
        )
        again = ClientReceiver(conn, session, link, address=a, window=2)
        await conn._attach(again, WAIT)
        remote = link.remote_attach
        if remote is None or remote.unsettled is None:
            await again.close()
            raise NotApplicable(
                "the peer's re-attach carried no unsettled map: it does not resume links"
            )
        # the peer resumes what both maps hold (transfers with resume=true, which
        # may come after its attach) and forgets the rest: settle each as it comes
        resumed = [d for d in link.unsettled.values() if not d.settled]
        got = [await again.receive(timeout=WAIT) for _ in resumed]
        bodies = [_body(d) for d in got]
        check(
            len(set(bodies)) == len(bodies) <= 2 and set(bodies) <= {"r0", "r1"},
            f"resumed {bodies}",
        )
        for d in got:
            await d.accept()
        await again.close()
        await _expect_empty(conn, a)
    return None


async def transactions(ctx: Ctx) -> str | None:
    """Local transactions (Part 4): posting commits and rolls back; retirement rolls back."""
    a = ctx.addr()
    async with await _connect(ctx) as conn:
        try:
            txn = await conn.transaction()
        except (errors.LinkError, TransactionError) as exc:
            raise NotApplicable(f"the peer has no transaction coordinator: {exc}") from None
        async with await conn.open_sender(a, settle_mode=SettleMode.AT_LEAST_ONCE) as snd:
            for body in ("t0", "t1"):
                outcome = await snd.send(Message(body=body), txn=txn, timeout=WAIT)
                check(isinstance(outcome, Accepted), f"a send in the transaction got {outcome!r}")
            await _expect_empty(conn, a)  # posted, not yet committed: invisible
            await txn.commit()
            txn = await conn.transaction()
            await snd.send(Message(body="t2"), txn=txn, timeout=WAIT)
            await txn.rollback()
        async with await conn.open_receiver(a, credit=2) as rcv:
            got = [await rcv.receive(timeout=WAIT) for _ in range(2)]
            check([_body(d) for d in got] == ["t0", "t1"], f"after commit: {[_body(d) for d in got]}")
            txn = await conn.transaction()
            await got[0].accept(txn=txn)
            await got[1].accept()
            await txn.rollback()  # t0's acceptance is undone: it comes back
            again = await rcv.receive(timeout=WAIT)
            check(_body(again) == "t0", f"after the rolled-back accept: {_body(again)!r}")
            await again.accept()
        await _expect_empty(conn, a)  # t2 was rolled back, t0 and t1 are accepted
    return None


def _mode_name(mode: Any) -> str:
    return {0: "unsettled", 1: "settled", 2: "mixed"}.get(
        int(mode) if mode is not None else 2, str(mode)
    )


def _rcv_name(mode: Any) -> str:
    return {0: "first", 1: "second"}.get(int(mode) if mode is not None else 0, str(mode))


SCENARIOS: dict[str, Fn] = {
    "anonymous-relay": anonymous_relay,
    "sasl-anonymous": sasl_anonymous,
    "sasl-plain": sasl_plain,
    "at-most-once": at_most_once,
    "at-least-once": at_least_once,
    "rcv-settle-second": rcv_settle_second,
    "outcome-accept": outcome_accept,
    "outcome-reject": outcome_reject,
    "outcome-release": outcome_release,
    "outcome-modify": outcome_modify,
    "large-message": large_message,
    "message-sections": message_sections,
    "drain": drain,
    "request-response": request_response,
    "browse": browse,
    "tls": tls,
    "idle-timeout": idle_timeout,
    "link-resume": link_resume,
    "transactions": transactions,
}


def _conventions() -> dict[str, Fn]:
    from .ours_conventions import SCENARIOS as conventions  # it imports this module's helpers

    return conventions


SCENARIOS.update(_conventions())


def client_version() -> str:
    import amqp10

    return f"amqp10 {amqp10.__version__}"


def run(ctx: Ctx) -> str | None:
    """Run one scenario to completion in a fresh event loop, bounded by ``LIMIT`` seconds."""
    fn = SCENARIOS[ctx.scenario]

    async def bounded() -> str | None:
        with anyio.fail_after(LIMIT):
            return await fn(ctx)

    try:
        return anyio.run(bounded)
    except BaseException as exc:
        refusal = _not_implemented(exc)
        if refusal is not None:
            raise NotApplicable(f"the peer refused: amqp:not-implemented: {refusal}") from None
        raise


def _not_implemented(exc: BaseException) -> str | None:
    """The description of an ``amqp:not-implemented`` refusal in ``exc`` (or a group holding it)."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _not_implemented(sub)
            if found is not None:
                return found
        return None
    if isinstance(exc, errors.AMQPError) and exc.condition == "amqp:not-implemented":
        return exc.description or "no description"
    if isinstance(exc, errors.AMQPError):
        # a link that ended with its session carries the session's condition only in its text
        m = re.search(r"amqp:not-implemented: ([^()]*)", str(exc))
        if m:
            return m.group(1).strip()
    return None
