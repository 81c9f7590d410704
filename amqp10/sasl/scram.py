"""SCRAM building blocks (RFC 5802, RFC 7677): SASLprep, key derivation, message grammar.

Pure functions and small value types only; the client and server state machines that use
them live in `mechanisms.py`. Nothing here performs I/O or keeps per-exchange state.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import stringprep
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "SCRAM_HASHES",
    "ClientFinal",
    "ClientFirst",
    "SaslPrepError",
    "ScramHash",
    "ScramMessageError",
    "ServerFinal",
    "ServerFirst",
    "b64decode",
    "b64encode",
    "client_final_without_proof",
    "client_first",
    "escape_saslname",
    "make_nonce",
    "parse_client_final",
    "parse_client_first",
    "parse_server_final",
    "parse_server_first",
    "saslprep",
    "scram_hash",
    "server_first",
    "unescape_saslname",
    "xor_bytes",
]


class SaslPrepError(ValueError):
    """A string that SASLprep (RFC 4013) refuses: a prohibited character or bad bidi text."""


class ScramMessageError(ValueError):
    """A SCRAM message that does not follow the RFC 5802 grammar."""


# --------------------------------------------------------------------------- SASLprep


def _prohibited(ch: str) -> bool:
    # RFC 4013 §2.3: the StringPrep tables C.1.2 and C.2.1 through C.9.
    return (
        stringprep.in_table_c12(ch)
        or stringprep.in_table_c21_c22(ch)
        or stringprep.in_table_c3(ch)
        or stringprep.in_table_c4(ch)
        or stringprep.in_table_c5(ch)
        or stringprep.in_table_c6(ch)
        or stringprep.in_table_c7(ch)
        or stringprep.in_table_c8(ch)
        or stringprep.in_table_c9(ch)
    )


def saslprep(text: str, *, allow_unassigned: bool = True) -> str:
    """Prepare a user name or password with SASLprep (RFC 4013).

    This is the full profile, built on the standard library's `stringprep` tables (which
    are Unicode 3.2, as StringPrep requires) rather than a bare NFKC approximation:
    non-ASCII spaces map to U+0020, "commonly mapped to nothing" characters are dropped,
    the result is NFKC-normalised, prohibited characters and malformed bidirectional text
    are refused. `allow_unassigned` is True for queries (what a peer sends us) and must be
    False for stored strings (RFC 3454 §7). Raises `SaslPrepError`.
    """
    mapped = "".join(
        " " if stringprep.in_table_c12(ch) else ch for ch in text if not stringprep.in_table_b1(ch)
    )
    prepared = unicodedata.ucd_3_2_0.normalize("NFKC", mapped)
    for ch in prepared:
        if _prohibited(ch):
            raise SaslPrepError(f"SASLprep: prohibited character U+{ord(ch):04X}")
        if not allow_unassigned and stringprep.in_table_a1(ch):
            raise SaslPrepError(f"SASLprep: unassigned code point U+{ord(ch):04X}")
    if any(stringprep.in_table_d1(ch) for ch in prepared):
        # RFC 3454 §6: right-to-left text must not mix in left-to-right characters and
        # must start and end with a right-to-left character.
        if any(stringprep.in_table_d2(ch) for ch in prepared):
            raise SaslPrepError("SASLprep: mixes right-to-left and left-to-right text")
        if not (stringprep.in_table_d1(prepared[0]) and stringprep.in_table_d1(prepared[-1])):
            raise SaslPrepError(
                "SASLprep: right-to-left text must start and end with an RTL character"
            )
    return prepared


# --------------------------------------------------------------------------- hashes and keys


@dataclass(frozen=True, slots=True)
class ScramHash:
    """One SCRAM hash function: its SASL name ("SHA-256"), hashlib name and digest size."""

    name: str
    hashlib_name: str
    digest_size: int

    @property
    def mechanism(self) -> str:
        """The SASL mechanism name, e.g. "SCRAM-SHA-256"."""
        return f"SCRAM-{self.name}"

    def digest(self, data: bytes) -> bytes:
        """H(data)."""
        return hashlib.new(self.hashlib_name, data).digest()

    def hmac(self, key: bytes, message: bytes) -> bytes:
        """HMAC(key, message)."""
        return hmac.digest(key, message, self.hashlib_name)

    def salted_password(self, prepared_password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(password, salt, i) = PBKDF2-HMAC; the password must already be SASLprepped."""
        return hashlib.pbkdf2_hmac(
            self.hashlib_name, prepared_password.encode("utf-8"), salt, iterations
        )

    def client_key(self, salted_password: bytes) -> bytes:
        """ClientKey = HMAC(SaltedPassword, "Client Key")."""
        return self.hmac(salted_password, b"Client Key")

    def server_key(self, salted_password: bytes) -> bytes:
        """ServerKey = HMAC(SaltedPassword, "Server Key")."""
        return self.hmac(salted_password, b"Server Key")


