"""The front-end interface: the first 8 bytes of a connection choose its front end,
and a header none takes is answered with the preferred version of its family."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from amqp10.amqp091.dialects import AMQP_0_8, AMQP_0_9, AMQP_0_9_1, dialect_for_header
from amqp10.broker.amqp010.frontend import Amqp010FrontEnd
from amqp10.broker.amqp091.frontend import Amqp091FrontEnd
from amqp10.broker.amqp1.frontend import Amqp1FrontEnd
from amqp10.broker.frontend import FrontEnd, choose
from amqp10.broker.frontends import FRONT_ENDS
from tests.broker.conftest import broker_with


@pytest.mark.parametrize(
    ("header", "front_end"),
    [
        (b"AMQP\x00\x00\x09\x01", Amqp091FrontEnd),
        (b"AMQP\x01\x01\x09\x01", Amqp091FrontEnd),  # early 0-9-1 clients' header
        (b"AMQP\x01\x01\x00\x09", Amqp091FrontEnd),
        (b"AMQP\x01\x01\x08\x00", Amqp091FrontEnd),
        (b"AMQP\x00\x01\x00\x00", Amqp1FrontEnd),
        (b"AMQP\x03\x01\x00\x00", Amqp1FrontEnd),
        (b"AMQP\x02\x01\x00\x00", Amqp1FrontEnd),
        (b"AMQP\x01\x01\x00\x0a", Amqp010FrontEnd),  # 0-10: before 0-9-1, which answers the rest
    ],
)
def test_a_supported_header_chooses_its_front_end(header: bytes, front_end: type) -> None:
    assert type(choose(FRONT_ENDS, header)) is front_end


@pytest.mark.parametrize(
    ("header", "dialect"),
    [
        (b"AMQP\x00\x00\x09\x01", AMQP_0_9_1),
        (b"AMQP\x01\x01\x09\x01", AMQP_0_9_1),
        (b"AMQP\x01\x01\x00\x09", AMQP_0_9),
        (b"AMQP\x01\x01\x08\x00", AMQP_0_8),
        (b"AMQP\x00\x01\x00\x00", None),
    ],
)
def test_the_0_9_1_engine_names_the_dialect_a_header_asks_for(header: bytes, dialect: object) -> None:
    assert dialect_for_header(header) is dialect


@pytest.mark.parametrize(
    ("header", "reply"),
    [
        (b"AMQP\x01\x01\x00\x0b", b"AMQP\x00\x00\x09\x01"),  # no such 0-10 revision
        (b"AMQP\x00\x00\x09\x00", b"AMQP\x00\x00\x09\x01"),  # 0-9-0
        (b"GET / HT", b"AMQP\x00\x00\x09\x01"),
        (b"AMQP\x00\x01\x00\x01", b"AMQP\x00\x01\x00\x00"),  # 1.0 family, other revision
        (b"AMQP\x03\x01\x01\x00", b"AMQP\x03\x01\x00\x00"),
        (b"AMQP\x02\x01\x00\x05", b"AMQP\x02\x01\x00\x00"),
    ],
)
def test_an_unsupported_header_gets_the_preferred_version_of_its_family(header: bytes, reply: bytes) -> None:
    assert choose(FRONT_ENDS, header) == reply


def test_front_ends_are_asked_in_order_and_a_new_one_plugs_in() -> None:
    class Toy:
        name = "TOY"

        def accepts(self, header: bytes) -> bool:
            return header == b"TOY\x00\x00\x00\x00\x01"

        def counter_offer(self, header: bytes) -> bytes | None:
            return b"TOY\x00\x00\x00\x00\x01" if header.startswith(b"TOY") else None

        def prepare(self, broker: object, config: object) -> None:
            pass

        async def serve(self, stream: object, ctx: object) -> None:
            pass

    toy: FrontEnd = Toy()
    front_ends = (toy, *FRONT_ENDS)
    assert choose(front_ends, b"TOY\x00\x00\x00\x00\x01") is toy
    assert choose(front_ends, b"TOY\x00\x00\x00\x00\x02") == b"TOY\x00\x00\x00\x00\x01"
    assert type(choose(front_ends, b"AMQP\x00\x01\x00\x00")) is Amqp1FrontEnd
    with pytest.raises(ValueError, match="no front end"):
        choose((toy,), b"AMQP\x00\x01\x00\x00")


@pytest.mark.parametrize("header", [AMQP_0_9_1.header, b"AMQP\x01\x01\x00\x0a"], ids=["0-9-1", "0-10"])
def test_a_front_end_with_no_login_to_offer_closes_at_once(
    tmp_path: Path, header: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # EXTERNAL only, and no TLS: neither 0-9-1 nor 0-10 has a mechanism to offer
    caplog.set_level(logging.INFO, logger="amqp10.broker")
    with (
        broker_with(tmp_path, sasl={"mechanisms": ["EXTERNAL"], "allow_anonymous": False}) as b,
        socket.create_connection(("127.0.0.1", b.port), timeout=10) as s,
    ):
        s.sendall(header)
        assert s.recv(64) == b""  # closed, nothing said
    protocol = "0-9-1" if header == AMQP_0_9_1.header else "0-10"
    assert any(
        r.getMessage().startswith(f"refusing {protocol} connection from 127.0.0.1:")
        and r.getMessage().endswith(": no [sasl] mechanism it can use")
        for r in caplog.records
    )
