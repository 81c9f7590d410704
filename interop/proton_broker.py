"""A small AMQP 1.0 broker on Proton's Python API: the "Proton-based broker" interop peer.

Run it as ``python -m interop.proton_broker --port 0 [--tls-port 0 --cert C --key K]
[--idle-timeout S]``; it prints one ``listening on 127.0.0.1:PORT`` line per
listener (``... (TLS)`` for the amqps one) and runs until SIGTERM/SIGINT.

What it does, on Proton's raw endpoint events (no MessagingHandler, so that
settlement is under our control):

- queues keyed by address, created on first use; competing consumers take
  turns; a consumer whose source asks for ``distribution-mode copy`` browses
  (gets copies, the queue keeps the messages);
- dynamic sources/targets get a fresh address (a temporary queue, deleted
  with its link): that is what dynamic reply-to needs;
- settle modes as the client asks: pre-settled deliveries, unsettled ones,
  and ``rcv-settle-mode second`` (our accept stays unsettled until the
  producer settles, then we settle);
- consumer outcomes: accepted/rejected drop the message, released requeues
  it, modified requeues it (with ``header.delivery-count`` + 1 if
  ``delivery-failed``); a consumer that goes away releases what it held;
- drain: a draining consumer gets what is queued, then its credit back;
- idle timeout: ``--idle-timeout`` sets every transport's idle timeout.

SASL is Proton's built-in layer (ANONYMOUS; this build has no Cyrus, so no
PLAIN on the server side). It never listens anywhere but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import signal
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from proton import Disposition, Endpoint, Link, Message, SSLDomain, Terminus
from proton.reactor import Container

__all__ = ["ProtonBroker", "main"]

HOST = "127.0.0.1"
CREDIT_WINDOW = 100
POLL = 0.05  # seconds between checks of the stop flag


@dataclass
class _Queued:
    seq: int
    data: bytes


@dataclass
class _Consumer:
    link: Any
    browse: bool
    cursor: int = 0  # browsers: the last sequence number sent


@dataclass
class _Queue:
    address: str
    dynamic: bool = False
    messages: collections.deque[_Queued] = field(default_factory=collections.deque)
    consumers: list[_Consumer] = field(default_factory=list)
    turn: int = 0


class ProtonBroker:
    """The broker's event handler (the Container calls ``on_<event>`` methods)."""

    def __init__(
        self,
        port: int,
        tls_port: int | None,
        ssl_domain: SSLDomain | None,
        idle_timeout: float | None,
    ) -> None:
        self.port = port
        self.tls_port = tls_port
        self.ssl_domain = ssl_domain
        self.idle_timeout = idle_timeout
        self.queues: dict[str, _Queue] = {}
        self.consumers: dict[Any, tuple[_Queue, _Consumer]] = {}  # sender link -> consumer
        self.inflight: dict[Any, dict[Any, bytes]] = {}  # sender link -> {delivery: message}
        self.second: dict[
            Any, list[Any]
        ] = {}  # receiver link -> deliveries waiting for the producer to settle
        self.tags = itertools.count(1)
        self.seq = itertools.count(1)
        self.stopping = False
        self.acceptors: list[Any] = []

    # -- lifecycle ------------------------------------------------------------------------
    def on_reactor_init(self, event: Any) -> None:
        c = event.container
        c.container_id = "interop-proton-broker"
        plain = c.acceptor(HOST, self.port)
        self.acceptors.append(plain)
        print(f"listening on {HOST}:{_port_of(plain)}", flush=True)
        if self.ssl_domain is not None and self.tls_port is not None:
            tls = c.acceptor(HOST, self.tls_port)
            tls.set_ssl_domain(self.ssl_domain)
            self.acceptors.append(tls)
            print(f"listening on {HOST}:{_port_of(tls)} (TLS)", flush=True)
        c.schedule(POLL, self)

    def on_timer_task(self, event: Any) -> None:
        if not self.stopping:
            event.container.schedule(POLL, self)
            return
        for a in self.acceptors:
            a.close()
        event.container.stop()

    # -- connections, sessions ------------------------------------------------------------
    def on_connection_bound(self, event: Any) -> None:
        if self.idle_timeout:
            event.transport.idle_timeout = self.idle_timeout

    def on_connection_remote_open(self, event: Any) -> None:
        conn = event.connection
        if conn.state & Endpoint.LOCAL_UNINIT:
            conn.container = "interop-proton-broker"
            conn.open()

    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.incoming_capacity = 64 * 1024 * 1024
            event.session.open()

    def on_session_remote_close(self, event: Any) -> None:
        if not event.session.state & Endpoint.LOCAL_CLOSED:
            event.session.close()

    def on_connection_remote_close(self, event: Any) -> None:
        self._forget_connection(event.connection)
        if not event.connection.state & Endpoint.LOCAL_CLOSED:
            event.connection.close()

    def on_transport_closed(self, event: Any) -> None:
        if event.connection is not None:
            self._forget_connection(event.connection)

    def _forget_connection(self, conn: Any) -> None:
        for link in [lk for lk in self.consumers if lk.connection == conn]:
            self._drop_consumer(link)
        for link in [lk for lk in self.second if lk.connection == conn]:
            del self.second[link]

    # -- links ----------------------------------------------------------------------------
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_sender:
            self._open_consumer(link)
        else:
            self._open_producer(link)

    def _open_consumer(self, link: Any) -> None:
        rs = link.remote_source
        link.source.copy(rs)
        link.target.copy(link.remote_target)
        if rs.dynamic:
            address = f"proton.dynamic.{uuid.uuid4()}"
            link.source.address = address
            queue = self.queues[address] = _Queue(address, dynamic=True)
        elif rs.address:
            queue = self._queue(rs.address)
        else:
            link.source.type = Terminus.UNSPECIFIED
            link.open()
            link.condition = _condition("amqp:invalid-field", "a consumer needs a source address")
            link.close()
            return
        browse = rs.distribution_mode == Terminus.DIST_MODE_COPY
        link.source.distribution_mode = (
            Terminus.DIST_MODE_COPY if browse else Terminus.DIST_MODE_MOVE
        )
        consumer = _Consumer(link, browse)
        queue.consumers.append(consumer)
        self.consumers[link] = (queue, consumer)
        self.inflight[link] = {}
        link.open()
        self._dispatch(queue)

    def _open_producer(self, link: Any) -> None:
        rt = link.remote_target
        link.source.copy(link.remote_source)
        link.target.copy(rt)
        if rt.dynamic:
            address = f"proton.dynamic.{uuid.uuid4()}"
            link.target.address = address
            self.queues[address] = _Queue(address, dynamic=True)
        link.open()
        link.flow(CREDIT_WINDOW)

    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            self._drop_consumer(link)
        else:
            self.second.pop(link, None)
            address = link.target.address
            q = self.queues.get(address) if address else None
            if q is not None and q.dynamic and not q.consumers:
                del self.queues[address]
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.close()

    def on_link_remote_detach(self, event: Any) -> None:
        """A detach without closing: no link recovery here, so the same as a close, answered with a detach."""
        link = event.link
        if link.is_sender:
            self._drop_consumer(link)
        else:
            self.second.pop(link, None)
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.detach()

    def _drop_consumer(self, link: Any) -> None:
        entry = self.consumers.pop(link, None)
        held = self.inflight.pop(link, {})
        if entry is None:
            return
        queue, consumer = entry
        if consumer in queue.consumers:
            queue.consumers.remove(consumer)
        if not consumer.browse:
            for data in reversed(list(held.values())):  # what it held goes back, in order
                queue.messages.appendleft(_Queued(next(self.seq), data))
        if queue.dynamic and not queue.consumers:
            self.queues.pop(queue.address, None)
        else:
            self._dispatch(queue)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if not link.is_sender:
            return
        entry = self.consumers.get(link)
        if entry is None:
            return
        self._dispatch(entry[0])
        if link.drain_mode and link.credit > 0:
            # only here, where no settled delivery of ours is referenced: Proton
            # suppresses the drain reply while one is (interop/README.md, quirks)
            link.drained()

    # -- messages -------------------------------------------------------------------------
    def on_delivery(self, event: Any) -> None:
        d = event.delivery
        link = d.link
        if link.is_receiver:
            self._incoming(link, d)
        else:
            self._outcome(link, d)

    def _incoming(self, link: Any, d: Any) -> None:
        if d.readable and not d.partial:
            if d.aborted:
                d.settle()
                link.flow(1)
                return
            data = bytes(link.recv(d.pending) or b"")
            link.advance()
            address = link.target.address
            if not address:  # the anonymous relay: the message says where it goes
                msg = Message()
                msg.decode(data)
                address = msg.address
            if not address:
                d.local.condition = _condition("amqp:not-found", "no address")
                d.update(Disposition.REJECTED)
                d.settle()
            else:
                queue = self._queue(address)
                queue.messages.append(_Queued(next(self.seq), data))
                if d.settled:
                    d.settle()  # pre-settled: at most once
                elif link.rcv_settle_mode == Link.RCV_SECOND:
                    d.update(Disposition.ACCEPTED)  # settled once the producer settles
                    self.second.setdefault(link, []).append(d)
                else:
                    d.update(Disposition.ACCEPTED)
                    d.settle()
                self._dispatch(queue)
            if link.credit < CREDIT_WINDOW // 2:
                link.flow(CREDIT_WINDOW - link.credit)
        elif d.settled and not d.readable:  # rcv-settle-mode second: the producer settled
            waiting = self.second.get(link, [])
            if d in waiting:
                waiting.remove(d)
            d.settle()

    def _outcome(self, link: Any, d: Any) -> None:
        held = self.inflight.get(link)
        if held is None or d not in held:
            if d.settled:
                d.settle()
            return
        state = d.remote_state
        if not (d.settled or state in _TERMINAL):
            return  # received(...) or nothing yet
        data = held.pop(d)
        entry = self.consumers.get(link)
        if entry is not None and not entry[1].browse:
            queue = entry[0]
            if state == Disposition.RELEASED:
                queue.messages.appendleft(_Queued(next(self.seq), data))
            elif state == Disposition.MODIFIED:
                if d.remote.failed:
                    data = _count_failure(data)
                queue.messages.appendleft(_Queued(next(self.seq), data))
            # accepted, rejected, or settled without an outcome: consumed
        d.settle()
        if entry is not None:
            self._dispatch(entry[0])

    def _queue(self, address: str) -> _Queue:
        q = self.queues.get(address)
        if q is None:
            q = self.queues[address] = _Queue(address)
        return q

    def _dispatch(self, queue: _Queue) -> None:
        for c in list(queue.consumers):  # browsers: every message, each once
            if c.browse:
                for m in list(queue.messages):
                    if c.link.credit <= 0:
                        break
                    if m.seq > c.cursor:
                        self._send(c.link, m.data)
                        c.cursor = m.seq
        movers = [c for c in queue.consumers if not c.browse]
        while queue.messages and movers:
            ready = [
                c for c in movers if c.link.credit > 0 and c.link.state & Endpoint.LOCAL_ACTIVE
            ]
            if not ready:
                break
            c = ready[queue.turn % len(ready)]
            queue.turn += 1
            m = queue.messages.popleft()
            self._send(c.link, m.data)

    def _send(self, link: Any, data: bytes) -> None:
        d = link.delivery(str(next(self.tags)).encode())
        link.stream(data)
        link.advance()
        if link.snd_settle_mode == Link.SND_SETTLED:
            d.settle()  # pre-settled: no reference kept (Proton's drain quirk)
        else:
            self.inflight[link][d] = data