SCRAM_HASHES: Mapping[str, ScramHash] = MappingProxyType(
    {
        "SHA-1": ScramHash("SHA-1", "sha1", 20),
        "SHA-256": ScramHash("SHA-256", "sha256", 32),
        "SHA-512": ScramHash("SHA-512", "sha512", 64),
    }
)
"""The supported SCRAM hashes by SASL hash name, strongest last."""


def scram_hash(name: str) -> ScramHash:
    """Look up a hash by "SHA-256" or by mechanism name "SCRAM-SHA-256"; ValueError if unknown."""
    key = name.removeprefix("SCRAM-")
    try:
        return SCRAM_HASHES[key]
    except KeyError:
        known = ", ".join(SCRAM_HASHES)
        raise ValueError(f"unsupported SCRAM hash {name!r} (supported: {known})") from None


def xor_bytes(a: bytes, b: bytes) -> bytes:
    """Byte-wise XOR of two equal-length strings."""
    if len(a) != len(b):
        raise ValueError("xor_bytes: lengths differ")
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, as SCRAM uses it."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, what: str) -> bytes:
    """Strict base64 decode; `what` names the field in the error message."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ScramMessageError(f"SCRAM: {what} is not valid base64") from None


def make_nonce(random_bytes: bytes) -> str:
    """A printable nonce (no ',') from random bytes."""
    return b64encode(random_bytes)


# --------------------------------------------------------------------------- grammar helpers


def escape_saslname(name: str) -> str:
    """Escape '=' and ',' as '=3D' and '=2C' (RFC 5802 §5.1 saslname)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(text: str) -> str:
    """Reverse `escape_saslname`; any other use of '=' (or a bare ',') is malformed."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == ",":
            raise ScramMessageError("SCRAM: unescaped ',' in a name")
        if ch == "=":
            code = text[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramMessageError("SCRAM: bad '=' escape in a name")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _decode(data: bytes, what: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramMessageError(f"SCRAM: {what} is not valid UTF-8") from None
    if "\x00" in text:
        raise ScramMessageError(f"SCRAM: {what} contains NUL")
    return text


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """Split "a=v,b=w" into pairs; each attribute is one ASCII letter."""
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not (part[0].isascii() and part[0].isalpha()):
            raise ScramMessageError(f"SCRAM: malformed attribute in {what}")
        pairs.append((part[0], part[2:]))
    return pairs


def _expect(pairs: list[tuple[str, str]], index: int, name: str, what: str) -> str:
    if index >= len(pairs) or pairs[index][0] != name:
        raise ScramMessageError(f"SCRAM: {what} lacks the '{name}=' attribute")
    return pairs[index][1]


def _check_nonce(nonce: str, what: str) -> str:
    # printable = %x21-2B / %x2D-7E; ',' cannot occur after splitting on it.
    if not nonce or not all("\x21" <= ch <= "\x7e" for ch in nonce):
        raise ScramMessageError(f"SCRAM: {what} has an empty or non-printable nonce")
    return nonce


def _check_name(text: str, what: str) -> str:
    name = unescape_saslname(text)
    if not name:
        raise ScramMessageError(f"SCRAM: {what} has an empty name")
    return name


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientFirst:
    """A client-first-message, split into its GS2 header and bare part."""

    gs2_header: str
    """The GS2 header exactly as sent, e.g. "n,,"; it comes back base64'd in c=."""
    cbind_flag: str
    """"n", "y" or "p=<cb-name>"."""
    authzid: str
    """The unescaped authorization identity, "" when absent."""
    username: str
    """The unescaped user name (not yet SASLprepped)."""
    nonce: str
    """The client nonce."""
    bare: str
    """client-first-message-bare, the part that enters AuthMessage."""

    def to_bytes(self) -> bytes:
        """The message as sent on the wire."""
        return (self.gs2_header + self.bare).encode("utf-8")


def client_first(username: str, nonce: str, authzid: str = "") -> ClientFirst:
    """Build a client-first-message without channel binding ("n" flag)."""
    _check_nonce(nonce, "client nonce")
    authz = f"a={escape_saslname(authzid)}" if authzid else ""
    gs2_header = f"n,{authz},"
    bare = f"n={escape_saslname(username)},r={nonce}"
    return ClientFirst(
        gs2_header=gs2_header,
        cbind_flag="n",
        authzid=authzid,
        username=username,
        nonce=nonce,
        bare=bare,
    )


