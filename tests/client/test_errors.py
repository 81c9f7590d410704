"""Failures, timeouts, cancellation and closing on every path."""

from __future__ import annotations

import anyio
import pytest

from amqp10 import errors
from amqp10.client import Connection, Receiver, Sender, connect
from amqp10.client._common import deadline
from amqp10.message import Message
from amqp10.types import Accepted, Error, ErrorCondition

from .helpers import WAIT, Service, no_leftover_tasks, running, wait_for

pytestmark = pytest.mark.anyio


async def _free_port() -> int:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port: int = listener.extra(anyio.abc.SocketAttribute.local_port)
    return port


async def test_a_deadline_raises_the_clients_timeout_error_and_only_for_its_own_expiry() -> None:
    with pytest.raises(errors.TimeoutError, match=r"^a wait timed out after 0.05s$"), deadline(0.05, "a wait"):
        await anyio.sleep(WAIT)
    with pytest.raises(errors.TimeoutError, match=r"^a wait timed out after 2s$"), deadline(0.01, "a wait", 2.0):
        await anyio.sleep(WAIT)  # (the limit shown is the caller's)
    with pytest.raises(errors.TimeoutError, match=r"^a body timed out after 1s$"), deadline(1.0, "a body"):
        raise TimeoutError  # a plain one from the body is taken for the deadline's
    mine = errors.TimeoutError("mine")
    with pytest.raises(errors.TimeoutError) as info, deadline(1.0, "a body"):
        raise mine
    assert info.value is mine
    with pytest.raises(ValueError), deadline(1.0, "a body"):
        raise ValueError
    with deadline(WAIT, "a wait"):
        await anyio.sleep(0)
    with anyio.move_on_after(0.01) as outer:  # a cancellation from outside is not a timeout
        with deadline(WAIT, "a wait"):
            await anyio.sleep(WAIT)
    assert outer.cancelled_caught


async def test_connection_refused() -> None:
    port = await _free_port()
    async with no_leftover_tasks():
        with pytest.raises(errors.ConnectError) as info:
            await connect(f"amqp://127.0.0.1:{port}", timeout=WAIT)
    assert str(info.value) == f"could not connect to 127.0.0.1:{port}: connection refused"
    assert isinstance(info.value, OSError)


async def test_silent_peer_times_out_the_open() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            accepted: list[anyio.abc.SocketStream] = []

            async def hold() -> None:
                accepted.append(await listener.listeners[0].accept())

            tg.start_soon(hold)
            async with no_leftover_tasks():
                with pytest.raises(errors.TimeoutError) as info:
                    await connect(f"amqp://127.0.0.1:{port}", timeout=0.2)
            assert "opening the connection to 127.0.0.1" in str(info.value)
            assert "timed out after 0.2s" in str(info.value)
            assert isinstance(info.value, TimeoutError)
        for s in accepted:
            await s.aclose()


