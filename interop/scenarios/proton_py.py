"""The scenarios driven by python-qpid-proton's clients (``BlockingConnection`` and the reactor).

Each scenario runs in a worker thread joined with a time limit (every
BlockingConnection wait is bounded too). Each connection owns its own
Container, as Proton requires (one per thread).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from proton import SASL, Delivery, Endpoint, Link, Message, SSLDomain, Terminus, Timeout, symbol
from proton.handlers import MessagingHandler
from proton.reactor import AtLeastOnce, AtMostOnce, Container, Copy, LinkOption
from proton.utils import BlockingConnection, SyncRequestResponse

from . import Ctx, NotApplicable, ScenarioFailed, check

__all__ = ["NA", "SCENARIOS", "run"]

WAIT = 10.0
LIMIT = 60.0
EMPTY_WAIT = 0.8
IDLE = 2.0
IDLE_WAIT_MAX = 12.0
LARGE = 1024 * 1024

NA = {
    "link-resume": "python-qpid-proton has no link recovery: an attach never carries an unsettled map",
    "transactions": "python-qpid-proton's blocking API has no transactions (its reactor's run"
    " against our broker in tests/broker/amqp1/test_transactions_proton.py)",
}


class _SecondMode(LinkOption):
    """rcv-settle-mode second (and unsettled sends): what Proton has no ready-made option for."""

    def apply(self, link: Any) -> None:
        link.snd_settle_mode = Link.SND_UNSETTLED
        link.rcv_settle_mode = Link.RCV_SECOND


def _bc(ctx: Ctx, url: str | None = None, **kwargs: Any) -> BlockingConnection:
    return BlockingConnection(url or ctx.ep.url, timeout=WAIT, **kwargs)


def _name() -> str:
    return f"interop-{uuid.uuid4().hex[:8]}"


def _send(bc: BlockingConnection, address: str, bodies: list[Any], options: Any = None) -> None:
    snd = bc.create_sender(address, name=_name(), options=options or AtLeastOnce())
    for b in bodies:
        d = snd.send(Message(body=b))  # raises SendException unless accepted
        if snd.link.snd_settle_mode != Link.SND_SETTLED:
            check(d.remote_state == Delivery.ACCEPTED, f"send of {b!r} got state {d.remote_state}")
    snd.close()


def _expect_empty(bc: BlockingConnection, address: str) -> None:
    r = bc.create_receiver(address, credit=1, name=_name())
    try:
        m = r.receive(timeout=EMPTY_WAIT)
    except Timeout:
        r.close()
        return
    r.release(delivered=False)
    r.close()
    raise ScenarioFailed(f"{address} should be empty, but it still had {m.body!r}")


def _roundtrip(bc: BlockingConnection, address: str) -> None:
    body = f"ping-{uuid.uuid4().hex[:8]}"
    _send(bc, address, [body])
    r = bc.create_receiver(address, credit=1, name=_name())
    m = r.receive(timeout=WAIT)
    check(m.body == body, f"received {m.body!r}, sent {body!r}")
    r.accept()
    r.close()


# -- scenarios --------------------------------------------------------------------------
def sasl_anonymous(ctx: Ctx) -> str | None:
    bc = _bc(ctx, allowed_mechs="ANONYMOUS")
    try:
        sasl = bc.conn.transport.sasl()
        check(
            sasl.outcome == SASL.OK and sasl.mech == "ANONYMOUS",
            f"SASL outcome {sasl.outcome}, mech {sasl.mech}",
        )
        _roundtrip(bc, ctx.addr())
    finally:
        bc.close()
    return None


def sasl_plain(ctx: Ctx) -> str | None:
    if ctx.ep.plain is None:
        raise NotApplicable("the peer has no PLAIN credentials configured")
    user, password = ctx.ep.plain
    bc = _bc(ctx, user=user, password=password, allowed_mechs="PLAIN", allow_insecure_mechs=True)
    try:
        sasl = bc.conn.transport.sasl()
        check(
            sasl.outcome == SASL.OK and sasl.mech == "PLAIN",
            f"SASL outcome {sasl.outcome}, mech {sasl.mech}",
        )
        _roundtrip(bc, ctx.addr())
    finally:
        bc.close()
    return None


def at_most_once(ctx: Ctx) -> str | None:
    a, bodies = ctx.addr(), [f"m{i}" for i in range(10)]
    bc = _bc(ctx)
    try:
        _send(bc, a, bodies, AtMostOnce())
        r = bc.create_receiver(a, credit=20, name=_name(), options=AtMostOnce())
        if r.link.remote_snd_settle_mode != Link.SND_SETTLED:
            raise NotApplicable(
                f"the peer's sender answered snd-settle-mode {r.link.remote_snd_settle_mode}"
            )
        got = [r.receive(timeout=WAIT).body for _ in bodies]
        check(got == bodies, f"received {got}")
        check(
            not r.fetcher.unsettled, f"{len(r.fetcher.unsettled)} deliveries were not pre-settled"
        )
        r.close()
    finally:
        bc.close()
    return None


class _ReactorSender(MessagingHandler):
    """Sends ``bodies`` unsettled on the reactor; counts the outcomes; closes when all are in."""

    def __init__(self, url: str, address: str, bodies: list[Any]) -> None:
        super().__init__()
        self.url, self.address, self.bodies = url, address, bodies
        self.sent = self.accepted = 0
        self.problems: list[str] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        event.container.create_sender(conn, self.address, options=AtLeastOnce())

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < len(self.bodies):
            event.sender.send(Message(body=self.bodies[self.sent]))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == len(self.bodies):
            event.connection.close()

    def on_rejected(self, event: Any) -> None:
        self.problems.append("a message was rejected")
        event.connection.close()

    def on_released(self, event: Any) -> None:
        self.problems.append("a message was released")
        event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        self.problems.append(f"transport error: {event.transport.condition}")


class _ReactorReceiver(MessagingHandler):
    """Receives ``n`` messages on the reactor and accepts each (auto_accept off, to see settlement)."""

    def __init__(self, url: str, address: str, n: int) -> None:
        super().__init__(prefetch=20, auto_accept=False)
        self.url, self.address, self.n = url, address, n
        self.got: list[Any] = []
        self.presettled = 0
        self.problems: list[str] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        event.container.create_receiver(conn, self.address, options=AtLeastOnce())

    def on_message(self, event: Any) -> None:
        self.got.append(event.message.body)
        if event.delivery.settled:
            self.presettled += 1
        self.accept(event.delivery)
        if len(self.got) == self.n:
            event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        self.problems.append(f"transport error: {event.transport.condition}")


def _run_reactor(handler: Any) -> None:
    c = Container(handler)
    c.timeout = 0.5
    t = threading.Thread(target=c.run, name="proton-reactor", daemon=True)
    t.start()
    t.join(WAIT)
    if t.is_alive():
        c.stop()
        t.join(2)
        raise ScenarioFailed(f"the reactor client did not finish within {WAIT:g}s")
    if handler.problems:
        raise ScenarioFailed(handler.problems[0])


def at_least_once(ctx: Ctx) -> str | None:
    """On the reactor (MessagingHandler): the other scenarios use BlockingConnection."""
    a, bodies = ctx.addr(), [f"m{i}" for i in range(10)]
    snd = _ReactorSender(ctx.ep.url, a, bodies)
    _run_reactor(snd)
    check(snd.accepted == len(bodies), f"{snd.accepted} of {len(bodies)} sends were accepted")
    rcv = _ReactorReceiver(ctx.ep.url, a, len(bodies))
    _run_reactor(rcv)
    check(rcv.got == bodies, f"received {rcv.got}")
    check(not rcv.presettled, "the peer pre-settled deliveries on an at-least-once link")
    bc = _bc(ctx)
    try:
        _expect_empty(bc, a)
    finally:
        bc.close()
    return None


def rcv_settle_second(ctx: Ctx) -> str | None:
    a = ctx.addr()
    bc = _bc(ctx)
    try:
        snd = bc.create_sender(a, name=_name(), options=_SecondMode())
        if snd.link.remote_rcv_settle_mode != Link.RCV_SECOND:
            raise NotApplicable("the peer's receiver answered rcv-settle-mode first")
        d = snd.link.send(Message(body="two-phase"))
        bc.wait(
            lambda: d.remote_state == Delivery.ACCEPTED, timeout=WAIT, msg="waiting for accepted"
        )
        check(not d.settled, "the peer settled at once, though rcv-settle-mode is second")
        d.settle()  # the peer settles once we have
        snd.close()
        r = bc.create_receiver(a, credit=1, name=_name(), options=_SecondMode())
        m = r.receive(timeout=WAIT)
        check(m.body == "two-phase", f"received {m.body!r}")
        rd = r.fetcher.unsettled.popleft()
        rd.update(Delivery.ACCEPTED)  # not settled: we wait for the sender to settle first
        bc.wait(lambda: rd.settled, timeout=WAIT, msg="waiting for the sender to settle")
        rd.settle()
        r.close()
        _expect_empty(bc, a)
    finally:
        bc.close()
    return None


def _outcome(ctx: Ctx, kind: str) -> str | None:
    a = ctx.addr()
    note = None
    bc = _bc(ctx)
    try:
        _send(bc, a, [f"{kind}-me"])
        r = bc.create_receiver(a, credit=1, name=_name())
        m = r.receive(timeout=WAIT)
        check(m.body == f"{kind}-me", f"received {m.body!r}")
        if kind == "accept":
            r.accept()
        elif kind == "reject":
            r.reject()
        elif kind == "release":
            r.release(delivered=False)
        else:
            r.fetcher.unsettled[0].local.failed = True
            r.release(delivered=True)  # modified, delivery-failed
        if kind in ("release", "modify"):
            try:
                again = r.receive(timeout=WAIT)
            except Timeout:
                raise ScenarioFailed(f"the {kind}d message was not redelivered") from None
            check(again.body == f"{kind}-me", f"redelivered {again.body!r}")
            if kind == "modify" and again.delivery_count < 1:
                note = f"redelivered with delivery-count {again.delivery_count}"
            r.accept()
        r.close()
        _expect_empty(bc, a)
    finally:
        bc.close()
    return note


def large_message(ctx: Ctx) -> str | None:
    a = ctx.addr()
    payload = os.urandom(LARGE)
    bc = _bc(ctx)
    try:
        snd = bc.create_sender(a, name=_name())
        snd.send(Message(body=payload, inferred=True))  # a data section
        snd.close()
        r = bc.create_receiver(a, credit=1, name=_name())
        m = r.receive(timeout=WAIT * 3)
        check(
            bytes(m.body) == payload,
            f"received {len(bytes(m.body))} bytes that differ from the {LARGE} sent",
        )
        r.accept()
        r.close()
    finally:
        bc.close()
    return None


def message_sections(ctx: Ctx) -> str | None:
    from .ours import FIDELITY_APP, FIDELITY_BODY

    a = ctx.addr()
    sent = Message(
        body=dict(FIDELITY_BODY),
        durable=True,
        priority=7,
        ttl=600.0,
        id=uuid.UUID(int=0x1234),
        subject="fidelity",
        reply_to="interop.reply",
        correlation_id="corr-1",
        content_type="application/x-interop",
        creation_time=1700000000.0,
        group_id="group",
        group_sequence=3,
    )
    sent.reply_to_group_id = "reply-group"
    sent.properties = dict(FIDELITY_APP)
    sent.annotations = {symbol("x-opt-interop"): "yes"}
    bc = _bc(ctx)
    try:
        _send_messages(bc, a, [sent])
        r = bc.create_receiver(a, credit=1, name=_name())
        got = r.receive(timeout=WAIT)
        r.accept()
        r.close()
    finally:
        bc.close()
    bad = []
    if _plain(got.body) != _plain(sent.body):
        bad.append(f"body {got.body!r}")
    for name in ("durable", "priority", "ttl", "id", "subject", "reply_to", "correlation_id", "content_type",
                 "creation_time", "group_id", "group_sequence", "reply_to_group_id"):  # fmt: skip
        if getattr(got, name) != getattr(sent, name):
            bad.append(f"{name} {getattr(got, name)!r}")
    if _plain(got.properties) != _plain(sent.properties):
        bad.append(f"application-properties {got.properties!r}")
    if (got.annotations or {}).get(symbol("x-opt-interop")) != "yes":
        bad.append("message-annotation x-opt-interop")
    check(not bad, "changed in transit: " + "; ".join(bad))
    return None


def _plain(value: Any) -> Any:
    """Proton decodes binary as memoryview: compare as bytes."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _send_messages(bc: BlockingConnection, address: str, messages: list[Message]) -> None:
    snd = bc.create_sender(address, name=_name(), options=AtLeastOnce())
    for m in messages:
        d = snd.send(m)
        check(d.remote_state == Delivery.ACCEPTED, f"the send got state {d.remote_state}")
    snd.close()


