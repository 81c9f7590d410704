"""Link recovery on the broker (Part 2 §2.6.13): a link lost with its connection is resumed.

The broker runs in the test's own event loop (its state is read without races),
behind a TCP proxy on 127.0.0.1 that the test can freeze (bytes dropped, as on a
dead path), cut (both sockets closed, no AMQP close) and hold (new connections
wait), so that the order of events around a connection loss is the test's
choice. Our client reconnects with a :class:`ReconnectPolicy`. Every wait is
bounded; nothing sleeps to synchronise.

Our client's receiver re-attaches offering an unsettled map with the state of
each delivery it holds unsettled (accepted, or nothing yet), as §2.6.13 asks.
"""

from __future__ import annotations

import math
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute

from amqp10.broker.config import ConfigError, load_config
from amqp10.broker.core import Queue
from amqp10.broker.service import BrokerService
from amqp10.client import Connection, SettleMode, connect
from amqp10.client.reconnect import ReconnectPolicy
from amqp10.message import Message
from amqp10.types import Accepted, Role, Source
from tests.broker.conftest import BrokerProcess, broker_in_loop

pytestmark = pytest.mark.anyio

WAIT = 10.0  # seconds any single wait may take
N = 6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def policy() -> ReconnectPolicy:
    return ReconnectPolicy(initial_delay=0.05, max_delay=0.2, max_time=WAIT)


async def until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Wait (bounded) until ``predicate()`` holds; it is re-checked every few ms."""
    try:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None


broker = broker_in_loop


class Proxy:
    """A TCP proxy to ``port`` whose connections the test can freeze, cut and hold back."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.url = ""
        self._conns: list[dict[str, Any]] = []
        self._open = anyio.Event()
        self._open.set()

    def freeze(self, *, up: bool = True, down: bool = True) -> None:
        """Drop bytes (client to broker: ``up``; broker to client: ``down``) on the connections so far."""
        for c in self._conns:
            c["up"] = c["up"] or up
            c["down"] = c["down"] or down

    def hold(self) -> None:
        """New connections wait (accepted, nothing forwarded) until :meth:`release`."""
        self._open = anyio.Event()

    def release(self) -> None:
        self._open.set()

    async def cut(self, broker_side_first: Callable[[], bool] | None = None) -> None:
        """Close every connection so far abruptly; the broker's side first, then (once
        ``broker_side_first()`` holds, if given) the client's."""
        conns, self._conns = self._conns, []
        for c in conns:
            await anyio.aclose_forcefully(c["server"])
        if broker_side_first is not None:
            await until(broker_side_first, "the broker noticed the loss")
        for c in conns:
            await anyio.aclose_forcefully(c["client"])
            c["scope"].cancel()

    async def handle(self, client: Any) -> None:
        await self._open.wait()
        server = await anyio.connect_tcp("127.0.0.1", self.upstream)
        with anyio.CancelScope() as scope:
            c = {"client": client, "server": server, "up": False, "down": False, "scope": scope}
            self._conns.append(c)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, client, server, c, "up", tg.cancel_scope)
                tg.start_soon(self._pump, server, client, c, "down", tg.cancel_scope)
        await anyio.aclose_forcefully(client)
        await anyio.aclose_forcefully(server)

    @staticmethod
    async def _pump(
        src: Any, dst: Any, c: dict[str, Any], way: str, scope: anyio.CancelScope
    ) -> None:
        try:
            async for chunk in src:
                if not c[way]:
                    await dst.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        scope.cancel()


@asynccontextmanager
async def proxy_to(port: int) -> AsyncIterator[Proxy]:
    proxy = Proxy(port)
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        proxy.url = f"127.0.0.1:{listener.extra(SocketAttribute.local_port)}"
        tg.start_soon(listener.serve, proxy.handle)
        try:
            yield proxy
        finally:
            tg.cancel_scope.cancel()


