"""An in-memory broker: client engines wired to broker-side engines, no sockets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqp10.broker.amqp1 import ConnectionHandler
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.core.message import QueuedMessage
from amqp10.broker.core.store import Store
from amqp10.message import Message
from amqp10.transport import (
    Connection,
    DeliveryReceived,
    Event,
    LinkAttached,
    Receiver,
    Sender,
    SessionBegun,
)
from amqp10.types import Source, Target


class HeldJournal:
    """A journal whose commits happen on :meth:`commit`; :meth:`crash` forgets what is not committed."""

    stalled: str | None = None

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ops: list[tuple[Any, ...]] = []
        self.callbacks: list[Callable[[], None]] = []

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None:
        self.ops.append(op)
        if on_commit is not None:
            self.callbacks.append(on_commit)

    @property
    def idle(self) -> bool:
        return not self.ops and not self.callbacks

    def commit(self) -> None:
        ops, self.ops = self.ops, []
        callbacks, self.callbacks = self.callbacks, []
        self.store.apply(ops)
        for cb in callbacks:
            cb()

    def crash(self) -> None:
        self.ops.clear()
        self.callbacks.clear()


class Client:
    """One client connection to the in-memory broker, with simple helpers."""

    def __init__(self, net: Net, name: str, hostname: str | None = None) -> None:
        self.net = net
        self.conn = Connection(name, hostname=hostname)
        self.server = Connection(net.broker.config.container_id, send_header=False)
        self.handler = ConnectionHandler(net.broker, self.server)
        self.events: list[Event] = []
        self.conn.open()
        self.session = self.conn.session()
        self.session.begin()
        net.clients.append(self)
        net.pump()

    def sender(self, address: str | None, name: str | None = None, **kw: Any) -> Sender:
        target = kw.pop("target", None) or Target(address=address)
        s = self.session.sender(name or f"snd-{address}-{len(self.session.links)}", target=target, source=Source(), **kw)
        s.attach()
        self.net.pump()
        return s

    def receiver(self, address: str | None, name: str | None = None, credit: int = 0, **kw: Any) -> Receiver:
        source = kw.pop("source", None) or Source(address=address)
        r = self.session.receiver(name or f"rcv-{address}-{len(self.session.links)}", source=source, target=Target(), **kw)
        r.attach()
        self.net.pump()
        if credit:
            r.flow(credit)
            self.net.pump()
        return r

    def send(self, sender: Sender, message: Message | bytes, **kw: Any) -> Any:
        data = message.encode() if isinstance(message, Message) else message
        d = sender.send(data, **kw)
        self.net.pump()
        return d

    def received(self, link: Receiver | None = None) -> list[Any]:
        out = [e.delivery for e in self.events if isinstance(e, DeliveryReceived) and (link is None or e.link is link)]
        self.events = [e for e in self.events if not (isinstance(e, DeliveryReceived) and (link is None or e.link is link))]
        return out


class HandJournal(HeldJournal):
    """The group committer's contract, committed when the test says (``commit``), until
    nothing is left (a commit callback may submit more)."""

    def commit(self) -> None:
        while self.ops:
            super().commit()


class Taker:
    """A consumer with ``n`` credit that keeps what it gets."""

    browse = False

    def __init__(self, n: int, cid: int = 1, selector: Callable[[QueuedMessage], bool] | None = None) -> None:
        self.id = cid
        self.n = n
        self.got: list[QueuedMessage] = []
        self.selector = selector

    def credit(self) -> int:
        return self.n - len(self.got)

    def deliver(self, node: Any, msg: QueuedMessage) -> None:
        self.got.append(msg)

    def cancelled(self) -> None:
        pass


class SyncJournal:
    """A journal that writes each operation to a store at once (no group commit)."""

    stalled: str | None = None
    idle = True

    def __init__(self, store: Any) -> None:
        self.store = store

    def submit(self, op: tuple[object, ...], on_commit: Any = None) -> None:
        self.store.apply([op])
        if on_commit is not None:
            on_commit()


class Net:
    """Pumps bytes between every client and its broker-side connection until quiet."""

    def __init__(self, config: BrokerConfig | None = None, now: Any = None, journal: Any = None) -> None:
        kw = {"now": now} if now is not None else {}
        self.broker = Broker(config or BrokerConfig(), journal=journal, **kw)
        self.clients: list[Client] = []

    def client(self, name: str = "client", hostname: str | None = None) -> Client:
        return Client(self, name, hostname)

    def pump(self, rounds: int = 10_000) -> None:
        for _ in range(rounds):
            moved = False
            for c in self.clients:
                a = c.conn.data_to_send()
                if a:
                    moved = True
                    c.handler.handle(c.server.receive_data(a))
                b = c.server.data_to_send()
                if b:
                    moved = True
                    for e in c.conn.receive_data(b):
                        if isinstance(e, (SessionBegun, LinkAttached)):
                            continue
                        c.events.append(e)
            if not moved:
                return
        raise AssertionError("the network did not quiesce")