def parse_client_first(data: bytes) -> ClientFirst:
    """Parse a client-first-message; refuses the reserved m= extension."""
    text = _decode(data, "client-first-message")
    parts = text.split(",", 2)
    if len(parts) != 3:
        raise ScramMessageError("SCRAM: client-first-message lacks a GS2 header")
    flag, authz_part, bare = parts
    if flag.startswith("p="):
        cb_name = flag[2:]
        if not cb_name or not all(ch.isascii() and (ch.isalnum() or ch in ".-") for ch in cb_name):
            raise ScramMessageError("SCRAM: malformed channel binding name")
    elif flag not in ("n", "y"):
        raise ScramMessageError("SCRAM: bad GS2 channel binding flag")
    authzid = ""
    if authz_part:
        if not authz_part.startswith("a="):
            raise ScramMessageError("SCRAM: bad GS2 authzid")
        authzid = _check_name(authz_part[2:], "GS2 authzid")
    pairs = _attributes(bare, "client-first-message")
    if pairs[0][0] == "m":
        raise ScramMessageError("SCRAM: mandatory extension m= is not supported")
    username = _check_name(_expect(pairs, 0, "n", "client-first-message"), "client-first-message")
    nonce = _check_nonce(_expect(pairs, 1, "r", "client-first-message"), "client-first-message")
    return ClientFirst(
        gs2_header=f"{flag},{authz_part},",
        cbind_flag=flag,
        authzid=authzid,
        username=username,
        nonce=nonce,
        bare=bare,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFirst:
    """A server-first-message."""

    nonce: str
    """The combined nonce: client nonce followed by the server's part."""
    salt: bytes
    iterations: int
    message: str
    """The message text, which enters AuthMessage."""

    def to_bytes(self) -> bytes:
        """The message as sent on the wire."""
        return self.message.encode("utf-8")


def server_first(nonce: str, salt: bytes, iterations: int) -> ServerFirst:
    """Build a server-first-message."""
    message = f"r={nonce},s={b64encode(salt)},i={iterations}"
    return ServerFirst(nonce=nonce, salt=salt, iterations=iterations, message=message)


# An iteration count longer than this is nonsense and would only cost a big-int parse.
_MAX_ITERATION_DIGITS = 10


def parse_server_first(data: bytes) -> ServerFirst:
    """Parse a server-first-message; refuses the reserved m= extension."""
    text = _decode(data, "server-first-message")
    pairs = _attributes(text, "server-first-message")
    if pairs[0][0] == "m":
        raise ScramMessageError("SCRAM: mandatory extension m= is not supported")
    nonce = _check_nonce(_expect(pairs, 0, "r", "server-first-message"), "server-first-message")
    salt = b64decode(_expect(pairs, 1, "s", "server-first-message"), "salt")
    if not salt:
        raise ScramMessageError("SCRAM: empty salt")
    count = _expect(pairs, 2, "i", "server-first-message")
    if not (count.isascii() and count.isdigit()) or len(count) > _MAX_ITERATION_DIGITS:
        raise ScramMessageError("SCRAM: iteration count is not a decimal number")
    iterations = int(count)
    if iterations < 1:
        raise ScramMessageError("SCRAM: iteration count must be positive")
    return ServerFirst(nonce=nonce, salt=salt, iterations=iterations, message=text)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientFinal:
    """A client-final-message."""

    channel_binding: bytes
    """The decoded c= value: the GS2 header (plus channel binding data, unsupported here)."""
    nonce: str
    proof: bytes
    without_proof: str
    """client-final-message-without-proof, which enters AuthMessage."""


def client_final_without_proof(gs2_header: str, nonce: str) -> str:
    """c=<base64 GS2 header>,r=<nonce>."""
    return f"c={b64encode(gs2_header.encode('utf-8'))},r={nonce}"


def parse_client_final(data: bytes) -> ClientFinal:
    """Parse a client-final-message (c=, r=, optional extensions, p= last)."""
    text = _decode(data, "client-final-message")
    pairs = _attributes(text, "client-final-message")
    channel_binding = b64decode(_expect(pairs, 0, "c", "client-final-message"), "channel binding")
    nonce = _check_nonce(_expect(pairs, 1, "r", "client-final-message"), "client-final-message")
    if len(pairs) < 3 or pairs[-1][0] != "p":
        raise ScramMessageError("SCRAM: client-final-message lacks the 'p=' attribute")
    if any(name == "p" for name, _ in pairs[:-1]):
        raise ScramMessageError("SCRAM: client-final-message has more than one proof")
    proof = b64decode(pairs[-1][1], "client proof")
    without_proof = text[: text.rindex(",p=")]
    return ClientFinal(
        channel_binding=channel_binding, nonce=nonce, proof=proof, without_proof=without_proof
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFinal:
    """A server-final-message: either a verifier (v=) or an error (e=)."""

    verifier: bytes | None
    error: str | None


def parse_server_final(data: bytes) -> ServerFinal:
    """Parse a server-final-message."""
    text = _decode(data, "server-final-message")
    pairs = _attributes(text, "server-final-message")
    name, value = pairs[0]
    if name == "e":
        return ServerFinal(verifier=None, error=value or "unspecified")
    if name != "v":
        raise ScramMessageError("SCRAM: server-final-message has neither 'v=' nor 'e='")
    return ServerFinal(verifier=b64decode(value, "server signature"), error=None)