async def send_bodies(url: str, address: str, bodies: list[Any], *, durable: bool = False) -> None:
    async with await connect(url, timeout=WAIT) as conn:
        sender = await conn.open_sender(address, settle_mode=SettleMode.AT_LEAST_ONCE)
        for b in bodies:
            assert isinstance(await sender.send(Message(body=b, durable=durable)), Accepted)


async def drain_bodies(conn: Connection, address: str) -> list[Any]:
    """Everything the queue holds now, accepted (a drain ends the wait)."""
    rcv = await conn.open_receiver(address, credit=0)
    rcv.add_credit(1000)
    await rcv.drain(timeout=WAIT)
    got = []
    while rcv.buffered:
        d = await rcv.receive(timeout=WAIT)
        got.append(d.message.body)
        await d.accept()
    await rcv.close()
    return got


def kept(address: str) -> Source:
    """A source that asks to outlive its link for a minute (Part 3 §3.5.6): a reconnecting
    client's default; without it (timeout 0) the broker has nothing to keep."""
    return Source(address=address, timeout=60)


def queue(service: BrokerService, name: str) -> Queue:
    assert service.broker is not None
    node = service.broker.nodes[name]
    assert isinstance(node, Queue)
    return node


def records(service: BrokerService) -> dict[Any, Any]:
    assert service.broker is not None
    return service.broker.recovery.records


def kept_consumer(service: BrokerService) -> Callable[[], bool]:
    """Whether the broker keeps the record of the consumer link "r" of container "c1"
    (it noticed the loss and suspended the link): a ``proxy.cut`` condition."""
    return lambda: ("c1", "r", Role.SENDER) in records(service)


async def receive_bodies(rcv: Any, n: int = N) -> list[Any]:
    """The bodies of the next ``n`` deliveries ``rcv`` receives (each wait bounded)."""
    return [(await rcv.receive(timeout=WAIT)).message.body for _ in range(n)]


async def reconnecting(proxy: Proxy) -> Connection:
    """Container "c1" connected through ``proxy``, reconnecting (:func:`policy`) when cut."""
    return await connect(proxy.url, reconnect=policy(), timeout=WAIT, container_id="c1")


async def all_accepted(trackers: list[Any]) -> None:
    """Every send of ``trackers`` resolves Accepted (each wait bounded)."""
    outcomes = [await t.wait(timeout=WAIT) for t in trackers]
    assert all(isinstance(o, Accepted) for o in outcomes), outcomes


def url_of(service: BrokerService) -> str:
    return f"127.0.0.1:{service.ports[0]}"


# -- consumer side --------------------------------------------------------------------------


async def test_resumed_consumer_gets_exactly_once(tmp_path: Path) -> None:
    """Six messages delivered unsettled; the client accepts three, but the dispositions
    are lost with the connection. The re-attach offers accepted for those three: they
    are removed from the queue, not redelivered; the other three are resumed, once.
    Meanwhile another consumer of the queue gets none of the six."""
    async with broker(tmp_path) as svc, proxy_to(svc.ports[0]) as proxy:
        await send_bodies(url_of(svc), "q", list(range(N)), durable=True)
        async with (
            await reconnecting(proxy) as conn,
            await connect(url_of(svc), timeout=WAIT) as other,
        ):
            rcv = await conn.open_receiver(
                "q", credit=N, settle_mode=SettleMode.TWO_PHASE, name="r"
            )
            first = [await rcv.receive(timeout=WAIT) for _ in range(N)]
            assert [d.message.body for d in first] == list(range(N))
            proxy.freeze()
            for d in first[:3]:
                await d.accept()  # rcv-settle-mode second: held unsettled, state accepted
            proxy.hold()
            await proxy.cut(broker_side_first=kept_consumer(svc))
            q = queue(svc, "q")
            assert q.count == 0  # all six stay acquired by the suspended link
            competitor = await other.open_receiver("q", credit=0)
            competitor.add_credit(N)
            await competitor.drain(timeout=WAIT)
            assert competitor.buffered == 0

            proxy.release()
            again = [await rcv.receive(timeout=WAIT) for _ in range(3)]
            assert [d.message.body for d in again] == [3, 4, 5]
            for d in again:
                await d.accept()
            await until(lambda: q.stats.acked == N, "all six are acknowledged")
            assert conn.reconnects == 1
            assert not records(svc)
            assert svc.broker is not None and svc.broker.recovery.resumed == 1
            # nothing else comes, to either consumer
            rcv.add_credit(N)
            await rcv.drain(timeout=WAIT)
            competitor.add_credit(N)
            await competitor.drain(timeout=WAIT)
            assert rcv.buffered == 0 and competitor.buffered == 0
            assert q.count == 0
        # the store forgot them too
        assert svc.store is not None and svc.committer is not None
        await svc.committer.flush()
        assert svc.store.load().messages == []


