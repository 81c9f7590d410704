"""The identity SASL EXTERNAL authenticates: the subject of a verified TLS client certificate.

`tls_identity` turns what `ssl.SSLSocket.getpeercert()` / `ssl.SSLObject.getpeercert()`
return into an RFC 4514 string, most specific name first ("CN=bob,O=example"). That is
the form Proton reports (OpenSSL's RFC 2253 printing), so users and access rules keyed
by subject read the same for both implementations. (OpenSSL escapes non-ASCII as hex,
``\\C3\\A9``; here it stays UTF-8, which RFC 4514 also allows.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["tls_identity"]

# Python's ssl module reports OpenSSL's long attribute names; RFC 4514 uses these.
_SHORT_NAMES: Final = {
    "commonName": "CN",
    "countryName": "C",
    "domainComponent": "DC",
    "localityName": "L",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "userId": "UID",
}
_SPECIAL: Final = frozenset('"+,;<>\\')


def _escape(value: str) -> str:
    """Escape an attribute value as RFC 4514 §2.4 asks."""
    out = []
    last = len(value) - 1
    for i, ch in enumerate(value):
        if ch in _SPECIAL or (i == 0 and ch in "# ") or (i == last and ch == " "):
            out.append("\\" + ch)
        elif ch == "\x00":
            out.append("\\00")
        else:
            out.append(ch)
    return "".join(out)


def tls_identity(peercert: Mapping[str, Any] | None) -> str | None:
    """The RFC 4514 subject of a peer certificate dict, or None without a usable subject.

    Pass the dict of a certificate the TLS layer verified (``getpeercert()`` returns an
    empty dict for one it did not verify, which gives None here).
    """
    if not peercert:
        return None
    subject = peercert.get("subject")
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):  # RFC 4514 §2.1: the last RDN of the sequence comes first
        rdns.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(str(v))}" for k, v in rdn))
    return ",".join(rdns) or None
