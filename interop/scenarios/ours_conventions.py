"""Our client's scenarios for the conventions clients rely on (issue #14's rows).

Attach answers, a JMS selector on a queue, ``topic://`` addresses with wildcards,
JMS-style durable and shared subscriptions, scheduled delivery and message
groups. A peer that shows in its answers that it lacks a feature (the selector
not echoed, no ``topic``/``shared`` capability, a non-durable terminus, no
``DELAYED_DELIVERY`` offered) makes the cell n/a with that reason.
"""

from __future__ import annotations

import time
from typing import Any

from amqp10 import errors
from amqp10.client import Connection
from amqp10.message import Message
from amqp10.types import Described, Source, Target, symbol

from . import FILTER_ROWS, Ctx, NotApplicable, check, conventions_of
from .ours import EMPTY_WAIT, WAIT, Fn, _body, _connect, _expect_empty, _send_all

__all__ = ["SCENARIOS"]

SELECTOR_KEY = symbol("jms-selector")


async def _publish(conn: Connection, address: str, messages: list[Message]) -> None:
    async with await conn.open_sender(address) as snd:
        for m in messages:
            await snd.send(m, timeout=WAIT)


async def _take(rcv: Any, n: int) -> list[Any]:
    """``n`` bodies (accepted), then nothing more within EMPTY_WAIT."""
    got = []
    for _ in range(n):
        d = await rcv.receive(timeout=WAIT)
        got.append(_body(d))
        await d.accept()
    try:
        extra = await rcv.receive(timeout=EMPTY_WAIT)
    except Exception:  # the timeout: nothing more, as it should be
        return got
    return [*got, _body(extra)]


async def _subscribe(conn: Connection, address: str | None, **kwargs: Any) -> Any:
    """A receiver from a topic (``topic://...`` or a source with capabilities); a peer that
    refuses the attach cannot do the scenario."""
    try:
        return await conn.open_receiver(address, **kwargs)
    except errors.AMQPError as exc:  # a refused link, or a session the peer ended for it
        what = address or kwargs["source"].address
        raise NotApplicable(f"the peer refused a receiver from {what}: {exc}") from None


def _caps(terminus: Any) -> set[str]:
    return {str(c) for c in (getattr(terminus, "capabilities", None) or [])}


async def attach_answer(ctx: Ctx) -> str | None:
    a = ctx.addr()
    notes = []
    async with await _connect(ctx) as conn:
        mine = Target(address=ctx.addr("mine"), capabilities=[symbol("x-interop")])
        async with await conn.open_receiver(a, target=mine, credit=0) as rcv:
            src, tgt = rcv.remote_source, rcv.remote_target
            check(
                isinstance(src, Source) and src.address == a,
                f"a receiver's answer had source {src!r}",
            )
            check(
                isinstance(tgt, Target) and tgt.address == mine.address,
                f"target not echoed: {tgt!r}",
            )
            if not _caps(src) & {"queue", "topic"}:
                notes.append("no queue/topic capability on its source")
        theirs = Source(address=ctx.addr("from"))
        async with await conn.open_sender(a, source=theirs) as snd:
            src, tgt = snd.remote_source, snd.remote_target
            check(
                isinstance(tgt, Target) and tgt.address == a,
                f"a sender's answer had target {tgt!r}",
            )
            check(
                isinstance(src, Source) and src.address == theirs.address,
                f"source not echoed: {src!r}",
            )
        offered = set(conn.remote_offered_capabilities)
        missing = {"ANONYMOUS-RELAY", "DELAYED_DELIVERY", "SHARED-SUBS"} - offered
        if missing:
            notes.append(f"its open does not offer {', '.join(sorted(missing))}")
    return "; ".join(notes) or None


async def selector(ctx: Ctx) -> str | None:
    a = ctx.addr()
    colours = ["green" if i % 2 else "red" for i in range(1, 9)]
    async with await _connect(ctx) as conn:
        msgs = [
            Message(body=f"{c} {i}", application_properties={"colour": c})
            for i, c in enumerate(colours, 1)
        ]
        await _publish(conn, a, msgs)
        async with await conn.open_receiver(a, selector="colour = 'green'", credit=10) as rcv:
            if SELECTOR_KEY not in (rcv.remote_source.filter or {}):
                raise NotApplicable(
                    "the peer did not apply the selector (not in its attach answer)"
                )
            green = await _take(rcv, 4)
        check(green == [f"green {i}" for i in (1, 3, 5, 7)], f"the selector got {green}")
        async with await conn.open_receiver(a, credit=10) as rcv:
            red = await _take(rcv, 4)
        check(red == [f"red {i}" for i in (2, 4, 6, 8)], f"the others got {red}")
    return None