async def test_suspended_messages_go_back_when_the_record_expires(tmp_path: Path) -> None:
    async with broker(tmp_path, link_recovery_seconds=0.5) as svc, proxy_to(svc.ports[0]) as proxy:
        await send_bodies(url_of(svc), "q", list(range(N)))
        async with await connect(proxy.url, timeout=WAIT, container_id="c1") as conn:
            rcv = await conn.open_receiver("q", credit=N, name="r", source=kept("q"))
            assert await receive_bodies(rcv) == list(range(N))
            await proxy.cut(broker_side_first=kept_consumer(svc))
        q = queue(svc, "q")
        assert q.count == 0
        # the record expires on its own (the broker's timer): back to the queue,
        # counted as a failed delivery attempt as on any link loss
        await until(lambda: q.count == N, "the messages are back in the queue", timeout=5)
        assert not records(svc)
        async with await connect(url_of(svc), timeout=WAIT) as conn:
            rcv = await conn.open_receiver("q", credit=N)
            got = [await rcv.receive(timeout=WAIT) for _ in range(N)]
            assert [d.message.body for d in got] == list(range(N))
            assert all(
                d.message.header is not None and d.message.header.delivery_count == 1 for d in got
            )


async def _cut_and_all_again(svc: BrokerService, proxy: Proxy, rcv: Any, *, resumed: int) -> None:
    """Cut the consumer's connection (its reconnection held until the broker has kept the
    link): all N come again, in order, on the re-attached link, whose record is gone
    (``resumed``: how many links the broker has resumed); all are then acknowledged."""
    proxy.hold()
    await proxy.cut(broker_side_first=kept_consumer(svc))
    proxy.release()
    again = [await rcv.receive(timeout=WAIT) for _ in range(N)]
    assert [d.message.body for d in again] == list(range(N))
    assert not records(svc)
    assert svc.broker is not None and svc.broker.recovery.resumed == resumed
    for d in again:
        await d.accept()
    await until(lambda: queue(svc, "q").stats.acked == N, "all are acknowledged")


async def test_resumed_consumer_gets_what_it_had_not_settled_once(tmp_path: Path) -> None:
    """Deliveries received and not settled yet are offered with no state: the broker
    resumes them, so each comes again exactly once, on the resumed link."""
    async with broker(tmp_path) as svc, proxy_to(svc.ports[0]) as proxy:
        await send_bodies(url_of(svc), "q", list(range(N)))
        async with await reconnecting(proxy) as conn:
            rcv = await conn.open_receiver("q", credit=N, name="r")
            assert await receive_bodies(rcv) == list(range(N))
            await _cut_and_all_again(svc, proxy, rcv, resumed=1)
            rcv.add_credit(N)
            await rcv.drain(timeout=WAIT)
            assert rcv.buffered == 0


