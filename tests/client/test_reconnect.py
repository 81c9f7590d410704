"""Reconnect: a dropped connection is re-made, its links re-attached, nothing accepted is lost.

Against our broker in a subprocess (SIGKILLed and restarted on the same port),
our direct peer (closed and served again), and scripted engine-level peers that
answer a resuming attach with their own unsettled map (§2.6.13). Every wait is
bounded; every broker process is killed at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute

import amqp10
import amqp10.sync
from amqp10 import errors
from amqp10.client import SettleMode, connect
from amqp10.client.reconnect import (
    ConnectionLost,
    Reconnected,
    ReconnectEvent,
    ReconnectFailed,
    ReconnectPolicy,
    Schedule,
    is_retryable,
)
from amqp10.io import Driver, Signal
from amqp10.message import Message
from amqp10.sasl import SaslConnection, SaslServer
from amqp10.transport import (
    ConnectionOpened,
    DeliveryReceived,
    LinkAttached,
    SessionBegun,
)
from amqp10.types import Accepted, Error, ErrorCondition
from tests.broker.conftest import BrokerProcess

from .helpers import (
    WAIT,
    DurableTraffic,
    Service,
    durable_traffic,
    no_leftover_tasks,
    running,
    wait_for,
)

pytestmark = pytest.mark.anyio

FAST = ReconnectPolicy(initial_delay=0.05, max_delay=0.5, max_time=30.0)
"""Quick retries, bounded: what the tests run with unless they test the bounds."""


def fast(**kw: Any) -> ReconnectPolicy:
    return ReconnectPolicy(**{"initial_delay": 0.05, "max_delay": 0.5, "max_time": 30.0, **kw})


async def _free_port() -> int:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port: int = listener.extra(SocketAttribute.local_port)
    return port


@contextmanager
def broker(data_dir: Path, port: int = 0, *args: str) -> Iterator[BrokerProcess]:
    """``amqp10 broker`` in a subprocess, killed on the way out whatever happened."""
    bp = BrokerProcess("--port", str(port), "--http-port", "0", "--data-dir", str(data_dir), *args)
    try:
        yield bp
    finally:
        bp.kill()


async def start_broker(data_dir: Path, port: int) -> BrokerProcess:
    """Start (restart) a broker without blocking the event loop."""
    return await anyio.to_thread.run_sync(
        lambda: BrokerProcess("--port", str(port), "--http-port", "0", "--data-dir", str(data_dir))
    )


# -- the policy -----------------------------------------------------------------------------


def test_schedule_rounds_backoff_and_bounds() -> None:
    policy = ReconnectPolicy(
        initial_delay=1.0, max_delay=4.0, multiplier=2.0, jitter=0.0, max_attempts=9, max_time=None
    )
    s = Schedule(policy, targets=2, start=1, now=0.0)
    steps = [s.next(0.0) for _ in range(10)]
    # rounds of two URLs, starting with the one in use; waits only between rounds
    assert steps[:9] == [
        (0.0, 1), (0.0, 0), (1.0, 1), (0.0, 0), (2.0, 1), (0.0, 0), (4.0, 1), (0.0, 0), (4.0, 1),
    ]  # fmt: skip
    assert steps[9] is None  # max_attempts
    timed = Schedule(ReconnectPolicy(initial_delay=1.0, jitter=0.0, max_time=2.5), 1, 0, now=0.0)
    assert timed.next(0.0) == (0.0, 0)
    assert timed.next(0.0) == (1.0, 0)
    assert timed.next(1.0) is None  # 1.0 + 2.0 of delay would pass max_time
    jittery = ReconnectPolicy(initial_delay=1.0, jitter=0.5, max_attempts=3)
    assert all(0.5 <= jittery.delay(1) <= 1.5 for _ in range(50))


def test_policy_needs_a_bound_and_sane_values() -> None:
    with pytest.raises(ValueError, match="needs a bound"):
        ReconnectPolicy(max_attempts=None, max_time=None)
    with pytest.raises(ValueError, match="needs a bound"):
        ReconnectPolicy(max_time=math.inf)
    with pytest.raises(ValueError, match="multiplier"):
        ReconnectPolicy(multiplier=0.5)
    with pytest.raises(ValueError, match="jitter"):
        ReconnectPolicy(jitter=2)


def test_which_errors_are_retried() -> None:
    assert is_retryable(errors.ConnectError("could not connect to x: connection refused"))
    assert is_retryable(errors.TimeoutError("opening the connection timed out"))
    assert is_retryable(errors.ConnectionClosed("connection to x was closed by the peer"))
    assert is_retryable(errors.ConnectionError("x", condition="amqp:connection:forced"))
    assert is_retryable(errors.ConnectionError("x", condition="amqp:resource-limit-exceeded"))
    assert not is_retryable(errors.AuthenticationError("SASL authentication failed"))
    assert not is_retryable(errors.TLSError("certificate verify failed"))
    assert not is_retryable(errors.ConnectionError("x", condition="amqp:unauthorized-access"))
    assert not is_retryable(errors.ConnectionError("x", condition="amqp:connection:framing-error"))
    assert not is_retryable(ValueError("bad URL"))


# -- connecting -------------------------------------------------------------------------------


async def test_url_list_skips_a_dead_first_url() -> None:
    dead = await _free_port()
    svc = Service()
    async with running(svc) as server:
        # a list without a policy: each URL once, in order
        async with await connect([f"127.0.0.1:{dead}", server.url], timeout=WAIT) as conn:
            assert conn.peer == f"127.0.0.1:{server.port}"
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body=1)), Accepted)
        async with await connect([f"127.0.0.1:{dead}", server.url], reconnect=FAST) as conn:
            assert isinstance(await (await conn.open_sender("q")).send(Message(body=2)), Accepted)
    assert [d.message.body for d in svc.received] == [1, 2]


async def test_all_urls_dead_gives_up_after_max_attempts() -> None:
    ports = [await _free_port(), await _free_port()]
    urls = [f"127.0.0.1:{p}" for p in ports]
    started = time.monotonic()
    async with no_leftover_tasks():
        with pytest.raises(errors.ReconnectError) as info:
            await connect(urls, reconnect=fast(max_attempts=5, initial_delay=0.01), timeout=WAIT)
    err = info.value
    assert err.attempts == 5
    assert str(err).startswith(f"gave up connecting to {urls[0]}, {urls[1]} after 5 attempts in ")
    assert str(err).endswith(f"last error: could not connect to {urls[0]}: connection refused")
    assert isinstance(err.last_error, errors.ConnectError)
    assert isinstance(err, errors.ConnectError)  # callers catching ConnectError see it too
    assert time.monotonic() - started < WAIT
    # without a policy, a list raises the same kind of error after one round
    with pytest.raises(errors.ReconnectError, match="after 2 attempts"):
        await connect(urls, timeout=WAIT)


async def test_max_time_bounds_the_attempts() -> None:
    port = await _free_port()
    started = time.monotonic()
    with pytest.raises(errors.ReconnectError) as info:
        await connect(f"127.0.0.1:{port}", reconnect=fast(max_time=0.5, max_delay=0.1))
    assert 0.3 < time.monotonic() - started < 2.0
    assert info.value.attempts >= 3


async def test_bad_password_fails_at_once(tmp_path: Path) -> None:
    from amqp10.broker.users import add_user

    users = tmp_path / "users.toml"
    add_user(users, "alice", "secret", iterations=4096)
    with broker(tmp_path / "data", 0, "--users-file", str(users), "--no-anonymous") as bp:
        started = time.monotonic()
        with pytest.raises(errors.AuthenticationError):
            await connect(f"amqp://alice:wrong@{bp.url}", reconnect=fast(max_time=20.0))
        assert time.monotonic() - started < 3.0, "an authentication failure is not retried"
        async with await connect(f"amqp://alice:secret@{bp.url}", reconnect=FAST) as conn:
            assert conn.is_open


# -- our broker, killed and restarted ---------------------------------------------------------


@pytest.mark.slow
async def test_broker_sigkill_loses_no_accepted_message(tmp_path: Path) -> None:
    """Producers send durable messages, a consumer takes them; the broker is SIGKILLed and
    restarted on the same port. Every message whose send resolved Accepted arrives."""
    events: list[ReconnectEvent] = []
    policy = fast(on_event=events.append)
    bp = await start_broker(tmp_path, 0)
    port = bp.port

    async def crash(t: DurableTraffic) -> None:
        nonlocal bp
        await wait_for(t.progress, lambda: len(t.accepted) >= t.total // 4, 20)
        bp.kill()  # SIGKILL: no close, no goodbye
        await wait_for(conn._changed, lambda: conn.reconnecting)
        bp = await start_broker(tmp_path, port)

    try:
        async with await connect(bp.url, reconnect=policy, timeout=20.0) as conn:
            t = await durable_traffic(conn, "crash-q", crash)
            assert conn.reconnects == 1
    finally:
        bp.kill()
    assert not t.failed, t.failed[:3]
    assert len(t.accepted) == t.total
    missing = t.accepted - set(t.received)
    assert not missing, f"{len(missing)} accepted messages lost, e.g. {sorted(missing)[:5]}"
    assert [type(e) for e in events] == [ConnectionLost, Reconnected]
    lost, back = events
    assert isinstance(lost, ConnectionLost) and isinstance(back, Reconnected)
    assert lost.peer == back.peer == f"127.0.0.1:{port}"
    assert back.links == 2


@pytest.mark.slow
async def test_send_during_the_outage_completes_after_the_restart(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        bp = await start_broker(tmp_path, 0)
        port = bp.port
        try:
            async with await connect(bp.url, reconnect=FAST, timeout=20.0) as conn:
                sender = await conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
                receiver = await conn.open_receiver("q", credit=10)
                assert isinstance(await sender.send(Message(body="before", durable=True)), Accepted)
                bp.kill()
                await wait_for(conn._changed, lambda: conn.reconnecting)
                outcomes: list[Any] = []
                sent = Signal()

                async def blocked_send() -> None:
                    outcomes.append(await sender.send(Message(body="during", durable=True)))
                    sent.fire()

                tg.start_soon(blocked_send)
                await anyio.sleep(0.3)  # the send is parked until the broker is back
                assert outcomes == [] and conn.reconnecting
                bp = await start_broker(tmp_path, port)
                with anyio.fail_after(20):
                    bodies = []
                    async for d in receiver:
                        bodies.append(d.message.body)
                        await d.accept()
                        if "during" in bodies:
                            break
                await wait_for(sent, lambda: bool(outcomes), 20)
                assert isinstance(outcomes[0], Accepted)
                # "before" was accepted but not yet taken when the broker died: durable,
                # so it is delivered (again) by the restarted broker
                assert "before" in bodies
                assert conn.reconnects == 1
        finally:
            bp.kill()


async def test_submit_during_the_outage_goes_out_after_the_restart(tmp_path: Path) -> None:
    bp = await start_broker(tmp_path, 0)
    port = bp.port
    try:
        async with await connect(bp.url, reconnect=FAST, timeout=20.0) as conn:
            sender = await conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
            receiver = await conn.open_receiver("q", credit=10)
            bp.kill()
            await wait_for(conn._changed, lambda: conn.reconnecting)
            trackers = [sender.submit(Message(body=f"during {i}", durable=True)) for i in range(3)]
            await anyio.sleep(0.2)  # parked until the broker is back
            assert not any(t.done for t in trackers) and conn.reconnecting
            bp = await start_broker(tmp_path, port)
            with anyio.fail_after(20):
                outcomes = [await t for t in trackers]
                bodies = []
                async for d in receiver:
                    bodies.append(d.message.body)
                    await d.accept()
                    if len(bodies) == 3:
                        break
            assert all(isinstance(o, Accepted) for o in outcomes)
            assert bodies == ["during 0", "during 1", "during 2"]
    finally:
        bp.kill()


@pytest.mark.slow
async def test_broker_gone_for_good_ends_with_a_clear_error(tmp_path: Path) -> None:
    events: list[ReconnectEvent] = []
    with broker(tmp_path) as bp:
        async with await connect(
            bp.url,
            reconnect=fast(max_attempts=4, initial_delay=0.01, on_event=events.append),
            timeout=WAIT,
        ) as conn:
            sender = await conn.open_sender("q")
            receiver = await conn.open_receiver("q")
            bp.kill()
            with pytest.raises(errors.ReconnectError) as info:
                await sender.send(Message(body=1), timeout=WAIT)
            err = info.value
            assert str(err).startswith(
                f"connection to {bp.url} lost and not re-established after 4 attempts"
            )
            assert "connection refused" in str(err)
            assert conn.error is err
            assert [m async for m in receiver] == []  # the iteration ends
    assert [type(e) for e in events] == [ConnectionLost, ReconnectFailed]


@pytest.mark.slow
async def test_graceful_broker_shutdown_is_retried(tmp_path: Path) -> None:
    """SIGTERM: the broker closes with connection:forced; the client comes back."""
    bp = await start_broker(tmp_path, 0)
    port = bp.port
    try:
        async with await connect(bp.url, reconnect=FAST, timeout=20.0) as conn:
            sender = await conn.open_sender("q")
            await anyio.to_thread.run_sync(bp.terminate)
            await wait_for(conn._changed, lambda: conn.reconnecting)
            bp = await start_broker(tmp_path, port)
            assert isinstance(await sender.send(Message(body=1)), Accepted)
            assert conn.reconnects == 1
    finally:
        bp.kill()


# -- our direct peer, restarted ------------------------------------------------------------------


async def test_direct_peer_restarted() -> None:
    svc1, svc2 = Service(), Service()
    first = amqp10.serve("127.0.0.1", 0, svc1)
    await first.__aenter__()
    try:
        async with await connect(first.url, reconnect=FAST, timeout=WAIT) as conn:
            sender = await conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
            generated = await conn.open_receiver("gen/2", credit=10)
            got = [(await generated.receive()).message.body for _ in range(2)]
            assert isinstance(await sender.send(Message(body="one")), Accepted)
            await first.close()  # a clean close, and the port is free again
            await wait_for(conn._changed, lambda: conn.reconnecting)
            async with amqp10.serve("127.0.0.1", first.port, svc2):
                assert isinstance(await sender.send(Message(body="two")), Accepted)
                # the receiver kept going: the new peer generates for the re-attached link
                got += [(await generated.receive()).message.body for _ in range(2)]
                assert conn.reconnects == 1
                names = {link.name for link in svc2.links}
                assert sender.name in names and generated.name in names
                assert svc2.connections[0].remote_container_id == conn.container_id
    finally:
        await first.aclose()
    assert sorted(got[:2]) == sorted(got[2:]) == ["m0", "m1"]
    assert [d.message.body for d in svc1.received] == ["one"]
    assert [d.message.body for d in svc2.received] == ["two"]


async def test_peer_closing_with_a_fatal_condition_is_not_retried() -> None:
    async def refuse(conn: amqp10.client.Connection) -> None:
        await conn.next_link()
        await conn.close(Error(condition=ErrorCondition.UNAUTHORIZED_ACCESS, description="go away"))

    async with (
        amqp10.serve("127.0.0.1", 0, refuse) as server,
        await connect(server.url, reconnect=FAST, timeout=WAIT) as conn,
    ):
        await conn.open_sender("q")
        await wait_for(conn._changed, lambda: conn.error is not None)
        assert conn.error is not None
        assert conn.error.condition == "amqp:unauthorized-access"
        assert conn.reconnects == 0 and not conn.reconnecting


async def test_close_during_the_outage_is_prompt() -> None:
    svc = Service()
    server = amqp10.serve("127.0.0.1", 0, svc)
    await server.__aenter__()
    try:
        policy = fast(initial_delay=5.0, max_delay=5.0)
        async with await connect(server.url, reconnect=policy, timeout=WAIT) as conn:
            sender = await conn.open_sender("q")
            await server.close()  # gone; the client waits 5 s between rounds of attempts
            await wait_for(conn._changed, lambda: conn.reconnecting)
            with pytest.raises(errors.TimeoutError, match="was not re-established in time"):
                await sender.send(Message(body=0), timeout=0.1)
            outcome: list[BaseException] = []

            async def parked() -> None:
                try:
                    await sender.send(Message(body=1))
                except errors.AMQPError as exc:
                    outcome.append(exc)
                    conn._changed.fire()

            async with anyio.create_task_group() as tg:
                tg.start_soon(parked)
                await anyio.sleep(0.05)
                started = time.monotonic()
                await conn.close()
                assert time.monotonic() - started < 1.0
                await wait_for(conn._changed, lambda: bool(outcome))
            assert isinstance(outcome[0], errors.ConnectionClosed)
            assert isinstance(conn.error, errors.ConnectionClosed)
    finally:
        await server.aclose()


async def test_a_peer_that_drops_at_once_is_not_retried_in_a_tight_loop() -> None:
    """Each new connection opens, then is closed: the backoff is not reset each time,
    so the policy's attempts bound the whole sequence."""

    async def hang_up(conn: amqp10.client.Connection) -> None:
        await anyio.sleep(0.05)  # then the server closes the connection (the handler returned)

    events: list[ReconnectEvent] = []
    policy = fast(max_attempts=4, initial_delay=0.01, on_event=events.append)
    async with amqp10.serve("127.0.0.1", 0, hang_up) as server:
        started = time.monotonic()
        conn = await connect(server.url, reconnect=policy, timeout=WAIT)
        async with conn:
            await wait_for(conn._changed, lambda: conn.error is not None)
        assert isinstance(conn.error, errors.ReconnectError)
        assert conn.error.attempts == 4
        assert conn.reconnects <= 4
        assert time.monotonic() - started < WAIT
    assert isinstance(events[-1], ReconnectFailed)