async def filter_expressions(ctx: Ctx) -> str | None:
    a = ctx.addr()
    async with await _connect(ctx) as conn:
        msgs = [
            Message(body=b, subject=subj, application_properties={"colour": c, "n": n})
            for b, subj, c, n in FILTER_ROWS.messages
        ]
        await _publish(conn, a, msgs)
        for key, descriptor, _code, value, want in FILTER_ROWS.filters:
            if key == "props":  # a properties filter's keys are symbols (field names)
                value = {symbol(k): v for k, v in value.items()}
            source = Source(address=a, filter={symbol(key): Described(symbol(descriptor), value)})
            async with await conn.open_receiver(None, source=source, credit=10) as rcv:
                if symbol(key) not in (rcv.remote_source.filter or {}):
                    raise NotApplicable(f"the peer did not apply {descriptor} (not in its answer)")
                got = await _take(rcv, len(want))
            check(got == want, f"the {descriptor} consumer got {got}")
        async with await conn.open_receiver(a, credit=10) as rcv:
            rest = await _take(rcv, len(FILTER_ROWS.rest))
        check(rest == FILTER_ROWS.rest, f"the others got {rest}")
    return None


async def no_local(ctx: Ctx) -> str | None:
    topic = f"topic://interop.nolocal.{ctx.prefix}"
    no_local = {symbol("no-local"): Described(symbol(FILTER_ROWS.no_local), [])}
    async with await _connect(ctx) as mine, await _connect(ctx) as other:
        sub = await _subscribe(
            mine, None, source=Source(address=topic, filter=no_local), credit=10
        )
        if symbol("no-local") not in (sub.remote_source.filter or {}):
            raise NotApplicable("the peer did not apply the no-local filter (not in its answer)")
        plain = await mine.open_receiver(topic, credit=10)
        await _send_all(mine, topic, ["own"])
        await _send_all(other, topic, ["other"])
        got = await _take(plain, 2)
        check(got == ["own", "other"], f"a plain subscriber on the same connection got {got}")
        got = await _take(sub, 1)
        check(got == ["other"], f"the no-local subscriber got {got}")
        await sub.close()
        await plain.close()
    return None


async def topic_wildcard(ctx: Ctx) -> str | None:
    base = f"interop.topics.{ctx.prefix}"
    async with await _connect(ctx) as conn:
        one = await _subscribe(conn, f"topic://{base}.news", credit=10)
        if "topic" not in _caps(one.remote_source):
            raise NotApplicable("the peer's answer to topic://... carries no 'topic' capability")
        two = await conn.open_receiver(f"topic://{base}.news", credit=10)
        star = await conn.open_receiver(f"topic://{base}.*", credit=10)
        hashed = Source(address=f"{base}.#", capabilities=[symbol("topic")])
        deep = await conn.open_receiver(None, source=hashed, credit=10)
        for leaf, body in [("news", "n"), ("news.deep", "x"), ("other", "o")]:
            await _send_all(conn, f"topic://{base}.{leaf}", [body])
        check(
            await _take(one, 1) == ["n"] and await _take(two, 1) == ["n"],
            "a subscriber missed its copy",
        )
        got = await _take(star, 2)
        check(got == ["n", "o"], f"the '*' subscriber got {got}")
        got = await _take(deep, 3)
        check(got == ["n", "x", "o"], f"the '#' subscriber got {got}")
        for r in (one, two, star, deep):
            await r.close()
    return None


def _durable_source(address: str) -> Source:
    return Source(
        address=address, capabilities=[symbol("topic")], durable=2, expiry_policy=symbol("never")
    )