async def test_settled_first_consumer_is_at_least_once(tmp_path: Path) -> None:
    """rcv-settle-mode first: accepting settles at once, so when the dispositions are lost
    the client holds nothing unsettled and re-attaches without a map. That is not a
    resume: the record is dropped and the messages are delivered again (at least once)."""
    async with broker(tmp_path) as svc, proxy_to(svc.ports[0]) as proxy:
        await send_bodies(url_of(svc), "q", list(range(N)))
        async with await reconnecting(proxy) as conn:
            rcv = await conn.open_receiver("q", credit=N, name="r")
            first = [await rcv.receive(timeout=WAIT) for _ in range(N)]
            proxy.freeze()
            for d in first:
                await d.accept()
            await _cut_and_all_again(svc, proxy, rcv, resumed=0)


async def _lost_consumer_gives_back_at_once(svc: BrokerService, proxy: Proxy) -> None:
    """A consumer (no reconnect policy) loses its connection holding all N messages: the
    broker keeps nothing of it, and the messages are back in the queue at once."""
    await send_bodies(url_of(svc), "q", list(range(N)))
    q = queue(svc, "q")
    async with await connect(proxy.url, timeout=WAIT, container_id="c1") as conn:
        rcv = await conn.open_receiver("q", credit=N, name="r")
        assert await receive_bodies(rcv) == list(range(N))
        await proxy.cut(broker_side_first=lambda: q.count == N)
    assert not records(svc)
    async with await connect(url_of(svc), timeout=WAIT) as conn:
        assert await drain_bodies(conn, "q") == list(range(N))


async def test_recovery_disabled_releases_at_once(tmp_path: Path) -> None:
    async with broker(tmp_path, link_recovery_seconds=0) as svc, proxy_to(svc.ports[0]) as proxy:
        assert svc.broker is not None and not svc.broker.recovery.enabled
        await _lost_consumer_gives_back_at_once(svc, proxy)


async def test_a_source_that_expires_with_its_link_is_not_kept(tmp_path: Path) -> None:
    """The default source (session-end, timeout 0) asks nothing to outlive the link: a
    client that cannot resume (no reconnect policy) loses its connection and what it
    held goes back to the queue at once, recovery or not."""
    async with broker(tmp_path) as svc, proxy_to(svc.ports[0]) as proxy:
        assert svc.broker is not None and svc.broker.recovery.enabled
        await _lost_consumer_gives_back_at_once(svc, proxy)


async def test_a_reconnecting_client_asks_the_broker_to_keep_its_links(tmp_path: Path) -> None:
    """With a reconnect policy, the client's default termini carry a timeout (the policy's
    max_time): that is what makes the broker keep them."""
    async with broker(tmp_path) as svc:
        async with await connect(url_of(svc), timeout=WAIT, reconnect=policy()) as conn:
            rcv = await conn.open_receiver("q", credit=1)
            snd = await conn.open_sender("q")
            assert rcv._link.source is not None and rcv._link.source.timeout == math.ceil(WAIT)
            assert snd._link.target is not None and snd._link.target.timeout == math.ceil(WAIT)
        async with await connect(url_of(svc), timeout=WAIT) as conn:
            rcv = await conn.open_receiver("q", credit=1)
            assert rcv._link.source is not None and not rcv._link.source.timeout


async def test_detach_without_closing_suspends(tmp_path: Path) -> None:
    """A detach with closed=false keeps the link's state (§2.6.13); a close does not."""
    async with broker(tmp_path) as svc:
        await send_bodies(url_of(svc), "q", [1, 2])
        q = queue(svc, "q")
        async with await connect(url_of(svc), timeout=WAIT, container_id="c1") as conn:
            rcv = await conn.open_receiver("q", credit=2, name="r", source=kept("q"))
            [await rcv.receive(timeout=WAIT) for _ in range(2)]
            await rcv.detach(timeout=WAIT)
            assert ("c1", "r", Role.SENDER) in records(svc) and q.count == 0
            # an attach of that name from another container is another link
            async with await connect(url_of(svc), timeout=WAIT, container_id="c2") as conn2:
                assert await drain_bodies(conn2, "q") == []
        # the connection closed cleanly: nothing new was suspended; the detached link's
        # record lives on (it was not resumed) until it expires
        assert list(records(svc)) == [("c1", "r", Role.SENDER)]


