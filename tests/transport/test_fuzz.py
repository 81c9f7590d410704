"""Fuzzing the engine: random bytes and mutated frames from a hostile peer.

One invariant (h11 ``fuzz/afl-server.py``): whatever the peer sends, the engine
returns events and, if the input is bad, tears down cleanly — a close, end or
detach carrying an ``amqp:*`` condition it also reports as an event. Never a
Python exception out of ``receive_data``, never an ``amqp:internal-error`` (that is
the engine's catch-all: a bug of ours), never a wedged engine (after a
connection failure it is closing or closed, more input is harmless, and the end
of the stream ends it), and everything it writes is well-formed frames.

The generators here are plain functions of a ``random.Random``, shared with
``bench/fuzz_engine.py`` (the long-running form). The tests run them briefly
under Hypothesis, plus ``binary()`` straight after a valid header, both on a
fresh connection and mid-session (after a valid open, begin and attaches with
credit, with deliveries flowing both ways).
"""

from __future__ import annotations

import random
import string
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from amqp10.transport import (
    Connection,
    ConnectionFailed,
    ConnectionOpened,
    ConnectionState,
    CreditAdded,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    Event,
    IllegalStateError,
    LinkAttached,
    LinkFailed,
    LinkState,
    Receiver,
    Sender,
    SessionBegun,
    SessionFailed,
    SessionState,
)
from amqp10.transport.framing import AMQP_HEADER, FRAME_HEADER, SASL_HEADER
from amqp10.types import (
    Accepted,
    Attach,
    Begin,
    Close,
    Described,
    Detach,
    Disposition,
    End,
    Error,
    ErrorCondition,
    Flow,
    Modified,
    Open,
    Received,
    Rejected,
    Released,
    Role,
    Source,
    Target,
    Transfer,
    codec,
    symbol,
    ubyte,
    uint,
    ulong,
    ushort,
)
from amqp10.types.composite import Composite, primitive_of

__all__ = [
    "MODES",
    "Failure",
    "gen_case",
    "run_case",
]

CONDITIONS = frozenset(str(c) for c in ErrorCondition)
PERFORMATIVES: tuple[type[Composite], ...] = (
    Open,
    Begin,
    Attach,
    Flow,
    Transfer,
    Disposition,
    Detach,
    End,
    Close,
)
# performatives a peer sends mid-session, weighted towards the busy ones
MID_SESSION: tuple[type[Composite], ...] = (
    (Transfer,) * 8
    + (Flow,) * 6
    + (Disposition,) * 6
    + (Attach, Detach) * 2
    + (Begin, End, Open, Close)
)
INTERESTING_U32 = (0, 1, 2, 3, 5, 7, 100, 255, 256, 65535, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1)
CLOSING = frozenset(
    {
        ConnectionState.END,
        ConnectionState.DISCARDING,
        ConnectionState.CLOSE_PIPE,  # failed before the peer's open came: a DISCARDING
        ConnectionState.CLOSE_SENT,  # ... and then the peer's open came
        ConnectionState.OC_PIPE,
    }
)


class Failure(AssertionError):
    """An input made the engine break the fuzz invariant."""


# --------------------------------------------------------------------------------------
# generators: random values, performatives, frames, streams, mutations
# --------------------------------------------------------------------------------------
def r_u32(rng: random.Random, near: int = 0) -> int:
    x = rng.random()
    if x < 0.4:
        return (near + rng.randint(-2, 3)) & 0xFFFFFFFF
    if x < 0.8:
        return rng.choice(INTERESTING_U32)
    return rng.getrandbits(32)


def r_text(rng: random.Random, n: int = 12, *, ascii_only: bool = False) -> str:
    if not ascii_only and rng.random() < 0.1:
        return "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(0, n)))
    return "".join(rng.choice(string.ascii_letters + "-:._") for _ in range(rng.randint(0, n)))