async def durable_subscription(ctx: Ctx) -> str | None:
    topic = f"topic://interop.durable.{ctx.prefix}"
    cid, name = f"interop-{ctx.prefix}", f"sub-{ctx.prefix}"
    async with await _connect(ctx, container_id=cid) as conn:
        r = await _subscribe(conn, None, name=name, source=_durable_source(topic), credit=0)
        if getattr(r.remote_source, "durable", 0) != 2:
            raise NotApplicable("the peer's answer to a durable subscription is not durable")
        await r.detach()  # closed=false: the subscription stays and collects
    async with await _connect(ctx) as pub:
        await _send_all(pub, topic, ["d1", "d2", "d3"])
    async with await _connect(ctx, container_id=cid) as conn:
        r = await conn.open_receiver(None, name=name, source=_durable_source(topic), credit=10)
        got = await _take(r, 3)
        check(got == ["d1", "d2", "d3"], f"the re-attached subscription had {got}")
        await r.close()  # closed=true: unsubscribe
        await _send_all(conn, topic, ["gone"])
        r = await conn.open_receiver(None, name=name, source=_durable_source(topic), credit=10)
        got = await _take(r, 0)
        check(got == [], f"after unsubscribing, a new subscription of that name had {got}")
        await r.close()
    return None


async def shared_subscription(ctx: Ctx) -> str | None:
    topic = f"topic://interop.shared.{ctx.prefix}"
    caps = [symbol("topic"), symbol("shared"), symbol("global")]
    name = f"shared-{ctx.prefix}"
    async with await _connect(ctx) as c1, await _connect(ctx) as c2:
        a = await _subscribe(
            c1, None, name=name, source=Source(address=topic, capabilities=caps), credit=0
        )
        if "shared" not in _caps(a.remote_source):
            raise NotApplicable("the peer's answer carries no 'shared' capability")
        b = await c2.open_receiver(
            None, name=f"{name}|2", source=Source(address=topic, capabilities=caps), credit=0
        )
        await _send_all(c1, topic, [f"p{i}" for i in range(6)])
        a.add_credit(3)
        b.add_credit(3)
        got_a, got_b = await _take(a, 3), await _take(b, 3)
        check(
            sorted(got_a + got_b) == [f"p{i}" for i in range(6)],
            f"the two consumers got {got_a} and {got_b}",
        )
        await a.close()
        await b.close()
    return None


async def scheduled_delivery(ctx: Ctx) -> str | None:
    a = ctx.addr()
    async with await _connect(ctx) as conn:
        if "DELAYED_DELIVERY" not in conn.remote_offered_capabilities:
            raise NotApplicable("the peer does not offer DELAYED_DELIVERY")
        due_ms = int(time.time() * 1000) + 1500
        later = Message(body="later", message_annotations={symbol("x-opt-delivery-time"): due_ms})
        await _publish(conn, a, [later, Message(body="now")])
        async with await conn.open_receiver(a, credit=10) as rcv:
            first = await rcv.receive(timeout=WAIT)
            await first.accept()
            check(_body(first) == "now", f"the first delivery was {_body(first)!r}, not 'now'")
            d = await rcv.receive(timeout=WAIT)
            arrived_ms = time.time() * 1000
            await d.accept()
        check(_body(d) == "later", f"then {_body(d)!r}")
        check(
            arrived_ms >= due_ms - 50, f"'later' came {due_ms - arrived_ms:.0f} ms before its time"
        )
    return None


async def message_groups(ctx: Ctx) -> str | None:
    a = ctx.addr()
    async with await _connect(ctx) as conn:
        msgs = [
            Message(body=f"{g}{i}", group_id=g, group_sequence=i)
            for i in range(1, 4)
            for g in ("A", "B", "C")
        ]
        # both consumers have credit before the messages come: a broker without groups
        # would spread each group over the two
        r1 = await conn.open_receiver(a, credit=9)
        r2 = await conn.open_receiver(a, credit=9)
        await _publish(conn, a, msgs)
        got: dict[int, list[str]] = {1: [], 2: []}
        for _ in range(9):
            for key, r in ((1, r1), (2, r2)):
                try:
                    d = await r.receive(timeout=EMPTY_WAIT)
                except Exception:  # this one has nothing now; the other may
                    continue
                got[key].append(_body(d))
                await d.accept()
            if len(got[1]) + len(got[2]) == 9:
                break
        for g in ("A", "B", "C"):
            owners = [k for k in got if any(b.startswith(g) for b in got[k])]
            check(len(owners) == 1, f"group {g} went to both consumers: {got}")
            seq = [b for b in got[owners[0]] if b.startswith(g)]
            check(seq == [f"{g}1", f"{g}2", f"{g}3"], f"group {g} arrived as {seq}")
        await r1.close()
        await r2.close()
    await _expect_empty_after(ctx, a)
    return None


async def _expect_empty_after(ctx: Ctx, address: str) -> None:
    async with await _connect(ctx) as conn:
        await _expect_empty(conn, address)


SCENARIOS: dict[str, Fn] = conventions_of(globals())