async def test_resume_with_another_address_drops_the_record(tmp_path: Path) -> None:
    """The same link name re-attached (resuming) from another address is not that link:
    the record is dropped, its messages go back to their queue; the attach is a new link."""
    from amqp10.client.receiver import Receiver as ClientReceiver

    async with broker(tmp_path) as svc:
        await send_bodies(url_of(svc), "q", [1, 2])
        q = queue(svc, "q")
        async with await connect(url_of(svc), timeout=WAIT, container_id="c1") as conn:
            rcv = await conn.open_receiver("q", credit=2, name="r", source=kept("q"))
            [await rcv.receive(timeout=WAIT) for _ in range(2)]
            old = rcv._link
            held = list(old.unsettled.values())
            await rcv.detach(timeout=WAIT)
            assert ("c1", "r", Role.SENDER) in records(svc) and q.count == 0
            session = conn._session_for(None)
            link = session._session.receiver(
                "r", source=Source(address="elsewhere"), target=old.target, resume_deliveries=held
            )
            await conn._attach(
                ClientReceiver(conn, session, link, address="elsewhere", window=2), WAIT
            )
            assert link.remote_attach is not None and link.remote_attach.unsettled is None
            assert not records(svc) and q.count == 2


# -- producer side --------------------------------------------------------------------------


async def _lose_outcomes(
    svc: BrokerService,
    proxy: Proxy,
    conn: Connection,
    mode: SettleMode,
    *,
    suspended: bool,
    address: str = "p",
) -> tuple[list[Any], Queue]:
    """Send N durable messages (to ``address``, which reaches the queue ``p``) whose
    outcomes never reach the client, then cut the connection; ``suspended``: whether the
    broker then keeps the link for recovery."""
    sender = await conn.open_sender(address, settle_mode=mode, name="s")
    proxy.freeze(up=False, down=True)  # our transfers arrive; the broker's answers do not
    trackers = [sender.submit(Message(body=i, durable=True)) for i in range(N)]
    q = queue(svc, "p")
    assert svc.broker is not None

    def all_accepted() -> bool:
        links = [link for h in svc.broker.connections for link, _ in h.publishers.links.values()]
        return q.count == N and all(
            d.state is not None for link in links for d in link.unsettled.values()
        )

    await until(all_accepted, "the broker accepted all six")
    assert not any(t.done for t in trackers)
    proxy.hold()
    await proxy.cut(broker_side_first=lambda: not svc.broker.connections)
    assert (("c1", "s", Role.RECEIVER) in records(svc)) is suspended
    proxy.release()
    return trackers, q


async def test_resumed_producer_two_phase_no_duplicates(tmp_path: Path) -> None:
    """rcv-settle-mode second: the broker holds its accepted outcomes until the sender
    settles; after the loss, the resuming attach carries them and the sends resolve
    Accepted without being sent again: the queue holds each message once."""
    async with broker(tmp_path) as svc, proxy_to(svc.ports[0]) as proxy:
        async with await reconnecting(proxy) as conn:
            trackers, q = await _lose_outcomes(
                svc, proxy, conn, SettleMode.TWO_PHASE, suspended=True
            )
            await all_accepted(trackers)
            assert conn.reconnects == 1
            assert svc.broker is not None and svc.broker.recovery.resumed == 1
        assert not records(svc)
        assert q.count == N
        async with await connect(url_of(svc), timeout=WAIT) as conn:
            assert sorted(await drain_bodies(conn, "p")) == list(range(N))


async def test_resumed_producer_to_an_exchange_address_no_duplicates(tmp_path: Path) -> None:
    """The same through /exchanges/X/KEY: the resuming attach finds the same exchange and key."""
    vhosts = [{"name": "/", "queues": ["p"], "bindings": [{"source": "amq.direct", "destination": "p", "routing_key": "k"}]}]
    async with broker(tmp_path, vhosts=vhosts) as svc, proxy_to(svc.ports[0]) as proxy:
        async with await reconnecting(proxy) as conn:
            trackers, q = await _lose_outcomes(
                svc, proxy, conn, SettleMode.TWO_PHASE, suspended=True, address="/exchanges/amq.direct/k"
            )
            await all_accepted(trackers)
            assert svc.broker is not None and svc.broker.recovery.resumed == 1
        assert q.count == N