def drain(ctx: Ctx) -> str | None:
    a = ctx.addr()
    bc = _bc(ctx)
    try:
        _send(bc, a, ["d0", "d1"])
        r = bc.create_receiver(a, credit=0, name=_name())
        r.link.drain(5)
        # Proton counts deliveries not yet taken off the link (queued) as credit still in use
        bc.wait(
            lambda: not r.link.draining() and not r.link.queued,
            timeout=WAIT,
            msg="waiting for the drain",
        )
        check(r.link.credit == 0, f"credit after the drain is {r.link.credit}")
        got = []
        while r.fetcher.has_message:
            got.append(r.receive(timeout=WAIT).body)
            r.accept()
        check(got == ["d0", "d1"], f"the drain brought {got}")
        r.close()
    finally:
        bc.close()
    return None


def request_response(ctx: Ctx) -> str | None:
    a = ctx.addr("requests")
    errors: list[BaseException] = []
    ready = threading.Event()

    def serve() -> None:
        try:
            sbc = _bc(ctx)
            try:
                r = sbc.create_receiver(a, credit=5, name=_name())
                ready.set()
                req = r.receive(timeout=WAIT)
                r.accept()
                reply = sbc.create_sender(req.reply_to, name=_name())
                reply.send(Message(body=str(req.body).upper(), correlation_id=req.correlation_id))
            finally:
                sbc.close()
        except BaseException as exc:
            errors.append(exc)
            ready.set()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ready.wait(WAIT)
    bc = _bc(ctx)
    try:
        client = SyncRequestResponse(bc, a)
        check(client.reply_to, "the peer assigned no address to the dynamic receiver")
        response = client.call(Message(body="ping"))
        check(response.body == "PING", f"the response body is {response.body!r}")
    finally:
        bc.close()
        t.join(WAIT)
    if errors:
        raise errors[0]
    return None


