"""The credentials in ``start-ok`` responses: PLAIN (RFC 4616), AMQPLAIN, EXTERNAL.

The engine parses them for ``LoginRequested``; checking them against users is
the application's business (the broker's users file).
"""

from __future__ import annotations

import struct

from .fields import DecodeError, decode_table, encode_table

__all__ = ["MECHANISMS", "amqplain_response", "parse_credentials", "plain_response"]

MECHANISMS = ("PLAIN", "AMQPLAIN", "EXTERNAL")
"""The mechanisms the engine understands (EXTERNAL: the TLS client certificate)."""


def plain_response(username: str, password: str, authzid: str = "") -> bytes:
    """A PLAIN response: ``authzid NUL username NUL password``."""
    return f"{authzid}\0{username}\0{password}".encode()


def amqplain_response(username: str, password: str) -> bytes:
    """An AMQPLAIN response: a field table with LOGIN and PASSWORD, without its size."""
    buf = bytearray()
    encode_table(buf, {"LOGIN": username, "PASSWORD": password})
    return bytes(buf[4:])


def parse_credentials(mechanism: str, response: bytes) -> tuple[str | None, str | None]:
    """``(username, password)`` from a response; ``(None, None)`` when there are none or
    the response is malformed (the application then refuses the login)."""
    try:
        if mechanism == "PLAIN":
            parts = response.split(b"\0")
            if len(parts) != 3:
                return None, None
            return parts[1].decode(), parts[2].decode()
        if mechanism == "AMQPLAIN":
            table, _ = decode_table(struct.pack(">I", len(response)) + response, 0)
            login, password = table.get("LOGIN"), table.get("PASSWORD")
            if isinstance(login, str) and isinstance(password, str):
                return login, password
    except (UnicodeDecodeError, DecodeError, IndexError, struct.error):
        pass
    return None, None
