"""Write the seed corpus: a few dozen valid (and classic hostile) inputs per target.

    python -m tests.fuzz.seeds        # rewrites tests/fuzz/corpus/<target>/seed-*

The seeds are built from the real encoders and peers, so the fuzzer starts past
the first header and into every state; inputs atheris finds later may be added
next to them (kept small).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from amqp10.amqp091 import AMQP_0_9_1
from amqp10.message import Message
from amqp10.sasl.layer import SaslClient, SaslServer
from amqp10.transport.framing import AMQP_HEADER
from amqp10.types import Header, Properties

from ..amqp010.peer import Peer, struct
from ..amqp091.test_fuzz import STREAM
from ..io.test_websocket_fuzz import client_frames, close_frame
from ..transport.test_fuzz import CASES, MODES, gen_case, mid_session_prefix
from .targets import _STORE

CORPUS = Path(__file__).parent / "corpus"


def _amqp1() -> list[bytes]:
    out = []
    for i, make in enumerate(CASES):
        parts = make()
        out.append(bytes([0, i % 4]) + b"".join(parts))
    prefix = b"".join(mid_session_prefix())
    out.append(bytes([0, 0]) + prefix)
    out.append(bytes([0, 7]) + prefix)
    rng = random.Random(20)
    for i in range(24):
        parts = gen_case(rng, MODES[i % 3])
        out.append(bytes([0, i % 16]) + b"".join(parts))
    return out


def _sasl_exchange(mechanism: str, password: str, **server: object) -> bytes:
    client = SaslClient(
        username="guest",
        password=password,
        mechanisms=[mechanism],
        tls_client_certificate=mechanism == "EXTERNAL",
    )
    srv = SaslServer(
        ("SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "ANONYMOUS", "EXTERNAL"),
        _STORE,
        tls_identity="CN=fuzz",
        **server,  # type: ignore[arg-type]
    )
    sent = b""
    for _ in range(8):
        data = client.data_to_send()
        sent += data
        if data:
            srv.receive_data(data)
        back = srv.data_to_send()
        if back:
            client.receive_data(back)
        if client.done:
            break
    return sent + AMQP_HEADER


def _sasl() -> list[bytes]:
    out = []
    for flags in (0, 2):
        for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-1", "ANONYMOUS"):
            for password in ("guest", "wrong"):
                out.append(bytes([flags, 0]) + _sasl_exchange(mech, password))
    out.append(bytes([2, 3]) + _sasl_exchange("EXTERNAL", ""))
    out.append(bytes([1, 0]) + AMQP_HEADER + b"".join(mid_session_prefix())[8:])
    out.append(bytes([0, 0]) + AMQP_HEADER)
    out.append(bytes([0, 0]) + b"AMQP\x02\x01\x00\x00")
    out.append(bytes([4, 1]) + _sasl_exchange("PLAIN", "guest")[8:])
    return out


def _messages() -> list[bytes]:
    props = Properties(message_id="m1", subject="s", content_type="text/plain", reply_to="r")
    samples = [
        Message(b"x"),
        Message("hello", header=Header(durable=True, priority=5)),
        Message([b"a", b"bc"], body_type="data", properties=props),
        Message([[1, 2], ["x"]], body_type="sequence"),
        Message({"k": [1, 2.5, None, True]}, message_annotations={"x-opt": 1}),
        Message(
            None,
            delivery_annotations={"d": 1},
            application_properties={"a": 1, "b": "c"},
            footer={"f": b"\x00"},
        ),
        Message(list(range(50)), header=Header(ttl=1000), properties=props),
    ]
    out = [m.encode() for m in samples]
    out.append(b"")
    out.append(b"\x00\x53\x77\x40")
    out.append(b"\x00\x53\x75\xb0\x00\x00\x00\x03abc")
    return out


def _amqp091() -> list[bytes]:
    out = [bytes([0, 0]) + STREAM[8:]]
    for cut in (1, 3, 7, 11):
        out.append(bytes([cut, 1]) + STREAM[8:])
    for end in range(40, len(STREAM), max(len(STREAM) // 20, 1)):
        out.append(bytes([0, 1]) + STREAM[8:end])
    out.append(bytes([0, 0]) + AMQP_0_9_1.header)
    out.append(bytes([0, 0]) + b"AMQP\x00\x00\x09\x01")
    return out


def _amqp010() -> list[bytes]:
    """A client's side of a 0-10 conversation: handshake, session, commands, a transfer."""
    p = Peer(4096)
    p.send("connection.start-ok", mechanism="ANONYMOUS", response=b"", locale="en_US")
    p.send("connection.tune-ok", channel_max=8, max_frame_size=4096, heartbeat=0)
    p.send("connection.open", virtual_host="/")
    p.send("session.attach", 1, name=b"fuzz")
    p.send("session.command-point", 1, command_id=0, command_offset=0)
    p.command("queue.declare", 1, queue="q", arguments={"a": [1, "x", None], "b": {"c": 2.5}})
    p.command(
        "message.transfer",
        1,
        destination="",
        accept_mode=0,
        acquire_mode=0,
        headers=[
            struct("delivery-properties", routing_key="q"),
            struct("message-properties", content_type="t"),
        ],
        body=b"x" * 5000,
    )
    p.command("queue.delete", 1, queue="q")
    p.send("session.flush", 1, completed=True, expected=True)
    p.send("session.known-completed", 1, commands=((0, 1),))
    p.send("session.detach", 1, name=b"fuzz")
    # a session kept (a timeout granted), detached and resumed: deliveries and commands replayed
    p.send("session.attach", 2, name=b"kept")
    p.send("session.request-timeout", 2, timeout=10)
    p.send("session.command-point", 2, command_id=0, command_offset=0)
    p.command("message.subscribe", 2, queue="q", destination="d")
    p.command("queue.declare", 2, queue="r")
    p.send("session.completed", 2, commands=((0, 0),), timely_reply=True)
    p.send("session.detach", 2, name=b"kept")
    p.send("session.attach", 3, name=b"kept")
    p.send("session.command-point", 3, command_id=0, command_offset=0)
    p.command("message.subscribe", 3, queue="q", destination="d")
    p.command("queue.declare", 3, queue="r")
    p.command("queue.declare", 3, queue="s")
    p.send("connection.close", reply_code=200)
    stream = bytes(p.out)
    out = [bytes([0, 1]) + stream]
    for cut in (1, 3, 7, 12):
        out.append(bytes([cut, 1]) + stream)
    for end in range(12, len(stream), max(len(stream) // 16, 1)):
        out.append(bytes([0, 1]) + stream[:end])
    out.append(bytes([0, 0]) + b"AMQP\x01\x01\x00\x0a")
    out.append(bytes([0, 0]) + b"AMQP\x00\x00\x09\x01")
    return out


def _websocket() -> list[bytes]:
    out = [
        bytes([0]) + client_frames([b"AMQP\x03\x01\x00\x00"]),
        bytes([1]) + client_frames([b"x" * 200, b"y" * 300]),
        bytes([0]) + client_frames(["text"]),
        bytes([5]) + client_frames([b"a" * 600]),
        bytes([0]) + client_frames([b""]) + close_frame(1000),
    ]
    for code in (1000, 1001, 1003, 1011, 3000, 4999):
        out.append(bytes([3]) + client_frames([b"hello"]) + close_frame(code))
    for size in (0, 125, 126, 300):
        out.append(bytes([size % 32]) + client_frames([bytes(size)]))
    return out


SEEDS = {
    "amqp1_engine": _amqp1,
    "sasl_server": _sasl,
    "message": _messages,
    "amqp091_engine": _amqp091,
    "amqp010_engine": _amqp010,
    "websocket": _websocket,
}


def main() -> None:
    for name, make in SEEDS.items():
        folder = CORPUS / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("seed-*"):
            old.unlink()
        for data in make():
            digest = hashlib.sha1(data).hexdigest()[:16]
            (folder / f"seed-{digest}").write_bytes(data)


if __name__ == "__main__":
    main()