REQUESTS = ["Twas brillig, and the slithy toves", "Did gire and gymble in the wabe."]


class _RelayServer(MessagingHandler):
    """Behaves like Proton's examples/python/server.py: asks for ANONYMOUS-RELAY, then
    answers every request through one sender with no target, addressed to its
    reply-to. Closes after ``n`` requests (the example runs until interrupted)."""

    def __init__(self, url: str, address: str, n: int) -> None:
        super().__init__()
        self.url, self.address, self.n = url, address, n
        self.served = 0
        self.ready = threading.Event()
        self.problems: list[str] = []

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, desired_capabilities="ANONYMOUS-RELAY")

    def on_connection_opened(self, event: Any) -> None:
        caps = event.connection.remote_offered_capabilities
        if not caps or "ANONYMOUS-RELAY" not in caps:
            self.problems.append("the broker does not offer ANONYMOUS-RELAY")
            event.connection.close()
            self.ready.set()
            return
        self.receiver = event.container.create_receiver(self.conn, self.address)
        self.server = event.container.create_sender(self.conn, None)

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_receiver:
            self.ready.set()

    def on_message(self, event: Any) -> None:
        m = event.message
        self.server.send(Message(address=m.reply_to, body=m.body.upper(), correlation_id=m.correlation_id))
        self.served += 1
        if self.served == self.n:
            event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        self.problems.append(f"transport error: {event.transport.condition}")
        self.ready.set()