def r_any(rng: random.Random, depth: int = 0) -> Any:
    """Any AMQP value: what a field may hold when the peer does not follow the schema."""
    kinds = ["none", "bool", "uint", "ulong", "int", "str", "sym", "bin", "float"]
    if depth < 3:
        kinds += ["list", "map", "described"]
    k = rng.choice(kinds)
    if k == "none":
        return None
    if k == "bool":
        return rng.random() < 0.5
    if k == "uint":
        return uint(r_u32(rng))
    if k == "ulong":
        return ulong(rng.getrandbits(64))
    if k == "int":
        return rng.randint(-(2**63), 2**63 - 1)
    if k == "str":
        return r_text(rng)
    if k == "sym":
        return symbol(r_text(rng, ascii_only=True))
    if k == "bin":
        return rng.randbytes(rng.randint(0, 40))
    if k == "float":
        return rng.random() * 1e6
    if k == "list":
        return [r_any(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if k == "map":
        return {r_any(rng, 3): r_any(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    code = rng.choice(
        [
            0x10,
            0x11,
            0x12,
            0x13,
            0x14,
            0x15,
            0x16,
            0x17,
            0x18,
            0x1D,
            0x23,
            0x24,
            0x25,
            0x26,
            0x27,
            0x28,
            0x29,
            0x77,
        ]
    )
    return Described(ulong(code), [r_any(rng, depth + 1) for _ in range(rng.randint(0, 4))])


def r_error(rng: random.Random) -> Error:
    cond = rng.choice(sorted(CONDITIONS)) if rng.random() < 0.8 else r_text(rng, ascii_only=True)
    return Error(condition=cond, description=r_text(rng, 30) if rng.random() < 0.5 else None)


def r_state(rng: random.Random) -> Any:
    return rng.choice(
        [
            Accepted(),
            Released(),
            Rejected(error=r_error(rng)),
            Modified(delivery_failed=rng.random() < 0.5, undeliverable_here=None),
            Received(section_number=r_u32(rng), section_offset=ulong(rng.getrandbits(20))),
            None,
        ]
    )


@dataclass
class Context:
    """What the peer knows of the session: keeps generated frames plausible mid-session."""

    handles: tuple[int, ...] = (0, 1)
    delivery_id: int = 0
    transfer_id: int = 0
    names: tuple[str, ...] = ("to-fuzz", "from-fuzz")
    open_delivery: int | None = None  # a multi-frame delivery in progress (mid-session)


def r_field(rng: random.Random, f: Any, ctx: Context) -> Any:
    """A value for composite field ``f`` (mostly of its declared type)."""
    if not f.mandatory and rng.random() < 0.35:
        return None
    name = f.name
    prim = primitive_of(f.type)
    if name == "handle":
        return uint(rng.choice(ctx.handles) if rng.random() < 0.85 else r_u32(rng))
    if name in ("delivery-id", "first", "last"):
        return uint(r_u32(rng, ctx.delivery_id))
    if name in ("next-incoming-id", "next-outgoing-id"):
        return uint(r_u32(rng, ctx.transfer_id))
    if name == "name":
        return rng.choice(ctx.names) if rng.random() < 0.7 else r_text(rng)
    if name == "max-frame-size":
        return uint(rng.choice([512, 1024, 4096, 65536, 511, 0, 2**32 - 1, r_u32(rng)]))
    if f.multiple:
        return [symbol(r_text(rng, ascii_only=True)) for _ in range(rng.randint(0, 3))]
    if prim == "uint":
        return uint(r_u32(rng))
    if prim == "ushort":
        return ushort(rng.choice([0, 1, 2, 3, 65535, rng.getrandbits(16)]))
    if prim == "ubyte":
        return ubyte(rng.choice([0, 1]) if rng.random() < 0.9 else rng.choice([2, 3, 255]))
    if prim == "ulong":
        return ulong(rng.choice([0, 1, 1 << 20, 2**64 - 1, rng.getrandbits(64)]))
    if prim == "boolean":
        return rng.random() < 0.5
    if prim == "string":
        return r_text(rng)
    if prim == "symbol":
        if f.requires == "error-condition":
            return symbol(rng.choice(sorted(CONDITIONS)))
        return symbol(r_text(rng, ascii_only=True))
    if prim == "binary":
        return rng.randbytes(rng.choice([0, 1, 4, 8, 32, 33, 40]))
    if prim in ("symbol-keyed-map", "map"):
        return {
            symbol(r_text(rng, ascii_only=True)): r_any(rng, 2) for _ in range(rng.randint(0, 3))
        }
    if prim == "error":
        return r_error(rng)
    if f.requires in ("delivery-state", "outcome"):
        return r_state(rng)
    if f.requires == "source":
        return Source(address=r_text(rng)) if rng.random() < 0.8 else Target(address="wrong")
    if f.requires == "target":
        return Target(address=r_text(rng)) if rng.random() < 0.8 else Source(address="wrong")
    return r_any(rng)


def r_performative(rng: random.Random, cls: type[Composite], ctx: Context) -> Any:
    """A performative of class ``cls`` with random field values (an encodable value).

    Mostly a typed instance; sometimes the described list of its descriptor with
    values of any type, or too few/many fields, so that decoding is exercised too.
    """
    if rng.random() < 0.05:
        n = len(cls.FIELDS) + rng.randint(-3, 2)
        return Described(ulong(cls.DESCRIPTOR_CODE), [r_any(rng, 1) for _ in range(max(n, 0))])
    kwargs = {f.attr: r_field(rng, f, ctx) for f in cls.FIELDS}
    for _ in range(len(cls.FIELDS) + 1):
        try:
            perf = cls(**kwargs)
            codec.encode(perf)
            return perf
        except Exception as exc:  # a value the schema refuses: try without it
            bad = [k for k in kwargs if k in str(exc).replace("-", "_")] or [
                rng.choice(list(kwargs))
            ]
            for k in bad:
                kwargs[k] = None
    return Described(ulong(cls.DESCRIPTOR_CODE), [])


def frame_bytes(
    channel: int, body: bytes, *, doff: int = 2, ftype: int = 0, ext: bytes = b""
) -> bytes:
    return FRAME_HEADER.pack(8 + len(ext) + len(body), doff, ftype, channel) + ext + body


def perf_frame(channel: int, perf: Any, payload: bytes = b"") -> bytes:
    return frame_bytes(channel, codec.encode(perf) + payload)


def r_plausible(rng: random.Random, ctx: Context) -> bytes:
    """A frame a busy (mostly correct) peer would send mid-session on the set-up links."""
    k = rng.random()
    if k < 0.4:  # the next delivery (or part of one) on the link the engine receives on
        more = rng.random() < 0.3
        first = ctx.open_delivery is None
        t = Transfer(
            handle=0,
            delivery_id=ctx.delivery_id if first or rng.random() < 0.3 else None,
            delivery_tag=b"t%d" % ctx.delivery_id if first else None,
            message_format=0 if first else None,
            settled=rng.random() < 0.3 if first or rng.random() < 0.2 else None,
            more=more,
            state=r_state(rng) if rng.random() < 0.1 else None,
            aborted=rng.random() < 0.1,
        )
        ctx.transfer_id += 1
        if more and not t.aborted:
            ctx.open_delivery = ctx.delivery_id
        else:
            ctx.open_delivery = None
            ctx.delivery_id += 1
        return perf_frame(0, t, rng.randbytes(rng.choice([0, 1, 100, 300])))
    if k < 0.6:  # credit, drain, echo on the link the engine sends on (or a session flow)
        link = rng.random() < 0.8
        f = Flow(
            next_incoming_id=rng.choice([0, 1, 2, 5]) if rng.random() < 0.9 else None,
            incoming_window=rng.choice([0, 1, 10, 2048]),
            next_outgoing_id=ctx.transfer_id,
            outgoing_window=100,
            handle=rng.choice([1, 1, 1, 0]) if link else None,
            delivery_count=rng.choice([0, 1, 2, 3, 10]) if link and rng.random() < 0.9 else None,
            link_credit=rng.choice([0, 1, 2, 10, 2**32 - 1]) if link else None,
            available=rng.choice([None, 0, 5]),
            drain=rng.random() < 0.3,
            echo=rng.random() < 0.3,
        )
        return perf_frame(0, f)
    if k < 0.8:  # outcomes and settlement for either side's deliveries
        role = rng.random() < 0.7  # True: as receiver, about the engine's deliveries
        lo = rng.choice([0, 1, 2, 3, ctx.delivery_id])
        d = Disposition(
            role=role,
            first=lo,
            last=lo + rng.choice([0, 0, 1, 5, 1000]) if rng.random() < 0.5 else None,
            settled=rng.random() < 0.6,
            state=r_state(rng),
            batchable=rng.random() < 0.2,
        )
        return perf_frame(0, d)
    if k < 0.9:  # detach / re-attach a link, or attach a new one
        h = rng.choice([0, 1, 2, 3])
        if rng.random() < 0.5:
            return perf_frame(
                0,
                Detach(
                    handle=h,
                    closed=rng.random() < 0.5,
                    error=r_error(rng) if rng.random() < 0.3 else None,
                ),
            )
        role = rng.random() < 0.5
        return perf_frame(
            0,
            Attach(
                name=rng.choice(["to-fuzz", "from-fuzz", "new-%d" % h]),
                handle=h,
                role=role,
                snd_settle_mode=rng.choice([0, 1, 2]),
                rcv_settle_mode=rng.choice([0, 1]),
                source=Source(address="q"),
                target=Target(address="q"),
                unsettled={b"t0": Accepted()} if rng.random() < 0.2 else None,
                initial_delivery_count=None if role else rng.choice([0, 5, 2**32 - 1]),
            ),
        )
    if k < 0.95:  # another session, or ending this one
        if rng.random() < 0.5:
            return perf_frame(
                rng.choice([0, 1, 2]), End(error=r_error(rng) if rng.random() < 0.3 else None)
            )
        return perf_frame(
            rng.choice([1, 2, 0]),
            Begin(
                remote_channel=rng.choice([None, 0, 1]),
                next_outgoing_id=0,
                incoming_window=10,
                outgoing_window=10,
            ),
        )
    return perf_frame(0, Close(error=r_error(rng) if rng.random() < 0.5 else None))


def r_frame(rng: random.Random, ctx: Context, mid_session: bool) -> bytes:
    if mid_session and rng.random() < 0.6:
        return r_plausible(rng, ctx)
    cls = rng.choice(MID_SESSION if mid_session else PERFORMATIVES)
    perf = r_performative(rng, cls, ctx)
    payload = b""
    if cls is Transfer:
        payload = rng.randbytes(rng.choice([0, 1, 10, 100, 600]) if rng.random() < 0.95 else 5000)
        ctx.transfer_id += 1
        if getattr(perf, "delivery_id", None) is not None and not getattr(perf, "more", True):
            ctx.delivery_id += 1
    channel = 0 if rng.random() < 0.96 else rng.choice([1, 2, 255, 65535])
    if cls is Begin and rng.random() < 0.5:
        channel = rng.choice([1, 2, 3])
    return perf_frame(channel, perf, payload)


# The peer's side of a session set up with the engine under test (the "mid-session"
# mode): it begins a session, attaches a link each way and grants credit; once the
# engine has answered (and granted credit in turn), it sends a delivery.
# With ``answer`` the engine began all this (``run_case(initiate=True)``): the peer answers.
def setup_frames(rng: random.Random, answer: bool = False) -> tuple[list[bytes], list[bytes]]:
    mfs = rng.choice([512, 4096, 65536])
    return [
        perf_frame(
            0,
            Open(
                container_id="fuzzer",
                max_frame_size=mfs,
                channel_max=7,
                idle_time_out=rng.choice([None, 10_000]),
            ),
        ),
        perf_frame(
            0,
            Begin(
                remote_channel=0 if answer else None,
                next_outgoing_id=0,
                incoming_window=rng.choice([1, 3, 100]),
                outgoing_window=100,
            ),
        ),
        perf_frame(
            0,
            Attach(
                name="to-fuzz",
                handle=0,
                role=bool(Role.SENDER),
                snd_settle_mode=rng.choice([0, 1, 2]),
                rcv_settle_mode=rng.choice([0, 1]),
                source=Source(address="q"),
                target=Target(address="q"),
                initial_delivery_count=0,
            ),
        ),
        perf_frame(
            0,
            Attach(
                name="from-fuzz",
                handle=1,
                role=bool(Role.RECEIVER),
                rcv_settle_mode=rng.choice([0, 1]),
                source=Source(address="q"),
                target=Target(address="q"),
            ),
        ),
        perf_frame(
            0,
            Flow(
                next_incoming_id=0,
                incoming_window=100,
                next_outgoing_id=0,
                outgoing_window=100,
                handle=1,
                delivery_count=0,
                link_credit=rng.choice([1, 5, 100]),
            ),
        ),
    ], [
        perf_frame(
            0,
            Transfer(
                handle=0,
                delivery_id=0,
                delivery_tag=b"t0",
                message_format=0,
                settled=False,
                more=False,
            ),
            b"hello",
        ),
    ]


def mutate(rng: random.Random, frames: list[bytes], start: int) -> list[bytes]:
    """Apply 0-4 random mutations to ``frames[start:]`` (the prefix before stays valid)."""
    out = [bytearray(f) for f in frames]

    def pick() -> int:
        return rng.randrange(start, len(out)) if len(out) > start else -1

    for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 3])):
        i = pick()
        if i < 0:
            break
        f = out[i]
        op = rng.randrange(12)
        if op == 0 and f:  # flip bytes
            for _ in range(rng.randint(1, 3)):
                j = rng.randrange(len(f))
                f[j] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(256)
        elif op == 1 and f:  # truncate
            del f[rng.randrange(len(f)) :]
        elif op == 2 and len(f) >= 4:  # the size field
            size = struct.unpack_from(">I", f)[0]
            new = rng.choice(
                [
                    0,
                    1,
                    7,
                    8,
                    9,
                    size - 1,
                    size + 1,
                    size + 100,
                    2**31,
                    2**32 - 1,
                    rng.getrandbits(32),
                ]
            )
            struct.pack_into(">I", f, 0, new & 0xFFFFFFFF)
        elif op == 3 and len(f) >= 5:  # doff
            f[4] = rng.choice([0, 1, 3, 4, 255, rng.randrange(256)])
        elif op == 4 and len(f) >= 6:  # frame type
            f[5] = rng.choice([1, 2, 255])
        elif op == 5 and len(f) >= 8:  # channel
            struct.pack_into(">H", f, 6, rng.choice([1, 2, 7, 8, 255, 65535]))
        elif op == 6:  # duplicate
            out.insert(i, bytearray(f))
        elif op == 7 and len(out) - start >= 2:  # reorder
            j = pick()
            out[i], out[j] = out[j], out[i]
        elif op == 8:  # drop
            del out[i]
        elif op == 9:  # garbage in between
            out.insert(i, bytearray(rng.randbytes(rng.randint(1, 20))))
        elif op == 10 and len(f) >= 8:  # a (valid) extended header
            ext = rng.randbytes(4 * rng.randint(1, 3))
            body = bytes(f[4 * max(f[4], 2) :]) if f[4] >= 2 else bytes(f[8:])
            out[i] = bytearray(
                frame_bytes(
                    struct.unpack_from(">H", f, 6)[0], body, doff=2 + len(ext) // 4, ext=ext
                )
            )
        else:  # an empty frame (heartbeat) or a protocol header in the middle
            out.insert(
                i, bytearray(rng.choice([FRAME_HEADER.pack(8, 2, 0, 0), AMQP_HEADER, SASL_HEADER]))
            )
    return [bytes(f) for f in out]


MODES = ("fresh", "opened", "mid-session", "client-mid-session")


def gen_case(rng: random.Random, mode: str) -> list[bytes]:
    """One peer byte stream for ``mode``: a valid start, random frames, mutations.

    Returned in parts: each but the last is fed whole (the engine and its application
    answer before the next), the last in random chunks.
    """
    ctx = Context()
    if mode == "fresh":
        frames = [AMQP_HEADER]
        if rng.random() < 0.5:
            frames.append(perf_frame(0, r_performative(rng, Open, ctx)))
        start = 1
        mid = False
    elif mode == "opened":
        frames = [AMQP_HEADER, perf_frame(0, Open(container_id="fuzzer", max_frame_size=4096))]
        start = 2
        mid = False
    else:
        first, second = setup_frames(rng, answer=mode == "client-mid-session")
        frames = [AMQP_HEADER, *first]
        # the set-up is fed first, then (once the engine answered) the rest
        frames = [b"".join(frames), *second]
        start = 1
        ctx.delivery_id = ctx.transfer_id = 1
        mid = True
    if mode == "fresh" and rng.random() < 0.3:
        frames += [f for part in setup_frames(rng) for f in part]  # pipelined, unanswered
    frames += [r_frame(rng, ctx, mid) for _ in range(rng.randint(1, 12))]
    if rng.random() < 0.3 and not mode.endswith("mid-session"):
        start = 0 if mode == "fresh" else 1  # mutate the set-up too, sometimes
    out = mutate(rng, frames, start)
    if mode.endswith("mid-session"):
        return [out[0], b"".join(out[1:])]
    return [b"".join(out)]


def r_chunks(rng: random.Random, n: int) -> list[int]:
    """How the stream is cut into receive_data calls: whole, byte by byte, or random."""
    how = rng.random()
    if how < 0.4:
        return [n]
    if how < 0.5:
        return [1] * n
    sizes = []
    while n > 0:
        k = min(n, rng.choice([1, 2, 3, 7, 8, 9, 50, 500, 5000]))
        sizes.append(k)
        n -= k
    return sizes


# --------------------------------------------------------------------------------------
# the engine under test, an application that plays along, and the invariant
# --------------------------------------------------------------------------------------
@dataclass
class Report:
    events: list[Event] = field(default_factory=list)
    out: bytearray = field(default_factory=bytearray)
    failed: Error | None = None  # the ConnectionFailed the input caused (not the end of stream)


class App:
    """What a correct application does with the engine's events: accept, credit, send, settle."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.sent = 0

    def react(self, events: list[Event]) -> None:
        for ev in events:
            try:
                self._react(ev)
            except IllegalStateError:
                pass  # the peer's frames put the endpoint somewhere a verb does not fit

    def _react(self, ev: Event) -> None:
        conn = self.conn
        if isinstance(ev, ConnectionOpened) and conn.state is ConnectionState.OPEN_RCVD:
            conn.open()
        elif isinstance(ev, SessionBegun) and ev.session.state is SessionState.BEGIN_RCVD:
            ev.session.begin()
        elif isinstance(ev, LinkAttached) and ev.link.state is LinkState.ATTACH_RCVD:
            link = ev.link
            link.attach(source=link.remote_source, target=link.remote_target)
            if isinstance(link, Receiver):
                link.flow(10)
        elif isinstance(ev, CreditAdded) and self.sent < 6:
            self.sent += 1
            ev.link.send(bytes(range(256)) * (1 + self.sent * 3))
        elif isinstance(ev, DeliveryReceived) and not ev.delivery.settled:
            ev.delivery.accept()
        elif isinstance(ev, DeliveryUpdated) and isinstance(ev.link, Sender):
            if ev.settled and not ev.delivery.settled:
                ev.delivery.settle()
        elif isinstance(ev, DrainRequested):
            ev.link.drained()


def check_output(data: bytes, report: Report) -> None:
    """Everything the engine wrote is whole, decodable frames; close is the last."""
    pos = 0
    if data.startswith(b"AMQP"):
        if data[:8] != AMQP_HEADER:
            raise Failure(f"the engine wrote a header other than AMQP 1.0: {data[:8]!r}")
        pos = 8
    closed = False
    while pos < len(data):
        if len(data) - pos < 8:
            raise Failure("the engine wrote part of a frame header")
        size, doff, ftype, channel = FRAME_HEADER.unpack_from(data, pos)
        if doff != 2 or ftype != 0 or size < 8 or pos + size > len(data):
            raise Failure(
                f"the engine wrote a bad frame header (size {size}, doff {doff}, type {ftype})"
            )
        if closed:
            raise Failure("the engine wrote a frame after its close")
        if size > 8:
            try:
                perf, end = codec.decode_at(data, pos + 8)
            except Exception as exc:
                raise Failure(f"the engine wrote a frame that does not decode: {exc!r}") from exc
            if end > pos + size:
                raise Failure("the engine wrote a performative longer than its frame")
            err = getattr(perf, "error", None) if isinstance(perf, (Close, End, Detach)) else None
            if err is not None and str(err.condition) not in CONDITIONS:
                raise Failure(
                    f"{type(perf).__name__} with a condition not from the spec: {err.condition!r}"
                )
            if isinstance(perf, Close):
                closed = True
                if report.failed is not None:
                    if err is None or err.condition != report.failed.condition:
                        raise Failure(
                            f"ConnectionFailed({report.failed}) but the close says {err!r}"
                        )
        pos += size


def check_events(events: list[Event], report: Report) -> None:
    for ev in events:
        if not isinstance(ev, Event):
            raise Failure(f"not an event: {ev!r}")
        if isinstance(ev, (ConnectionFailed, SessionFailed, LinkFailed)):
            if str(ev.error.condition) not in CONDITIONS:
                raise Failure(f"{ev!r}: a condition not from the spec")
            if ev.error.condition == ErrorCondition.INTERNAL_ERROR:
                raise Failure(f"a bug caught by the engine's catch-all: {ev!r}")
        if isinstance(ev, ConnectionFailed):
            report.failed = ev.error


def run_case(
    parts: bytes | list[bytes],
    chunks: list[int] | None = None,
    *,
    initiate: bool = False,
    max_frame_size: int = 4096,
) -> Report:
    """Feed ``parts`` to a fresh engine; raise Failure if it misbehaves.

    Each part but the last goes in one ``receive_data`` call; the last is cut as
    ``chunks`` says (whole if None). The application reacts after every call.
    With ``initiate``, the engine first opens, begins a session and attaches a
    sender ("from-fuzz") and a receiver ("to-fuzz", with credit) itself.
    """
    if isinstance(parts, bytes):
        parts = [parts]
    conn = Connection("fuzz-target", max_frame_size=max_frame_size, channel_max=15)
    app = App(conn)
    report = Report()
    if initiate:
        conn.open()
        session = conn.session()
        session.begin()
        session.sender("from-fuzz", source=Source(address="q"), target=Target(address="q")).attach()
        receiver = session.receiver(
            "to-fuzz", source=Source(address="q"), target=Target(address="q")
        )
        receiver.attach()
        receiver.flow(10)
    report.out += conn.data_to_send()  # our protocol header, written at once
    data = parts[-1]
    pieces = list(parts[:-1])
    pos = 0
    for n in chunks if chunks is not None else [len(data)]:
        pieces.append(data[pos : pos + n])
        pos += n
    for piece in pieces:
        if not piece:
            continue  # an empty receive_data() means the end of the stream
        try:
            events = conn.receive_data(piece)
            events += conn.poll_events()
        except Exception as exc:
            raise Failure(f"receive_data raised {type(exc).__name__}: {exc}") from exc
        check_events(events, report)
        report.events += events
        try:
            app.react(events)
            report.out += conn.data_to_send()
            conn.tick(1.0)  # timers must not trip over whatever state the input left
        except Exception as exc:
            raise Failure(
                f"the engine raised {type(exc).__name__} to the application: {exc}"
            ) from exc
        check_events(conn.poll_events(), report)
        if report.failed is not None and conn.state not in CLOSING:
            raise Failure(f"wedged: ConnectionFailed but the connection is {conn.state.name}")
    check_output(bytes(report.out), report)
    try:
        events = conn.receive_data(b"")  # the peer goes away
        events += conn.poll_events()
        tail = conn.data_to_send()
    except Exception as exc:
        raise Failure(f"end of stream raised {type(exc).__name__}: {exc}") from exc
    if tail:
        raise Failure(f"the engine wrote {tail!r} after the end of the stream")
    check_events(events, Report())
    if not conn.is_closed:
        raise Failure(f"wedged: the stream ended but the connection is {conn.state.name}")
    return report


def run_generated(rng: random.Random, mode: str) -> tuple[list[bytes], list[int]]:
    """Generate one case and run it; returns it or raises Failure."""
    parts = gen_case(rng, mode)
    chunks = r_chunks(rng, len(parts[-1]))
    run_case(parts, chunks, initiate=mode.startswith("client"))
    return parts, chunks


# --------------------------------------------------------------------------------------
# the brief run for the test suite (bench/fuzz_engine.py runs the same for longer)
# --------------------------------------------------------------------------------------
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mid_session_prefix() -> list[bytes]:
    first, second = setup_frames(random.Random(0))
    return [AMQP_HEADER + b"".join(first), b"".join(second)]


def test_mid_session_prefix_is_clean() -> None:
    """The set-ups the mid-session cases start from are valid: no failure, deliveries flow."""
    for answer in (False, True):
        first, second = setup_frames(random.Random(0), answer=answer)
        r = run_case([AMQP_HEADER + b"".join(first), b"".join(second), b""], initiate=answer)
        assert r.failed is None
        assert not [e for e in r.events if isinstance(e, (SessionFailed, LinkFailed))], r.events
        assert any(isinstance(e, DeliveryReceived) for e in r.events)
        assert any(isinstance(e, CreditAdded) for e in r.events)


@given(data=st.binary(max_size=400), chunk=st.sampled_from([None, 1, 3]))
@FUZZ
def test_binary_after_header(data: bytes, chunk: int | None) -> None:
    stream = AMQP_HEADER + data
    run_case(stream, None if chunk is None else [chunk] * len(stream))


@given(data=st.binary(max_size=400), chunk=st.sampled_from([None, 1, 7]))
@FUZZ
def test_binary_mid_session(data: bytes, chunk: int | None) -> None:
    run_case([*mid_session_prefix(), data], None if chunk is None else [chunk] * len(data))


@given(seed=st.integers(0, 2**64 - 1), mode=st.sampled_from(MODES))
@settings(FUZZ, max_examples=2000)
def test_mutated_frames(seed: int, mode: str) -> None:
    run_generated(random.Random(seed), mode)


CASES: list[Callable[[], list[bytes]]] = [
    # regressions: a hostile peer's classics
    lambda: [AMQP_HEADER + frame_bytes(0, b"", doff=2) * 3],  # heartbeats only
    lambda: [AMQP_HEADER + frame_bytes(0, b"\x00\x53\x10\x45")],  # open with no fields
    lambda: [AMQP_HEADER + FRAME_HEADER.pack(0xFFFFFFFF, 2, 0, 0)],  # absurd size
    lambda: [AMQP_HEADER + FRAME_HEADER.pack(8, 1, 0, 0)],  # doff below 2
    lambda: [SASL_HEADER],  # SASL where AMQP is expected
    lambda: [
        *mid_session_prefix(),
        perf_frame(0, Close(error=Error(condition="amqp:internal-error"))),
    ],
    lambda: [*mid_session_prefix(), perf_frame(0, End()) + perf_frame(0, End())],
    lambda: [
        *mid_session_prefix(),
        perf_frame(0, Transfer(handle=0, delivery_id=1, delivery_tag=b"x" * 40)),
    ],
]


def test_regressions() -> None:
    for make in CASES:
        parts = make()
        for chunks in (None, [1] * len(parts[-1])):
            run_case(parts, chunks)