async def test_resumed_producer_at_least_once_loses_nothing(tmp_path: Path) -> None:
    """rcv-settle-mode first: the broker settled (and forgot) each delivery as it accepted
    it, so there is nothing to resume: the client sends them again. No message is lost;
    each arrives twice (at least once, as documented)."""
    async with broker(tmp_path) as svc, proxy_to(svc.ports[0]) as proxy:
        async with await reconnecting(proxy) as conn:
            trackers, q = await _lose_outcomes(
                svc, proxy, conn, SettleMode.AT_LEAST_ONCE, suspended=False
            )
            await all_accepted(trackers)
        async with await connect(url_of(svc), timeout=WAIT) as conn:
            assert sorted(await drain_bodies(conn, "p")) == sorted(list(range(N)) * 2)


# -- durability -----------------------------------------------------------------------------


async def test_suspended_durable_messages_survive_a_crash(tmp_path: Path) -> None:
    """A suspended consumer's durable messages stay in the store: after a crash they
    are delivered again (at least once; no link record is stored)."""
    data = tmp_path / "data"
    bp = await anyio.to_thread.run_sync(
        lambda: BrokerProcess("--port", "0", "--data-dir", str(data))
    )
    try:
        await send_bodies(bp.url, "q", list(range(N)), durable=True)
        async with (
            proxy_to(bp.port) as proxy,
            await connect(proxy.url, timeout=WAIT, container_id="c1") as conn,
        ):
            rcv = await conn.open_receiver("q", credit=N, name="r", source=kept("q"))
            got = [await rcv.receive(timeout=WAIT) for _ in range(N)]
            assert [d.message.body for d in got] == list(range(N))
            await proxy.cut(broker_side_first=lambda: "suspended SuspendedLink('c1', 'r'" in bp.log)
            # the in-flight marks reach the store by group commit, a moment after delivery
            await until(lambda: _in_flight_rows(data) == N, "the in-flight marks are stored")
        bp.proc.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(bp.proc.wait, WAIT)
    finally:
        bp.kill()
    bp = await anyio.to_thread.run_sync(
        lambda: BrokerProcess("--port", "0", "--data-dir", str(data))
    )
    try:
        async with await connect(bp.url, timeout=WAIT) as conn:
            rcv = await conn.open_receiver("q", credit=N)
            again = [await rcv.receive(timeout=WAIT) for _ in range(N)]
            assert [d.message.body for d in again] == list(range(N))
            assert all(
                d.message.header is not None and d.message.header.delivery_count == 1 for d in again
            )
    finally:
        bp.kill()


# -- configuration ----------------------------------------------------------------------------


def _in_flight_rows(data: Path) -> int:
    """Messages the broker's store marks in flight (read alongside the broker: WAL mode)."""
    db = sqlite3.connect(f"file:{data / 'amqp10.sqlite3'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM messages WHERE in_flight = 1").fetchone()[0])
    finally:
        db.close()


def test_link_recovery_config(tmp_path: Path) -> None:
    assert load_config().link_recovery_seconds == 60.0
    good = tmp_path / "good.toml"
    good.write_text("link_recovery_seconds = 0\n[limits]\nmax_suspended_links = 5\n")
    cfg = load_config(good)
    assert cfg.link_recovery_seconds == 0 and cfg.limits.max_suspended_links == 5
    for text, field in (
        ("link_recovery_seconds = -1\n", "link_recovery_seconds"),
        ('link_recovery_seconds = "soon"\n', "link_recovery_seconds"),
        ("[limits]\nmax_suspended_links = -1\n", "limits.max_suspended_links"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            load_config(bad)
