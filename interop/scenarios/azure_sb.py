"""The scenarios driven by the real ``azure-servicebus`` SDK (its pure-Python AMQP stack).

The SDK reaches our broker as a Service Bus namespace (``[servicebus]``, see
docs/servicebus.md): through the emulator connection string
(``UseDevelopmentEmulator=true``: plain AMQP on the given port), SASL ANONYMOUS
and a SAS token put on ``$cbs`` before each link; over TLS with the endpoint
``sb://127.0.0.1`` on the TLS port (``custom_endpoint_address``) and the
throwaway CA (``connection_verify``). Entities are the ones Service Bus has, so
each row uses entities declared in the broker's config (:func:`servicebus_config`):
a queue ``sb.<row>`` (with its ``$deadletterqueue``), or a topic ``sb.<row>`` with
subscriptions. A row is read in Service Bus terms: accepted is
``complete_message``, rejected is ``dead_letter_message`` (read back from the
dead-letter queue), modified is ``abandon_message``, at-most-once is the
``RECEIVE_AND_DELETE`` receive mode, rcv-settle-mode second is ``PEEK_LOCK``,
browse is ``peek_messages``, scheduled delivery ``schedule_messages``, message
groups are sessions, a selector or filter expression is a subscription's SQL or
correlation rule. What the SDK cannot express is n/a (:data:`NA`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..peers.base import HOST, PeerUnavailable
from . import Ctx, NotApplicable, check

__all__ = ["KEY", "KEY_NAME", "NA", "client_version", "prepare", "run", "servicebus_config"]

KEY_NAME, KEY = "RootManageSharedAccessKey", "interop-sas-key"
WAIT = 5.0  # seconds a receive call waits for what must be there
NOTHING = 0.5  # seconds a receive call waits for what must not come
LARGE = 1024 * 1024 - 1024
"""The large-message row's body: 1 MiB less 1 KiB, as the SDK's receivers take messages of
at most 1 MiB, encoded (the max-message-size they attach with)."""

_NO_DYNAMIC = "the SDK cannot attach a dynamic node (its replies go to named queues or sessions)"
NA: dict[str, str] = {
    "sasl-plain": "the SDK authenticates with claims (SAS tokens on $cbs), never SASL PLAIN",
    "outcome-release": "the SDK has no released outcome (abandon is modified: the outcome-modify row)",
    "drain": "the SDK grants credit per receive call and never drains",
    "request-response": _NO_DYNAMIC,
    "anonymous-relay": "the SDK's senders always name their entity",
    "link-resume": "the SDK has no link recovery: it attaches fresh links after a failure",
    "transactions": "azure-servicebus for Python has no transactions API",
    "attach-answer": "the SDK does not show the attach answer's termini or capabilities",
    "no-local": "Service Bus has no no-local filter (the SDK offers none)",
    "topic-wildcard": "Service Bus topics have no wildcards; fan-out to subscriptions is the durable-subscription row",
}

# the topics' subscriptions: (name, rules as [servicebus] takes them)
_TOPICS: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {
    "selector": [("red", [{"name": "red", "sql": "colour = 'red'"}]), ("all", [])],
    "filter-expressions": [
        ("props", [{"name": "p", "correlation": {"subject": "orders"}}]),
        ("app", [{"name": "a", "correlation": {"properties": {"colour": "red"}}}]),
        ("sql", [{"name": "s", "sql": "sys.Label = 'sales' AND n > 5"}]),
    ],
    "durable-subscription": [("one", []), ("two", [])],
    "shared-subscription": [("shared", [])],
}


def servicebus_config() -> str:
    """The broker's ``[servicebus]`` TOML: the key, a queue per row, the rows' topics."""
    from . import scenario_ids

    lines = ["[servicebus]", "enabled = true", f'shared_access_keys = [{{ name = "{KEY_NAME}", key = "{KEY}" }}]']
    for sid in scenario_ids():
        if sid not in _TOPICS and sid not in NA:
            lines += ["[[servicebus.queues]]", f'name = "sb.{sid}"', "max_delivery_count = 3"]
    for sid, subs in _TOPICS.items():
        lines += ["[[servicebus.topics]]", f'name = "sb.{sid}"']
        for name, rules in subs:
            lines += ["[[servicebus.topics.subscriptions]]", f'name = "{name}"']
            for rule in rules:
                lines.append("[[servicebus.topics.subscriptions.rules]]")
                lines += [f"{k} = {_toml(v)}" for k, v in rule.items()]
    return "\n".join(lines) + "\n"


def _toml(v: Any) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return f'"{v}"' if isinstance(v, str) else str(v)


def prepare(install: bool = False) -> None:
    try:
        import azure.servicebus  # noqa: F401
    except ImportError:
        raise PeerUnavailable("azure-servicebus is not installed (pip install 'amqp10[test]')") from None


def client_version() -> str:
    from azure.servicebus import __version__

    return f"azure-servicebus {__version__}"


@contextmanager
def _client(ctx: Ctx, *, tls: bool = False, **kw: Any) -> Iterator[Any]:
    from azure.servicebus import ServiceBusClient, TransportType

    ep = ctx.ep
    if tls:
        if ep.tls_port is None or ep.ca is None:
            raise NotApplicable("the peer has no TLS listener")
        c = ServiceBusClient.from_connection_string(
            f"Endpoint=sb://{HOST};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}",
            custom_endpoint_address=f"sb://{HOST}:{ep.tls_port}",
            transport_type=TransportType.Amqp,  # (a custom endpoint is WebSockets unless told)
            connection_verify=str(ep.ca),
            retry_total=0,
            **kw,
        )
    else:
        c = ServiceBusClient.from_connection_string(
            f"Endpoint=sb://{HOST}:{ep.port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
            "UseDevelopmentEmulator=true",
            retry_total=0,
            **kw,
        )
    with c:
        yield c


def _q(ctx: Ctx) -> str:
    return f"sb.{ctx.scenario}"


def _receive(r: Any, n: int, wait: float = WAIT) -> list[Any]:
    """Up to ``n`` messages, asking again while fewer came (a bounded number of times)."""
    got: list[Any] = []
    for _ in range(5):
        got += r.receive_messages(max_message_count=n - len(got), max_wait_time=wait)
        if len(got) >= n:
            break
    return got


def _nothing(r: Any) -> bool:
    """Whether no message comes within :data:`NOTHING` seconds."""
    return not r.receive_messages(max_message_count=1, max_wait_time=NOTHING)


def _bodies(msgs: list[Any]) -> list[str]:
    return [str(m) for m in msgs]


def _send(c: Any, entity: str, *bodies: Any, topic: bool = False) -> None:
    from azure.servicebus import ServiceBusMessage

    with c.get_topic_sender(entity) if topic else c.get_queue_sender(entity) as s:
        s.send_messages([b if not isinstance(b, str) else ServiceBusMessage(b) for b in bodies])


def _roundtrip(c: Any, q: str, mode: str = "peek-lock") -> list[str]:
    from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode

    with c.get_queue_sender(q) as s:
        s.send_messages(ServiceBusMessage("m0"))
        batch = s.create_message_batch()
        for i in (1, 2):
            batch.add_message(ServiceBusMessage(f"m{i}"))
        s.send_messages(batch)
    receive_mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE if mode == "delete" else ServiceBusReceiveMode.PEEK_LOCK
    with c.get_queue_receiver(q, receive_mode=receive_mode) as r:
        got = _receive(r, 3)
        if mode != "delete":
            for m in got:
                r.complete_message(m)
        check(_nothing(r), "a settled message came again")
    return _bodies(got)


def sasl_anonymous(ctx: Ctx) -> None:
    with _client(ctx) as c:
        check(_roundtrip(c, _q(ctx)) == ["m0", "m1", "m2"], "the round trip after connecting failed")


def at_most_once(ctx: Ctx) -> None:
    with _client(ctx) as c:
        got = _roundtrip(c, _q(ctx), "delete")
    check(got == ["m0", "m1", "m2"], f"RECEIVE_AND_DELETE got {got}")


def at_least_once(ctx: Ctx) -> None:
    with _client(ctx) as c:
        got = _roundtrip(c, _q(ctx))
    check(got == ["m0", "m1", "m2"], f"PEEK_LOCK got {got} (one message, then a batch of two)")


def tls(ctx: Ctx) -> None:
    with _client(ctx, tls=True) as c:
        got = _roundtrip(c, _q(ctx))
    check(got == ["m0", "m1", "m2"], f"over TLS got {got}")


def outcome_reject(ctx: Ctx) -> None:
    q = _q(ctx)
    with _client(ctx) as c:
        _send(c, q, "bad")
        with c.get_queue_receiver(q) as r:
            got = _receive(r, 1)
            check(_bodies(got) == ["bad"], f"got {_bodies(got)}")
            r.dead_letter_message(got[0], reason="rejected", error_description="by the interop row")
            check(_nothing(r), "a dead-lettered message came again")
        with c.get_queue_receiver(q + "/$deadletterqueue") as r:
            dead = _receive(r, 1)
            check(
                [(str(m), m.dead_letter_reason, m.dead_letter_error_description) for m in dead]
                == [("bad", "rejected", "by the interop row")],
                f"the dead-letter queue has {[(str(m), m.dead_letter_reason) for m in dead]}",
            )
            r.complete_message(dead[0])


def outcome_modify(ctx: Ctx) -> None:
    q = _q(ctx)
    with _client(ctx) as c:
        _send(c, q, "again")
        with c.get_queue_receiver(q) as r:
            first = _receive(r, 1)
            check(_bodies(first) == ["again"], f"got {_bodies(first)}")
            r.abandon_message(first[0])
            second = _receive(r, 1)
            check(_bodies(second) == ["again"], f"after abandon got {_bodies(second)}")
            check(
                (second[0].delivery_count or 0) == (first[0].delivery_count or 0) + 1,
                f"delivery count {first[0].delivery_count} then {second[0].delivery_count}",
            )
            r.complete_message(second[0])


def large_message(ctx: Ctx) -> str:
    from azure.servicebus import ServiceBusMessage

    q = _q(ctx)
    payload = os.urandom(LARGE)
    with _client(ctx) as c:
        with c.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage(payload))  # one message, not a batch of one
        with c.get_queue_receiver(q) as r:
            got = _receive(r, 1, WAIT * 3)
            check(len(got) == 1, "the 1 MiB message did not arrive")
            data = b"".join(got[0].body)
            check(data == payload, f"received {len(data)} bytes that differ from the {LARGE} sent")
            r.complete_message(got[0])
    return "1 MiB less 1 KiB: the SDK's receivers attach with max-message-size 1 MiB"


def message_sections(ctx: Ctx) -> str:
    from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageHeader, AmqpMessageProperties

    q = _q(ctx)
    sent = AmqpAnnotatedMessage(
        value_body={"k": [1, 2.5, "x", b"\x00\x01"], "n": None},
        header=AmqpMessageHeader(durable=True, priority=7, time_to_live=60_000),
        properties=AmqpMessageProperties(
            message_id="mid-1",
            correlation_id="cid-1",
            subject="subj",
            to="dest",
            reply_to="sb.replies",
            content_type="application/x-test",
            group_id="g1",
        ),
        application_properties={"s": "v", "i": 42, "f": 1.5, "b": True},
        annotations={"x-opt-interop": "yes"},
        footer={"x-opt-footer": "f"},
    )
    with _client(ctx) as c:
        with c.get_queue_sender(q) as s:
            s.send_messages(sent)
        with c.get_queue_receiver(q) as r:
            got = _receive(r, 1)
            check(len(got) == 1, "the message did not arrive")
            raw = got[0].raw_amqp_message
            r.complete_message(got[0])
    bad = []
    p, gp = sent.properties, raw.properties
    for name in ("message_id", "correlation_id", "subject", "to", "reply_to", "content_type", "group_id"):
        want, have = getattr(p, name), getattr(gp, name)
        have = have.decode() if isinstance(have, bytes) else have
        if want != have:
            bad.append(f"properties.{name} {want!r} -> {have!r}")
    if raw.body != _as_read(sent.body):
        bad.append(f"body {sent.body!r} -> {raw.body!r}")
    if raw.application_properties != _as_read(sent.application_properties):
        bad.append(f"application properties -> {raw.application_properties!r}")
    if (raw.annotations or {}).get(b"x-opt-interop") != b"yes":
        bad.append(f"message annotations -> {raw.annotations!r}")
    if raw.header.priority != 7 or not raw.header.durable:
        bad.append(f"header -> priority {raw.header.priority}, durable {raw.header.durable}")
    if (raw.footer or {}).get(b"x-opt-footer") != b"f":
        bad.append(f"footer -> {raw.footer!r}")
    check(not bad, "changed in transit: " + "; ".join(bad))
    return _NO_DELIVERY_ANNOTATIONS


def _as_read(v: Any) -> Any:
    """``v`` as the SDK gives back what was sent as ``v``: its strings as bytes."""
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, dict):
        return {_as_read(k): _as_read(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_read(x) for x in v]
    return v


_NO_DELIVERY_ANNOTATIONS = (
    "every section but delivery annotations: the SDK encodes those after the footer, out of "
    "the order of Part 3 §3.2, and the broker rejects the message as malformed (the SDK then "
    "waits for ever: it reads a rejection's error info by index, and ours omits the empty info)"
)


def browse(ctx: Ctx) -> None:
    q = _q(ctx)
    with _client(ctx) as c:
        _send(c, q, "b0", "b1")
        with c.get_queue_receiver(q) as r:
            peeked = r.peek_messages(max_message_count=5)
            check(_bodies(peeked) == ["b0", "b1"], f"peek_messages got {_bodies(peeked)}")
            again = r.peek_messages(max_message_count=5, sequence_number=peeked[1].sequence_number)
            check(_bodies(again) == ["b1"], f"peek from a sequence number got {_bodies(again)}")
            got = _receive(r, 2)
            check(_bodies(got) == ["b0", "b1"], f"the peeked messages were not left in place: {_bodies(got)}")
            for m in got:
                r.complete_message(m)


def idle_timeout(ctx: Ctx) -> str | None:
    idle = ctx.ep.idle_timeout
    if not idle:
        raise NotApplicable("the peer advertises no idle timeout")
    q = _q(ctx)
    # each sender and receiver has a connection of its own; an idle sender's is kept alive by
    # a thread every keep_alive seconds (30 by default: longer than the peer's idle timeout)
    alive = max(1, int(idle / 2))
    with _client(ctx) as c, c.get_queue_sender(q, keep_alive=alive) as s, c.get_queue_receiver(q) as r:
        s.send_messages(_message("before"))
        got = _receive(r, 1)
        check(_bodies(got) == ["before"], f"got {_bodies(got)}")
        r.complete_message(got[0])
        # idle for longer than the timeout; the receiver's wait keeps its connection turning
        check(not r.receive_messages(max_message_count=1, max_wait_time=2.5 * idle), "something arrived")
        s.send_messages(_message("after"))
        got = _receive(r, 1)
        check(_bodies(got) == ["after"], f"after {2.5 * idle:g}s idle the connection did not carry on: {_bodies(got)}")
        r.complete_message(got[0])
    return f"the sender with keep_alive={alive}s: the SDK's 30s default lets an idle sender's connection lapse"


def _message(body: str, **kw: Any) -> Any:
    from azure.servicebus import ServiceBusMessage

    return ServiceBusMessage(body, **kw)


def rcv_settle_second(ctx: Ctx) -> None:
    """PEEK_LOCK attaches with rcv-settle-mode second: completing settles in two steps."""
    with _client(ctx) as c:
        got = _roundtrip(c, _q(ctx))
    check(got == ["m0", "m1", "m2"], f"PEEK_LOCK got {got}")


def outcome_accept(ctx: Ctx) -> None:
    q = _q(ctx)
    with _client(ctx) as c:
        _send(c, q, "done")
        with c.get_queue_receiver(q) as r:
            got = _receive(r, 1)
            check(_bodies(got) == ["done"], f"got {_bodies(got)}")
            r.complete_message(got[0])
        with c.get_queue_receiver(q) as r:
            check(r.peek_messages(max_message_count=1) == [], "a completed message is still in the queue")


def scheduled_delivery(ctx: Ctx) -> None:
    """Scheduled 1 s ahead, another cancelled; the one delivered keeps the sequence number
    schedule_messages gave it (Service Bus keeps it for life): on delivery, in a peek, and
    to take it back by that number after a defer."""
    q = _q(ctx)
    now = datetime.datetime.now(datetime.UTC)
    with _client(ctx) as c:
        with c.get_queue_sender(q) as s:
            soon, later = s.schedule_messages([_message("soon"), _message("cancelled")], now + datetime.timedelta(seconds=1))
            s.cancel_scheduled_messages(later)
        with c.get_queue_receiver(q) as r:
            got = _receive(r, 1, WAIT)
            check(_bodies(got) == ["soon"], f"got {_bodies(got)}")
            seq = got[0].sequence_number
            check(seq == soon, f"delivered with sequence number {seq}, not the {soon} schedule_messages gave")
            r.abandon_message(got[0])
            peeked = r.peek_messages(max_message_count=1, sequence_number=soon)
            check([m.sequence_number for m in peeked] == [soon], f"peek from {soon} got {[m.sequence_number for m in peeked]}")
            got = _receive(r, 1, WAIT)
            check(_bodies(got) == ["soon"], f"got {_bodies(got)} after the abandon")
            r.defer_message(got[0])
            back = r.receive_deferred_messages([soon])
            check(_bodies(back) == ["soon"], f"receive_deferred_messages([{soon}]) got {_bodies(back)}")
            r.complete_message(back[0])
            check(_nothing(r), "the cancelled message was delivered")


def message_groups(ctx: Ctx) -> None:
    q = _q(ctx)
    with _client(ctx) as c:
        _send(c, q, *[_message(f"{g}{i}", session_id=g) for i in (1, 2) for g in ("A", "B")])
        seen = {}
        for g in ("B", "A"):
            with c.get_queue_receiver(q, session_id=g) as r:
                got = _receive(r, 2)
                seen[g] = _bodies(got)
                for m in got:
                    r.complete_message(m)
        check(seen == {"A": ["A1", "A2"], "B": ["B1", "B2"]}, f"the sessions got {seen}")


def _subscriptions(ctx: Ctx, sent: list[Any], want: dict[str, list[str]]) -> None:
    """Publish ``sent`` to the row's topic; each subscription must get what ``want`` says
    (received and completed), and nothing more."""
    topic = _q(ctx)
    seen = {}
    with _client(ctx) as c:
        _send(c, topic, *sent, topic=True)
        for name, _rules in _TOPICS[ctx.scenario]:
            with c.get_subscription_receiver(topic, name) as r:
                got = _receive(r, len(want[name]))
                got += r.receive_messages(max_message_count=1, max_wait_time=NOTHING)
                seen[name] = _bodies(got)
                for m in got:
                    r.complete_message(m)
    check(seen == want, f"the subscriptions got {seen}")


def selector(ctx: Ctx) -> str:
    sent = [_message(b, application_properties={"colour": c}) for b, c in [("r1", "red"), ("b1", "blue"), ("r2", "red")]]
    _subscriptions(ctx, sent, {"red": ["r1", "r2"], "all": ["r1", "b1", "r2"]})
    return "as a subscription's SQL rule (Service Bus filters are rules on a topic)"


def filter_expressions(ctx: Ctx) -> str:
    sent = [
        _message(f"{kind}{i}", subject=subject, application_properties={"colour": colour, "n": n})
        for i in (1, 2)
        for kind, subject, colour, n in [("p", "orders", "blue", 0), ("a", "sales", "red", 0), ("s", "sales", "blue", 7)]
    ]
    _subscriptions(ctx, sent, {"props": ["p1", "p2"], "app": ["a1", "a2"], "sql": ["s1", "s2"]})
    return "as subscription rules: correlation filters (properties, application properties) and SQL"


def durable_subscription(ctx: Ctx) -> None:
    sent = [_message("kept-1"), _message("kept-2")]  # with no receiver attached
    _subscriptions(ctx, sent, {"one": ["kept-1", "kept-2"], "two": ["kept-1", "kept-2"]})


def shared_subscription(ctx: Ctx) -> None:
    topic = _q(ctx)
    with _client(ctx) as c:
        _send(c, topic, *[_message(f"s{i}") for i in range(6)], topic=True)
        with c.get_subscription_receiver(topic, "shared", prefetch_count=0) as r1, c.get_subscription_receiver(
            topic, "shared", prefetch_count=0
        ) as r2:
            got: dict[str, list[str]] = {"r1": [], "r2": []}
            for _ in range(6):
                for name, r in (("r1", r1), ("r2", r2)):
                    for m in r.receive_messages(max_message_count=1, max_wait_time=NOTHING):
                        got[name].append(str(m))
                        r.complete_message(m)
                if len(got["r1"]) + len(got["r2"]) >= 6:
                    break
    check(sorted(got["r1"] + got["r2"]) == [f"s{i}" for i in range(6)], f"the two receivers got {got}")
    check(got["r1"] and got["r2"], f"one receiver got everything: {got}")


SCENARIOS: dict[str, Callable[[Ctx], str | None]] = {
    "sasl-anonymous": sasl_anonymous,
    "at-most-once": at_most_once,
    "at-least-once": at_least_once,
    "rcv-settle-second": rcv_settle_second,
    "outcome-accept": outcome_accept,
    "outcome-reject": outcome_reject,
    "outcome-modify": outcome_modify,
    "large-message": large_message,
    "message-sections": message_sections,
    "browse": browse,
    "tls": tls,
    "idle-timeout": idle_timeout,
    "selector": selector,
    "filter-expressions": filter_expressions,
    "durable-subscription": durable_subscription,
    "shared-subscription": shared_subscription,
    "scheduled-delivery": scheduled_delivery,
    "message-groups": message_groups,
}


def run(ctx: Ctx) -> str | None:
    fn = SCENARIOS.get(ctx.scenario)
    if fn is None:  # pragma: no cover - NA covers the rest
        raise NotApplicable("no azure-servicebus scenario for it")
    return fn(ctx)
