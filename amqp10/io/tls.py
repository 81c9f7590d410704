"""TLS contexts for amqps:// (stdlib ``ssl``): clients verify the server by default.

These helpers only build ``ssl.SSLContext`` objects; any context the
application builds itself works the same way.
"""

from __future__ import annotations

import os
import ssl

__all__ = ["client_context", "server_context"]

StrPath = str | os.PathLike[str]


def client_context(
    *,
    cafile: StrPath | None = None,
    cadata: str | bytes | None = None,
    certfile: StrPath | None = None,
    keyfile: StrPath | None = None,
    password: str | None = None,
    verify: bool = True,
    check_hostname: bool | None = None,
) -> ssl.SSLContext:
    """A client context: trusts ``cafile``/``cadata`` (else the system store).

    ``certfile``/``keyfile`` present a client certificate. ``verify=False``
    turns off both certificate and host-name checks (tests only);
    ``check_hostname`` defaults to ``verify``.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, cadata=cadata)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif check_hostname is not None:
        ctx.check_hostname = check_hostname
    if certfile is not None:
        ctx.load_cert_chain(certfile, keyfile, password)
    return ctx


def server_context(
    certfile: StrPath,
    keyfile: StrPath | None = None,
    *,
    password: str | None = None,
    cafile: StrPath | None = None,
    cadata: str | bytes | None = None,
    require_client_cert: bool = False,
) -> ssl.SSLContext:
    """A server context with our certificate chain.

    With ``cafile``/``cadata``, client certificates signed by those CAs are
    verified when presented; ``require_client_cert`` makes one mandatory.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certfile, keyfile, password)
    if cafile is not None or cadata is not None:
        ctx.load_verify_locations(cafile=cafile, cadata=cadata)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    elif require_client_cert:
        raise ValueError("require_client_cert needs cafile or cadata to verify client certificates")
    return ctx