class _RelayClient(MessagingHandler):
    """Behaves like Proton's examples/python/client.py: a dynamic receiver for the replies,
    one request at a time, each answer matched by correlation-id."""

    def __init__(self, url: str, address: str, requests: list[str]) -> None:
        super().__init__(auto_accept=False)
        self.url, self.address, self.requests = url, address, list(requests)
        self.outstanding: dict[int, str] = {}
        self.msgs = 0
        self.answers: list[tuple[str, str]] = []
        self.problems: list[str] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(conn, self.address)
        self.receiver = event.container.create_receiver(conn, None, dynamic=True)

    def next_request(self) -> None:
        if self.receiver.remote_source.address:
            request = self.requests.pop(0)
            req = Message(reply_to=self.receiver.remote_source.address, correlation_id=self.msgs, body=request)
            self.outstanding[self.msgs] = request
            self.msgs += 1
            self.sender.send(req)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver == self.receiver:
            self.next_request()

    def on_message(self, event: Any) -> None:
        if self.requests:
            self.next_request()
        request = self.outstanding.pop(event.message.correlation_id, None)
        if request is None:
            self.problems.append(f"a reply with an unknown correlation-id {event.message.correlation_id!r}")
            self.reject(event.delivery)
        else:
            self.answers.append((request, event.message.body))
            self.accept(event.delivery)
        if not self.outstanding:
            event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        self.problems.append(f"transport error: {event.transport.condition}")