async def test_non_amqp_peer() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)

        async def http(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                await stream.send(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, http)
            with pytest.raises(errors.ConnectionError, match="unsupported protocol header"):
                await connect(f"amqp://127.0.0.1:{port}", timeout=WAIT)
            tg.cancel_scope.cancel()


async def test_refused_link_carries_the_peers_reason() -> None:
    def only_known(kind: str, address: str | None) -> Error | None:
        if address == "known":
            return None
        return Error(condition=ErrorCondition.NOT_FOUND, description=f"no node {address!r}")

    async with (
        running(Service(), link_filter=only_known) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        with pytest.raises(errors.LinkError) as info:
            await conn.open_sender("nope")
        assert info.value.condition == "amqp:not-found"
        assert info.value.description == "no node 'nope'"
        assert str(info.value) == (
            "the peer refused the sender to 'nope': amqp:not-found: no node 'nope'"
        )
        with pytest.raises(errors.LinkError, match="refused the receiver from 'nope'"):
            await conn.open_receiver("nope")
        sender = await conn.open_sender("known")  # the connection is still fine
        assert isinstance(await sender.send(Message(body=1)), Accepted)


async def test_peer_detaches_with_an_error() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("q")
        await svc.wait(lambda: len(svc.links) == 1)
        await svc.links[0].close(
            Error(condition=ErrorCondition.RESOURCE_DELETED, description="gone")
        )
        await wait_for(sender._sig, lambda: sender.error is not None)
        with pytest.raises(errors.LinkError) as info:
            await sender.send(Message(body=1))
        assert info.value.condition == "amqp:resource-deleted"
        assert "sender to 'q' detached by the peer" in str(info.value)
        assert not sender.is_open


async def test_peer_closes_the_connection_with_an_error() -> None:
    svc = Service()
    async with (
        running(svc) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        receiver = await conn.open_receiver("nothing")
        await svc.wait(lambda: len(svc.connections) == 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                svc.connections[0].close,
                Error(condition=ErrorCondition.CONNECTION_FORCED, description="maintenance"),
            )
            with pytest.raises(errors.ConnectionError) as info:
                await receiver.receive()
        assert info.value.condition == "amqp:connection:forced"
        assert "closed by the peer: amqp:connection:forced: maintenance" in str(info.value)
        with pytest.raises(errors.ConnectionError, match="maintenance"):
            await conn.open_sender("q")
        assert not conn.is_open


async def test_handler_failure_closes_with_internal_error() -> None:
    async def broken(conn: Connection) -> None:
        raise RuntimeError("boom")

    async with running(broken) as server:
        # the close may come before connect() returns, or after
        with pytest.raises(errors.ConnectionError) as info:
            async with await connect(server.url, timeout=WAIT) as conn:
                await conn.wait_closed()
                assert conn.error is not None
                raise conn.error
        assert info.value.condition == "amqp:internal-error"
        assert "the service failed: RuntimeError" in str(info.value)


async def test_send_without_credit_times_out_and_is_withdrawn() -> None:
    svc = Service()
    async with (
        running(svc, link_credit=0) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("q")
        with pytest.raises(errors.TimeoutError) as info:
            await sender.send(Message(body="never"), timeout=0.1)
        assert str(info.value) == "send to 'q' timed out after 0.1s (no credit from the peer)"
        with pytest.raises(errors.TimeoutError):
            await sender.send(Message(body="never either"), settled=True, timeout=0.05)
        assert sender.queued == 0
        # the peer grants credit now: only what we send next arrives
        server_receiver = svc.links[0]
        assert isinstance(server_receiver, Receiver)
        server_receiver.add_credit(10)
        assert isinstance(await sender.send(Message(body="wanted")), Accepted)
        await svc.wait(lambda: len(svc.received) == 1)
        assert [d.message.body for d in svc.received] == ["wanted"]


async def test_cancelled_send_leaves_the_connection_usable() -> None:
    svc = Service()
    async with (
        running(svc) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("q")
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender.send, Message(body="held", subject="hold"))
            await svc.wait(lambda: len(svc.held) == 1)
            tg.cancel_scope.cancel()
        assert not sender._pending
        assert isinstance(await sender.send(Message(body="next")), Accepted)
        # the late outcome of the cancelled send is settled and dropped quietly
        await svc.held[0].accept()
        assert isinstance(await sender.send(Message(body="after")), Accepted)
        assert svc.errors == []


async def test_timed_out_outcome() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("q")
        with pytest.raises(errors.TimeoutError, match=r"waiting for the peer's outcome"):
            await sender.send(Message(body="held", subject="hold"), timeout=0.1)
        assert isinstance(await sender.send(Message(body="next")), Accepted)


async def test_cancelled_receive_takes_nothing() -> None:
    svc = Service()
    async with (
        running(svc) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        receiver = await conn.open_receiver(dynamic=True)
        await svc.wait(lambda: len(svc.links) == 1)
        served = svc.links[0]
        assert isinstance(served, Sender)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(receiver.receive)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        assert receiver.buffered == 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(served.send, Message(body="one"))
            got = await receiver.receive()
            await got.accept()
        assert got.message.body == "one"


async def test_receive_after_close_and_close_while_waiting() -> None:
    async with running(Service()) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("nothing")
        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver.close)
            with pytest.raises(errors.LinkDetached, match="receiver from 'nothing' is closed"):
                await receiver.receive()
        with pytest.raises(errors.LinkDetached):
            await receiver.receive()
        await receiver.close()  # twice is fine


async def test_request_timeout_and_rejection() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        with pytest.raises(errors.TimeoutError, match="request to 'svc' timed out"):
            await conn.request("svc", Message(body=1, subject="hold"), timeout=0.2)
        assert conn._requests == {}
        with pytest.raises(
            errors.DeliveryError, match=r"was rejected \(amqp:not-allowed: no thanks\)"
        ):
            await conn.request("svc", Message(body=1, subject="reject"))
        assert (await conn.request("svc", Message(body=2))).body == "pong: 2"


async def test_close_from_another_task_fails_waiters() -> None:
    svc = Service()
    async with (
        running(svc) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("q")
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.close)
            with pytest.raises(errors.ConnectionClosed, match="is closed"):
                await sender.send(Message(body="x", subject="hold"))
        await conn.close()
        with pytest.raises(errors.ConnectionClosed):
            await conn.open_sender("q")


async def test_exception_in_body_closes_cleanly() -> None:
    svc = Service()
    async with running(svc) as server:
        with pytest.raises(ZeroDivisionError):
            async with no_leftover_tasks(), await connect(server.url, timeout=WAIT) as conn:
                await conn.open_sender("q")
                1 / 0  # noqa: B018
        assert isinstance(conn.error, errors.ConnectionClosed)
        await svc.wait(lambda: svc.connections[0].error is not None)


async def test_cancelled_body_closes_cleanly() -> None:
    async with running(Service()) as server, no_leftover_tasks():
        with anyio.CancelScope() as scope:
            async with await connect(server.url, timeout=WAIT) as conn:
                receiver = await conn.open_receiver("nothing")
                scope.cancel()
                await receiver.receive(timeout=WAIT)
        assert scope.cancelled_caught
        assert isinstance(conn.error, errors.ConnectionClosed)


async def test_server_shutdown_closes_clients() -> None:
    svc = Service()
    async with no_leftover_tasks(), running(svc) as server:
        conn = await connect(server.url, timeout=WAIT)
        async with conn:
            receiver = await conn.open_receiver("nothing")
            await server.close()
            with pytest.raises(errors.ConnectionClosed, match="closed by the peer"):
                await receiver.receive()
            assert server.connections == frozenset()