_TERMINAL = (Disposition.ACCEPTED, Disposition.REJECTED, Disposition.RELEASED, Disposition.MODIFIED)


def _count_failure(data: bytes) -> bytes:
    """The message with ``header.delivery-count`` one higher (after a failed delivery)."""
    msg = Message()
    msg.decode(data)
    msg.delivery_count += 1
    return bytes(msg.encode())


def _condition(name: str, description: str) -> Any:
    from proton import Condition

    return Condition(name, description)


def _port_of(acceptor: Any) -> int:
    port: int = acceptor._selectable._delegate.getsockname()[1]
    return port


def _ssl_domain(cert: str, key: str) -> SSLDomain:
    dom = SSLDomain(SSLDomain.MODE_SERVER)
    dom.set_credentials(cert, key, None)
    dom.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    return dom


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m interop.proton_broker", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--port", type=int, default=5672, help="amqp port on 127.0.0.1 (0: any free port)"
    )
    p.add_argument(
        "--tls-port", type=int, default=None, help="amqps port on 127.0.0.1 (needs --cert/--key)"
    )
    p.add_argument("--cert", help="server certificate (PEM)")
    p.add_argument("--key", help="server private key (PEM)")
    p.add_argument(
        "--idle-timeout", type=float, default=None, help="seconds (Proton advertises half)"
    )
    args = p.parse_args(argv)
    dom = None
    if args.tls_port is not None:
        if not (args.cert and args.key):
            p.error("--tls-port needs --cert and --key")
        dom = _ssl_domain(args.cert, args.key)
    broker = ProtonBroker(args.port, args.tls_port, dom, args.idle_timeout)

    def stop(signum: int, frame: Any) -> None:
        broker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    Container(broker).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