def anonymous_relay(ctx: Ctx) -> str | None:
    """Proton's server.py against client.py, then sync_client.py, through our broker
    (scenarios written to behave like those examples; they are not in the wheel)."""
    a = ctx.addr("examples")
    server = _RelayServer(ctx.ep.url, a, 2 * len(REQUESTS))
    sc = Container(server)
    sc.timeout = 0.5
    st = threading.Thread(target=sc.run, name="proton-relay-server", daemon=True)
    st.start()
    try:
        check(server.ready.wait(WAIT), "the server's receiver was not attached in time")
        if server.problems:
            raise NotApplicable(server.problems[0])
        client = _RelayClient(ctx.ep.url, a, REQUESTS)
        _run_reactor(client)
        expected = [(r, r.upper()) for r in REQUESTS]
        check(client.answers == expected, f"client.py got {client.answers}")
        bc = _bc(ctx)
        try:
            sync = SyncRequestResponse(bc, a)
            got = [sync.call(Message(body=r)).body for r in REQUESTS]
            check(got == [r.upper() for r in REQUESTS], f"sync_client.py got {got}")
        finally:
            bc.close()
    finally:
        st.join(WAIT)
        if st.is_alive():
            sc.stop()
            st.join(2)
    if server.problems:
        raise ScenarioFailed(server.problems[0])
    return None


