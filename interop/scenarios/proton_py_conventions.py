"""python-qpid-proton's scenarios for the conventions clients rely on (issue #14's rows).

Written with Proton's own link options where it has them (``Selector``,
``DurableSubscription``, ``Copy``) and terminus capabilities set the way the
AMQP JMS mapping names them, through ``BlockingConnection``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from proton import Data, Described, Message, Terminus, Timeout, symbol, ulong
from proton.reactor import Container, DurableSubscription, Filter, LinkOption, Selector
from proton.utils import BlockingConnection

from . import FILTER_ROWS, Ctx, NotApplicable, check, conventions_of
from .proton_py import EMPTY_WAIT, WAIT, _bc, _name, _send

__all__ = ["SCENARIOS"]


class _Capabilities(LinkOption):
    """Source capabilities (``topic``, ``shared``, ``global``) on a receiver."""

    def __init__(self, *caps: str) -> None:
        self.caps = caps

    def apply(self, link: Any) -> None:
        data = link.source.capabilities
        data.put_array(False, Data.SYMBOL)
        data.enter()
        for c in self.caps:
            data.put_symbol(symbol(c))
        data.exit()


class _OtherEnd(LinkOption):
    """An address for the terminus our side owns (a sender's source, a receiver's target)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def apply(self, link: Any) -> None:
        (link.source if link.is_sender else link.target).address = self.address


def _obj(data: Any) -> Any:
    """What a terminus's ``filter``/``capabilities`` Data holds (None if empty)."""
    if data is None:
        return None
    data.rewind()
    return data.get_object() if data.next() is not None else None


def _caps(terminus: Any) -> set[str]:
    value = _obj(terminus.capabilities)
    value = getattr(value, "elements", value)  # a proton Array
    if value is None:
        return set()
    return {str(v) for v in value} if isinstance(value, (list, tuple)) else {str(value)}


def _take(bc: BlockingConnection, r: Any, n: int, *, more: bool = True) -> list[Any]:
    """``n`` bodies (accepted), then (``more``) nothing more within EMPTY_WAIT.

    A BlockingReceiver without credit grants one to look for more: ``more=False``
    where that credit would take what belongs to another consumer.
    """
    got = []
    for _ in range(n):
        got.append(r.receive(timeout=WAIT).body)
        r.accept()
    if not more:
        return got
    try:
        got.append(r.receive(timeout=EMPTY_WAIT).body)
        r.release(delivered=False)
    except Timeout:
        pass
    return got


def _connect(ctx: Ctx, container_id: str | None = None) -> BlockingConnection:
    if container_id is None:
        return _bc(ctx)
    container = Container()
    container.container_id = container_id
    return _bc(ctx, container=container)


def _publish(bc: BlockingConnection, address: str, messages: list[Message]) -> None:
    snd = bc.create_sender(address, name=_name())
    for m in messages:
        snd.send(m)
    snd.close()


def selector(ctx: Ctx) -> str | None:
    a = ctx.addr()
    bc = _bc(ctx)
    try:
        colours = ["green" if i % 2 else "red" for i in range(1, 9)]
        _publish(
            bc,
            a,
            [Message(body=f"{c} {i}", properties={"colour": c}) for i, c in enumerate(colours, 1)],
        )
        r = bc.create_receiver(a, credit=10, name=_name(), options=Selector("colour = 'green'"))
        filters = _obj(r.link.remote_source.filter) or {}
        if symbol("selector") not in filters and symbol("jms-selector") not in filters:
            raise NotApplicable("the peer did not apply the selector (not in its attach answer)")
        green = _take(bc, r, 4)
        r.close()
        check(green == [f"green {i}" for i in (1, 3, 5, 7)], f"the selector got {green}")
        r = bc.create_receiver(a, credit=10, name=_name())
        red = _take(bc, r, 4)
        r.close()
        check(red == [f"red {i}" for i in (2, 4, 6, 8)], f"the others got {red}")
    finally:
        bc.close()
    return None


def filter_expressions(ctx: Ctx) -> str | None:
    """Proton's ``Filter`` option, each filter by its numeric descriptor code."""
    a = ctx.addr()
    bc = _bc(ctx)
    try:
        _publish(
            bc,
            a,
            [
                Message(body=b, subject=subj, properties={"colour": c, "n": n})
                for b, subj, c, n in FILTER_ROWS.messages
            ],
        )
        for key, descriptor, code, value, want in FILTER_ROWS.filters:
            if key == "props":  # a properties filter's keys are symbols (field names)
                value = {symbol(k): v for k, v in value.items()}
            f = Filter({symbol(key): Described(ulong(code), value)})
            r = bc.create_receiver(a, credit=10, name=_name(), options=f)
            if symbol(key) not in (_obj(r.link.remote_source.filter) or {}):
                raise NotApplicable(f"the peer did not apply {descriptor} (not in its answer)")
            got = _take(bc, r, len(want))
            r.close()
            check(got == want, f"the {descriptor} consumer got {got}")
        r = bc.create_receiver(a, credit=10, name=_name())
        rest = _take(bc, r, len(FILTER_ROWS.rest))
        r.close()
        check(rest == FILTER_ROWS.rest, f"the others got {rest}")
    finally:
        bc.close()
    return None