class FreezingProxy:
    """Forwards TCP to ``upstream``; :meth:`freeze` makes the connections so far go
    silent (bytes dropped both ways, sockets left open), as a dead network path does."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self._frozen: list[list[bool]] = []

    def freeze(self) -> None:
        for flag in self._frozen:
            flag[0] = True

    async def handle(self, client: Any) -> None:
        flag = [False]
        self._frozen.append(flag)
        upstream = await anyio.connect_tcp("127.0.0.1", self.upstream)
        async with client, upstream, anyio.create_task_group() as tg:
            tg.start_soon(self._pump, client, upstream, flag, tg.cancel_scope)
            tg.start_soon(self._pump, upstream, client, flag, tg.cancel_scope)

    @staticmethod
    async def _pump(src: Any, dst: Any, flag: list[bool], scope: anyio.CancelScope) -> None:
        try:
            async for chunk in src:
                if not flag[0]:
                    await dst.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        scope.cancel()


async def test_idle_timeout_on_a_silent_path_reconnects() -> None:
    svc = Service()
    events: list[ReconnectEvent] = []
    async with running(svc) as server:
        proxy = FreezingProxy(server.port)
        async with (
            listening(proxy.handle) as front,
            await connect(
                front.url, idle_timeout=0.3, reconnect=fast(on_event=events.append), timeout=WAIT
            ) as conn,
        ):
            sender = await conn.open_sender("q", settle_mode=SettleMode.AT_LEAST_ONCE)
            assert isinstance(await sender.send(Message(body=1)), Accepted)
            proxy.freeze()
            # the send goes out into the void; the idle timer notices, the client
            # reconnects through the proxy and sends it again
            assert isinstance(await sender.send(Message(body=2)), Accepted)
            assert conn.reconnects == 1
    lost = events[0]
    assert isinstance(lost, ConnectionLost)
    assert lost.error.condition == "amqp:resource-limit-exceeded"
    assert [d.message.body for d in svc.received] == [1, 2]


# -- link resumption with a peer that keeps unsettled state ----------------------------------------


class ResumingPeer:
    """An engine-level peer: receives on every link the client attaches.

    ``settle=False`` leaves what it receives unsettled (as a peer that crashed
    before its dispositions went out); ``knows`` is the unsettled map it answers
    a resuming attach with (tag -> its state), as a peer with durable link
    state would (§2.6.13).
    """

    def __init__(self, *, settle: bool, knows: dict[bytes, Any] | None = None) -> None:
        self.settle = settle
        self.knows = knows
        self.received: list[tuple[bytes, bytes, bool]] = []  # (tag, payload, resumed)
        self.offered: list[dict[Any, Any] | None] = []  # the client's unsettled maps
        self.changed = Signal()

    async def handle(self, stream: Any) -> None:
        conn = SaslConnection.server(SaslServer(["ANONYMOUS"], None, require=False), "peer")
        engine = conn.connection

        def on_events(events: list[Any]) -> None:
            for e in events:
                if isinstance(e, ConnectionOpened):
                    engine.open()
                elif isinstance(e, SessionBegun):
                    e.session.begin()
                elif isinstance(e, LinkAttached):
                    link = e.link
                    self.offered.append(
                        link.remote_attach.unsettled if link.remote_attach else None
                    )
                    known = None
                    if e.resumed and self.knows is not None:
                        known = dict(self.knows)
                    link.attach(
                        source=link.remote_source, target=link.remote_target, unsettled=known
                    )
                    link.flow(100)
                elif isinstance(e, DeliveryReceived):
                    d = e.delivery
                    if d.payload:
                        self.received.append((d.tag, d.payload, d.resumed))
                    if self.settle and not d.settled and not d.remote_settled:
                        d.accept()
            self.changed.fire()

        await Driver(stream, conn, on_events, peer="client").run()


class Listening:
    """A TCP listener serving a handler per connection; :meth:`stop` drops them all."""

    def __init__(self, listener: Any, scope: anyio.CancelScope) -> None:
        self._listener = listener
        self._scope = scope
        self.port: int = listener.extra(SocketAttribute.local_port)
        self.url = f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        """Stop accepting (the port refuses) and cut every connection (no AMQP close)."""
        self._scope.cancel()
        await self._listener.aclose()


@asynccontextmanager
async def listening(handler: Callable[[Any], Any]) -> AsyncIterator[Listening]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    scope = anyio.CancelScope()

    async def serve() -> None:
        with scope:
            async with anyio.create_task_group() as handlers:
                while True:
                    try:
                        stream = await listener.listeners[0].accept()
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return
                    handlers.start_soon(handler, stream)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(serve)
        yield Listening(listener, scope)
        scope.cancel()


async def test_unsettled_sends_are_resumed_not_resent() -> None:
    """The first peer got three messages and dropped before settling; the second knows
    two of them as accepted: those resolve Accepted without being sent again; the
    third is sent again as a new delivery (resume=false), as is a send made later."""
    first = ResumingPeer(settle=False)
    second = ResumingPeer(settle=True)
    outcomes: dict[int, Any] = {}
    done = Signal()
    async with (
        listening(second.handle) as peer2,
        listening(first.handle) as peer1,
        await connect([peer1.url, peer2.url], reconnect=fast(max_time=WAIT), timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("durable", settle_mode=SettleMode.AT_LEAST_ONCE)

        async def send(i: int) -> None:
            outcomes[i] = await sender.send(Message(body=i))
            done.fire()

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(send, i)
            await wait_for(first.changed, lambda: len(first.received) == 3)
            tags = [t for t, _, _ in first.received]
            second.knows = {tags[0]: Accepted(), tags[1]: Accepted()}
            await peer1.stop()  # the first peer drops dead
            await wait_for(done, lambda: len(outcomes) == 3)
            tg.start_soon(send, 3)  # a send on the re-attached link
            await wait_for(done, lambda: len(outcomes) == 4)
    assert all(isinstance(o, Accepted) for o in outcomes.values()), outcomes
    assert conn.reconnects == 1
    # the client offered its three unsettled deliveries in the resuming attach
    assert set(second.offered[0] or {}) == set(tags)
    # the two the peer knew were not sent again; the unknown one went as a new delivery
    unknown = Message.decode(first.received[2][1]).body
    assert sorted(Message.decode(p).body for _, p, _ in second.received) == sorted([unknown, 3])
    assert not any(resumed for _, _, resumed in second.received)


# -- the blocking facade ----------------------------------------------------------------------------


def test_sync_facade_reconnects(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{anyio.run(_free_port)}"
    with (
        broker(tmp_path) as bp,
        amqp10.sync.connect([dead, bp.url], reconnect=FAST, timeout=WAIT) as conn,
    ):
        sender = conn.open_sender("q")
        assert isinstance(sender.send(Message(body=1)), Accepted)
        assert conn.reconnects == 0
        receiver: Any = conn.open_receiver("q")
        assert receiver.receive(timeout=WAIT).message.body == 1