def browse(ctx: Ctx) -> str | None:
    a, bodies = ctx.addr(), ["b0", "b1", "b2"]
    bc = _bc(ctx)
    try:
        _send(bc, a, bodies)
        b = bc.create_receiver(a, credit=10, name=_name(), options=Copy())
        if b.link.remote_source.distribution_mode != Terminus.DIST_MODE_COPY:
            raise NotApplicable("the peer did not answer distribution-mode copy")
        seen = [b.receive(timeout=WAIT).body for _ in bodies]
        check(seen == bodies, f"browsed {seen}")
        while b.fetcher.unsettled:
            b.accept()
        b.close()
        r = bc.create_receiver(a, credit=10, name=_name())
        got = [r.receive(timeout=WAIT).body for _ in bodies]
        check(got == bodies, f"after browsing, consumed {got}")
        for _ in bodies:
            r.accept()
        r.close()
    finally:
        bc.close()
    return None


def tls(ctx: Ctx) -> str | None:
    ep = ctx.ep
    if ep.tls_url is None or ep.ca is None:
        raise NotApplicable("the peer has no TLS listener")
    dom = SSLDomain(SSLDomain.MODE_CLIENT)
    dom.set_trusted_ca_db(str(ep.ca))
    dom.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    bc = _bc(ctx, url=ep.tls_url, ssl_domain=dom)
    try:
        check(bc.conn.transport.encrypted, "the transport is not encrypted")
        _roundtrip(bc, ctx.addr())
    finally:
        bc.close()
    return None


def idle_timeout(ctx: Ctx) -> str | None:
    bc = _bc(ctx, heartbeat=IDLE)
    note = None
    try:
        peer = bc.conn.transport.remote_idle_timeout or None
        wait = min(2.5 * max(IDLE, peer or 0), IDLE_WAIT_MAX)
        if peer is None:
            note = "the peer advertises no idle-time-out: only checked that it keeps ours"
        try:  # keep Proton's event loop turning (it sends the heartbeats) while idle
            bc.wait(lambda: not bc.conn.state & Endpoint.REMOTE_ACTIVE, timeout=wait, msg="idle")
        except Timeout:
            pass
        check(bc.conn.state & Endpoint.REMOTE_ACTIVE, "the connection dropped while idle")
        _roundtrip(bc, ctx.addr())
    finally:
        bc.close()
    return note


def _outcome_fn(kind: str) -> Callable[[Ctx], str | None]:
    return lambda ctx: _outcome(ctx, kind)


SCENARIOS: dict[str, Callable[[Ctx], str | None]] = {
    "sasl-anonymous": sasl_anonymous,
    "sasl-plain": sasl_plain,
    "at-most-once": at_most_once,
    "at-least-once": at_least_once,
    "rcv-settle-second": rcv_settle_second,
    "outcome-accept": _outcome_fn("accept"),
    "outcome-reject": _outcome_fn("reject"),
    "outcome-release": _outcome_fn("release"),
    "outcome-modify": _outcome_fn("modify"),
    "large-message": large_message,
    "message-sections": message_sections,
    "drain": drain,
    "request-response": request_response,
    "anonymous-relay": anonymous_relay,
    "browse": browse,
    "tls": tls,
    "idle-timeout": idle_timeout,
}


def _conventions() -> dict[str, Callable[[Ctx], str | None]]:
    from .proton_py_conventions import SCENARIOS as conventions  # it imports this module's helpers

    return conventions


SCENARIOS.update(_conventions())


def client_version() -> str:
    import proton

    return "python-qpid-proton " + ".".join(map(str, proton.VERSION))


def run(ctx: Ctx) -> str | None:
    """Run one scenario in a worker thread, joined for at most ``LIMIT`` seconds."""
    fn = SCENARIOS[ctx.scenario]
    result: list[Any] = []

    def work() -> None:
        try:
            result.append(("ok", fn(ctx)))
        except BaseException as exc:
            result.append(("err", exc))

    t = threading.Thread(target=work, name=f"proton-{ctx.scenario}", daemon=True)
    t.start()
    t.join(LIMIT)
    if not result:
        raise ScenarioFailed(f"did not finish within {LIMIT:g}s")
    kind, value = result[0]
    if kind == "err":
        raise value
    note: str | None = value
    return note