def no_local(ctx: Ctx) -> str | None:
    topic = f"topic://interop.nolocal.{ctx.prefix}"
    no_local_filter = Filter({symbol("no-local"): Described(symbol(FILTER_ROWS.no_local), [])})
    mine, other = _bc(ctx), _bc(ctx)
    try:
        sub = mine.create_receiver(topic, credit=10, name=_name(), options=no_local_filter)
        if symbol("no-local") not in (_obj(sub.link.remote_source.filter) or {}):
            raise NotApplicable("the peer did not apply the no-local filter (not in its answer)")
        plain = mine.create_receiver(topic, credit=10, name=_name())
        _send(mine, topic, ["own"])
        _send(other, topic, ["other"])
        got = _take(mine, plain, 2)
        check(got == ["own", "other"], f"a plain subscriber on the same connection got {got}")
        got = _take(mine, sub, 1)
        check(got == ["other"], f"the no-local subscriber got {got}")
    finally:
        mine.close()
        other.close()
    return None


def topic_wildcard(ctx: Ctx) -> str | None:
    base = f"interop.topics.{ctx.prefix}"
    bc = _bc(ctx)
    try:
        one = bc.create_receiver(f"topic://{base}.news", credit=10, name=_name())
        if "topic" not in _caps(one.link.remote_source):
            raise NotApplicable("the peer's answer to topic://... carries no 'topic' capability")
        two = bc.create_receiver(f"topic://{base}.news", credit=10, name=_name())
        star = bc.create_receiver(f"topic://{base}.*", credit=10, name=_name())
        deep = bc.create_receiver(
            f"{base}.#", credit=10, name=_name(), options=_Capabilities("topic")
        )
        for leaf, body in [("news", "n"), ("news.deep", "x"), ("other", "o")]:
            _send(bc, f"topic://{base}.{leaf}", [body])
        check(
            _take(bc, one, 1) == ["n"] and _take(bc, two, 1) == ["n"],
            "a subscriber missed its copy",
        )
        got = _take(bc, star, 2)
        check(got == ["n", "o"], f"the '*' subscriber got {got}")
        got = _take(bc, deep, 3)
        check(got == ["n", "x", "o"], f"the '#' subscriber got {got}")
    finally:
        bc.close()
    return None


def durable_subscription(ctx: Ctx) -> str | None:
    """Proton's ``DurableSubscription`` option, re-attached by link name and container-id."""
    topic = f"topic://interop.durable.{ctx.prefix}"
    cid, name = f"interop-py-{ctx.prefix}", f"sub-{ctx.prefix}"
    opts = [DurableSubscription(), _Capabilities("topic")]
    bc = _connect(ctx, cid)
    try:
        r = bc.create_receiver(topic, credit=0, name=name, options=opts)
        if r.link.remote_source.durability == Terminus.NONDURABLE:
            raise NotApplicable("the peer's answer to a durable subscription is not durable")
    finally:
        bc.close()  # the link ends with the connection, not closed: the subscription stays
    pub = _bc(ctx)
    try:
        _send(pub, topic, ["d1", "d2", "d3"])
    finally:
        pub.close()
    bc = _connect(ctx, cid)
    try:
        r = bc.create_receiver(topic, credit=10, name=name, options=opts)
        got = _take(bc, r, 3)
        check(got == ["d1", "d2", "d3"], f"the re-attached subscription had {got}")
        r.close()  # closed=true: unsubscribe
        _send(bc, topic, ["gone"])
        r = bc.create_receiver(topic, credit=10, name=name, options=opts)
        got = _take(bc, r, 0)
        check(got == [], f"after unsubscribing, a new subscription of that name had {got}")
        r.close()
    finally:
        bc.close()
    return None


def shared_subscription(ctx: Ctx) -> str | None:
    topic = f"topic://interop.shared.{ctx.prefix}"
    name = f"shared-{ctx.prefix}"
    caps = _Capabilities("topic", "shared", "global")
    c1, c2 = _bc(ctx), _bc(ctx)
    try:
        a = c1.create_receiver(topic, credit=0, name=name, options=caps)
        if "shared" not in _caps(a.link.remote_source):
            raise NotApplicable("the peer's answer carries no 'shared' capability")
        b = c2.create_receiver(topic, credit=0, name=f"{name}|2", options=caps)
        _send(c1, topic, [f"p{i}" for i in range(6)])
        a.link.flow(3)
        b.link.flow(3)
        got_a, got_b = _take(c1, a, 3, more=False), _take(c2, b, 3, more=False)
        check(
            sorted(got_a + got_b) == [f"p{i}" for i in range(6)],
            f"the two consumers got {got_a} and {got_b}",
        )
    finally:
        c1.close()
        c2.close()
    return None


def scheduled_delivery(ctx: Ctx) -> str | None:
    a = ctx.addr()
    bc = _bc(ctx)
    try:
        offered = bc.conn.remote_offered_capabilities
        if offered is None or symbol("DELAYED_DELIVERY") not in list(offered):
            raise NotApplicable("the peer does not offer DELAYED_DELIVERY")
        due_ms = int(time.time() * 1000) + 1500
        later = Message(body="later", annotations={symbol("x-opt-delivery-time"): due_ms})
        _publish(bc, a, [later, Message(body="now")])
        r = bc.create_receiver(a, credit=10, name=_name())
        first = r.receive(timeout=WAIT).body
        r.accept()
        check(first == "now", f"the first delivery was {first!r}, not 'now'")
        second = r.receive(timeout=WAIT).body
        arrived_ms = time.time() * 1000
        r.accept()
        r.close()
        check(second == "later", f"then {second!r}")
        check(
            arrived_ms >= due_ms - 50, f"'later' came {due_ms - arrived_ms:.0f} ms before its time"
        )
    finally:
        bc.close()
    return None


def message_groups(ctx: Ctx) -> str | None:
    a = ctx.addr()
    bc = _bc(ctx)
    try:
        msgs = [
            Message(body=f"{g}{i}", group_id=g, group_sequence=i)
            for i in range(1, 4)
            for g in "ABC"
        ]
        # both consumers have credit before the messages come: a broker without groups
        # would spread each group over the two
        r1 = bc.create_receiver(a, credit=9, name=_name())
        r2 = bc.create_receiver(a, credit=9, name=_name())
        _publish(bc, a, msgs)
        got: dict[int, list[str]] = {1: [], 2: []}
        for _ in range(9):
            for key, r in ((1, r1), (2, r2)):
                try:
                    got[key].append(r.receive(timeout=EMPTY_WAIT).body)
                    r.accept()
                except Timeout:
                    continue
            if len(got[1]) + len(got[2]) == 9:
                break
        for g in "ABC":
            owners = [k for k in got if any(b.startswith(g) for b in got[k])]
            check(len(owners) == 1, f"group {g} went to both consumers: {got}")
            seq = [b for b in got[owners[0]] if b.startswith(g)]
            check(seq == [f"{g}1", f"{g}2", f"{g}3"], f"group {g} arrived as {seq}")
    finally:
        bc.close()
    return None


def attach_answer(ctx: Ctx) -> str | None:
    a = ctx.addr()
    bc = _bc(ctx)
    notes = []
    try:
        # Proton takes a terminus without an address for none: give ours one
        mine = ctx.addr("mine")
        r = bc.create_receiver(a, credit=0, name=_name(), options=_OtherEnd(mine))
        src, tgt = r.link.remote_source, r.link.remote_target
        check(src.address == a, f"a receiver's answer had source address {src.address!r}")
        check(tgt.address == mine, f"a receiver's answer had target address {tgt.address!r}")
        if not _caps(src) & {"queue", "topic"}:
            notes.append("no queue/topic capability on its source")
        s = bc.create_sender(a, name=_name(), options=_OtherEnd(mine))
        check(
            s.link.remote_target.address == a,
            f"a sender's answer had target {s.link.remote_target.address!r}",
        )
        check(
            s.link.remote_source.address == mine,
            f"a sender's answer had source {s.link.remote_source.address!r}",
        )
        offered = {str(c) for c in list(bc.conn.remote_offered_capabilities or [])}
        missing = {"ANONYMOUS-RELAY", "DELAYED_DELIVERY", "SHARED-SUBS"} - offered
        if missing:
            notes.append(f"its open does not offer {', '.join(sorted(missing))}")
    finally:
        bc.close()
    return "; ".join(notes) or None


SCENARIOS: dict[str, Callable[[Ctx], str | None]] = conventions_of(globals())
