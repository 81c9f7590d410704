"""Our SASL layer against python-qpid-proton's, in memory and over loopback sockets.

What interoperates with this Proton build (0.40, built without Cyrus SASL, so
``proton.SASL.extended()`` is False and only Proton's built-in mechanisms exist):

============  ============================  ============================
mechanism     Proton client -> our server   our client -> Proton server
============  ============================  ============================
ANONYMOUS     yes                           yes
PLAIN         yes                           **no**: see below
EXTERNAL      yes (TLS client certificate)  yes (TLS client certificate)
SCRAM-SHA-*   no: Proton has no SCRAM       no: Proton has no SCRAM
============  ============================  ============================

A Proton *server* without Cyrus can verify nothing but EXTERNAL (a TLS client
certificate) and ANONYMOUS: it offers "ANONYMOUS", or "EXTERNAL ANONYMOUS" when TLS
gave it a client identity, and ``allowed_mechs("PLAIN")`` leaves it offering
nothing. So our client can never log in to it with PLAIN (or SCRAM); what we test
instead is that a client insisting on a password mechanism fails cleanly with the
mechanism mismatch, and does not fall back to ANONYMOUS. The Proton *client* does
PLAIN (with ``conn.user``/``conn.password`` set before ``bind`` and
``allow_insecure_mechs`` outside TLS), ANONYMOUS and EXTERNAL, which our server
serves.

In memory, bytes move between our sans-IO objects and a ``proton.Transport`` (the
same idea as `interop.proton_pump`, with Proton's SASL and TLS configured before
``bind``). For EXTERNAL both sides speak TLS with throwaway certificates made by the
``openssl`` command at test time (the tests skip without it): Proton through its
``SSLDomain``, ours through ``ssl.MemoryBIO``/``SSLObject`` around the sans-IO bytes.
Over sockets (127.0.0.1 only), Proton's ``BlockingConnection`` connects to our SASL
server and engine run by a small socket loop in a thread, local to this file.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import proton
import pytest
from proton import SASL, Collector, Endpoint, SSLDomain, Transport
from proton import Connection as ProtonConnection
from proton import Event as PEvent
from proton.utils import BlockingConnection

from amqp10.sasl import (
    InMemoryCredentialStore,
    SaslClient,
    SaslCode,
    SaslCompleted,
    SaslConnection,
    SaslFailed,
    SaslServer,
    SaslSkipped,
    tls_identity,
)
from amqp10.transport import ConnectionOpened, ConnectionState

pytestmark = pytest.mark.proton

STORE = InMemoryCredentialStore(secret=b"interop", default_iterations=4096)
STORE.add_user("alice", "secret")
PASSWORD_MECHS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN")
PROTON_OK = SASL.OK
TIME_LIMIT = 10.0  # seconds any one exchange may take, in memory or on sockets


def test_this_proton_has_no_cyrus() -> None:
    """The premise of the table in the module docstring."""
    assert SASL.extended() is False


# --------------------------------------------------------------------------- Proton side


class ProtonPeer:
    """A ``proton.Connection`` bound to a ``proton.Transport``, configured before ``bind``."""

    def __init__(
        self,
        *,
        server: bool,
        sasl: bool = True,
        mechs: str | None = None,
        user: str | None = None,
        password: str | None = None,
        insecure: bool = False,
        require_auth: bool = False,
        ssl_domain: SSLDomain | None = None,
    ) -> None:
        self.conn = ProtonConnection()
        self.conn.container = "proton"
        self.conn.hostname = "localhost"
        if user is not None:  # the transport copies these at bind time
            self.conn.user = user
        if password is not None:
            self.conn.password = password
        self.transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        if ssl_domain is not None:
            tls = self.transport.ssl(ssl_domain)
            if not server:
                tls.peer_hostname = "localhost"
        if sasl:
            s = self.transport.sasl()
            if mechs is not None:
                s.allowed_mechs(mechs)
            s.allow_insecure_mechs = insecure
        if require_auth:
            self.transport.require_auth(True)
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport.bind(self.conn)
        self.events: list[str] = []

    def drain(self) -> int:
        n = 0
        while (ev := self.collector.peek()) is not None:
            assert n < 10_000, "Proton keeps raising events"
            self.events.append(ev.type.name)
            if (
                ev.type == PEvent.CONNECTION_REMOTE_OPEN
                and ev.connection.state & Endpoint.LOCAL_UNINIT
            ):
                ev.connection.open()
            self.collector.pop()
            n += 1
        return n

    @property
    def sasl(self) -> Any:
        return self.transport.sasl()

    @property
    def opened(self) -> bool:
        s = self.conn.state
        return bool(s & Endpoint.LOCAL_ACTIVE and s & Endpoint.REMOTE_ACTIVE)

    @property
    def condition(self) -> Any:
        return self.transport.condition


def accept_ours(conn: Any, events: list[Any]) -> None:
    """Open our connection when the peer's open arrives (our role here is to answer)."""
    for ev in events:
        if isinstance(ev, ConnectionOpened) and conn.state is ConnectionState.OPEN_RCVD:
            conn.open()


def pump(
    ours: Any, peer: ProtonPeer, *, chunk: int | None = None, max_rounds: int = 500
) -> list[Any]:
    """Move bytes both ways until quiet (bounded in rounds and time); return our events."""
    t = peer.transport
    events: list[Any] = []
    outbox = bytearray()
    start = time.monotonic()

    def feed(data: bytes) -> None:
        step = chunk or max(len(data), 1)
        for i in range(0, max(len(data), 1), step):
            got = ours.receive_data(data[i : i + step])
            events.extend(got)
            accept_ours(ours, got)

    eof_to_proton = eof_to_ours = False
    for _ in range(max_rounds):
        assert time.monotonic() - start < TIME_LIMIT, "pump took too long"
        moved = peer.drain()
        outbox += ours.data_to_send()
        pushed = 0
        while outbox:
            cap = t.capacity()
            if cap < 0:  # Proton closed its input: the rest is lost, as on a socket
                outbox.clear()
                break
            if cap == 0:
                break
            n = min(cap, len(outbox))  # never more than capacity(): push() would raise midway
            t.push(bytes(outbox[:n]))
            del outbox[:n]
            pushed += n
        moved += pushed
        if not (outbox or pushed) and ours.is_closed and not eof_to_proton and t.capacity() >= 0:
            # our side is done: a driver closes the socket now (once Proton has had a
            # round to read our last bytes, as a reader of a socket would)
            eof_to_proton = True
            t.close_tail()
            moved += 1
        moved += peer.drain()
        p = t.pending()
        if p > 0:
            data = bytes(t.peek(p))
            t.pop(p)
            feed(data)
            moved += p
        elif p < 0 and not eof_to_ours:
            eof_to_ours = True
            feed(b"")
            moved += 1
        if not moved:
            return events
    raise AssertionError("pump did not quiesce")


def only(events: list[Any], tp: type) -> Any:
    found = [e for e in events if isinstance(e, tp)]
    assert len(found) == 1, events
    return found[0]


# --------------------------------------------------------------------------- ANONYMOUS


@pytest.mark.parametrize("chunk", [None, 1], ids=["whole", "bytewise"])
@pytest.mark.parametrize(
    "offered", [("ANONYMOUS",), (*PASSWORD_MECHS, "ANONYMOUS")], ids=["anonymous-only", "all"]
)
def test_anonymous_proton_client_to_our_server(offered: tuple[str, ...], chunk: int | None) -> None:
    ours = SaslConnection.server(SaslServer(offered, STORE), "amqp10")
    peer = ProtonPeer(server=False)
    peer.conn.open()
    events = pump(ours, peer, chunk=chunk)
    done = only(events, SaslCompleted)
    assert done.mechanism == "ANONYMOUS" and done.identity is None
    assert peer.sasl.outcome == PROTON_OK and peer.sasl.mech == "ANONYMOUS"
    assert peer.transport.authenticated
    assert peer.opened and ours.is_open
    assert only(events, ConnectionOpened).remote.container_id == "proton"


@pytest.mark.parametrize("require_auth", [False, True])
def test_anonymous_our_client_to_proton_server(require_auth: bool) -> None:
    ours = SaslConnection.client(SaslClient(hostname="localhost"), "amqp10")
    ours.open()
    peer = ProtonPeer(server=True, require_auth=require_auth)
    events = pump(ours, peer)
    assert only(events, SaslCompleted).mechanism == "ANONYMOUS"
    assert ours.sasl.offered == ("ANONYMOUS",)
    assert peer.sasl.outcome == PROTON_OK and peer.sasl.mech == "ANONYMOUS"
    assert peer.transport.user == "anonymous"
    assert peer.opened and ours.is_open
    assert peer.conn.remote_container == "amqp10"


# --------------------------------------------------------------------------- PLAIN


@pytest.mark.parametrize("chunk", [None, 1], ids=["whole", "bytewise"])
@pytest.mark.parametrize("mechs", ["PLAIN", None], ids=["plain-only", "proton-default-choice"])
def test_plain_proton_client_to_our_server(mechs: str | None, chunk: int | None) -> None:
    ours = SaslConnection.server(SaslServer((*PASSWORD_MECHS, "ANONYMOUS"), STORE), "amqp10")
    peer = ProtonPeer(server=False, mechs=mechs, user="alice", password="secret", insecure=True)
    peer.conn.open()
    events = pump(ours, peer, chunk=chunk)
    # Proton has no SCRAM: from everything we offer, it takes PLAIN (EXTERNAL > PLAIN > ANONYMOUS)
    assert only(events, SaslCompleted) == SaslCompleted(
        outcome=SaslCode.OK, mechanism="PLAIN", identity="alice"
    )
    assert ours.sasl.identity == "alice"
    assert peer.sasl.outcome == PROTON_OK and peer.sasl.mech == "PLAIN"
    assert peer.opened and ours.is_open


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "secret")])
def test_plain_proton_client_with_bad_credentials(user: str, password: str) -> None:
    ours = SaslConnection.server(SaslServer(("PLAIN",), STORE), "amqp10")
    peer = ProtonPeer(server=False, mechs="PLAIN", user=user, password=password, insecure=True)
    peer.conn.open()
    events = pump(ours, peer)
    assert only(events, SaslFailed).outcome is SaslCode.AUTH
    assert ours.is_closed and not ours.sasl.authenticated
    assert peer.sasl.outcome == SASL.AUTH
    assert peer.condition is not None and peer.condition.name == "amqp:unauthorized-access"
    assert not peer.opened
    assert not any(isinstance(e, ConnectionOpened) for e in events)


def test_proton_client_cannot_do_scram() -> None:
    """Offered SCRAM only, Proton's client finds nothing it can do and hangs up."""
    ours = SaslConnection.server(SaslServer(("SCRAM-SHA-256",), STORE), "amqp10")
    peer = ProtonPeer(server=False, user="alice", password="secret", insecure=True)
    peer.conn.open()
    events = pump(ours, peer)
    assert peer.sasl.outcome == SASL.PERM
    failed = only(events, SaslFailed)  # we see the stream end before any sasl-init
    assert failed.outcome is SaslCode.SYS_TEMP and ours.sasl.mechanism is None


@pytest.mark.parametrize(
    ("proton_mechs", "ours_mechs", "offered"),
    [
        (None, ["PLAIN"], ("ANONYMOUS",)),
        ("PLAIN", ["PLAIN"], ()),  # no Cyrus: Proton can't serve PLAIN, so it offers nothing
        (None, None, ("ANONYMOUS",)),  # our default choice with credentials: no downgrade
    ],
    ids=["insists-on-plain", "proton-allows-only-plain", "default-choice"],
)
def test_plain_our_client_to_proton_server_is_impossible(
    proton_mechs: str | None, ours_mechs: list[str] | None, offered: tuple[str, ...]
) -> None:
    ours = SaslConnection.client(
        SaslClient(username="alice", password="secret", mechanisms=ours_mechs), "amqp10"
    )
    ours.open()
    peer = ProtonPeer(server=True, mechs=proton_mechs)
    events = pump(ours, peer)
    failed = only(events, SaslFailed)
    assert failed.outcome is SaslCode.SYS_PERM
    assert "no SASL mechanism in common" in failed.reason
    assert ours.sasl.offered == offered
    assert ours.is_closed and not peer.opened
    assert not any(isinstance(e, ConnectionOpened) for e in events)
    assert peer.sasl.outcome != PROTON_OK


# --------------------------------------------------------------------------- headers


def test_proton_client_without_sasl_against_our_required_sasl() -> None:
    ours = SaslConnection.server(SaslServer(("ANONYMOUS",)), "amqp10")
    peer = ProtonPeer(server=False, sasl=False)
    peer.conn.open()
    events = pump(ours, peer)
    failed = only(events, SaslFailed)
    assert failed.outcome is SaslCode.AUTH and "requires SASL" in failed.reason
    assert ours.is_closed and not peer.opened
    # Proton reports the SASL header it got back instead of the AMQP one
    assert peer.condition.name == "amqp:connection:framing-error"
    assert "SASL" in peer.condition.description


def test_proton_client_without_sasl_against_our_optional_sasl() -> None:
    ours = SaslConnection.server(SaslServer(("ANONYMOUS",), require=False), "amqp10")
    peer = ProtonPeer(server=False, sasl=False)
    peer.conn.open()
    events = pump(ours, peer)
    assert only(events, SaslSkipped) == SaslSkipped()
    assert peer.opened and ours.is_open and ours.sasl.identity is None


# --------------------------------------------------------------------------- EXTERNAL over TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server certificate for localhost and a client certificate for bob."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is needed to make test certificates")
    d = tmp_path_factory.mktemp("certs")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True, timeout=60)

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *key, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=amqp10-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    for name, cn, usage in (("server", "localhost", "serverAuth"), ("client", "bob", "clientAuth")):
        (d / f"{name}.ext").write_text(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
            f"keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
        )
        run("req", "-new", *key, "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
            "-subj", f"/O=amqp10-test/CN={cn}")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-set_serial", str(int.from_bytes(name.encode(), "big")), "-days", "2",
            "-out", f"{name}.pem", "-extfile", f"{name}.ext")  # fmt: skip
    return d


BOB = "CN=bob,O=amqp10-test"
SERVER_SUBJECT = "CN=localhost,O=amqp10-test"


class TlsLayer:
    """TLS around a sans-IO peer, in memory (``ssl.MemoryBIO`` + ``SSLObject``).

    The inner peer is made once the handshake is done, from the ``SSLObject``: that is
    when a server learns the client certificate EXTERNAL needs.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        make_inner: Callable[[ssl.SSLObject], Any],
        *,
        server_side: bool,
    ) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.tls = context.wrap_bio(
            self._in, self._out, server_side=server_side,
            server_hostname=None if server_side else "localhost",
        )  # fmt: skip
        self._make_inner = make_inner
        self.inner: Any = None
        self._handshake()

    def _handshake(self) -> None:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            return
        self.inner = self._make_inner(self.tls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def is_closed(self) -> bool:
        return self.inner is not None and bool(self.inner.is_closed)

    def receive_data(self, data: bytes) -> list[Any]:
        if not data:
            self._in.write_eof()
            return [] if self.inner is None else list(self.inner.receive_data(b""))
        self._in.write(data)
        if self.inner is None:
            self._handshake()
            if self.inner is None:
                return []
        plain = bytearray()
        for _ in range(10_000):  # ends when the incoming BIO is empty
            try:
                chunk = self.tls.read(65536)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                break
            if not chunk:
                break
            plain += chunk
        return list(self.inner.receive_data(bytes(plain))) if plain else []

    def data_to_send(self) -> bytes:
        if self.inner is not None:
            out = self.inner.data_to_send()
            if out:
                self.tls.write(out)
        return self._out.read()


def test_tls_identity() -> None:
    # the shape of getpeercert()'s dict, for the client certificate the fixture makes
    bob = {"subject": ((("organizationName", "amqp10-test"),), (("commonName", "bob"),))}
    assert tls_identity(bob) == BOB
    assert tls_identity({}) is None and tls_identity(None) is None
    tricky = {"subject": ((("commonName", "a,b+c"),), (("organizationName", " x "),))}
    assert tls_identity(tricky) == "O=\\ x\\ ,CN=a\\,b\\+c"
    multi = {"subject": ((("organizationalUnitName", "x"), ("userId", "7")),)}
    assert tls_identity(multi) == "OU=x+UID=7"


def test_external_proton_client_to_our_server(certs: Path) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs / "server.pem", certs / "server-key.pem")
    ctx.load_verify_locations(certs / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED

    def make_server(tls: ssl.SSLObject) -> SaslConnection:
        identity = tls_identity(tls.getpeercert())
        sasl = SaslServer(("EXTERNAL", *PASSWORD_MECHS), STORE, tls_identity=identity)
        return SaslConnection.server(sasl, "amqp10")

    ours = TlsLayer(ctx, make_server, server_side=True)
    dom = SSLDomain(SSLDomain.MODE_CLIENT)
    dom.set_credentials(str(certs / "client.pem"), str(certs / "client-key.pem"), None)
    dom.set_trusted_ca_db(str(certs / "ca.pem"))
    dom.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    peer = ProtonPeer(server=False, mechs="EXTERNAL", ssl_domain=dom)
    peer.conn.open()
    events = pump(ours, peer)
    assert only(events, SaslCompleted) == SaslCompleted(
        outcome=SaslCode.OK, mechanism="EXTERNAL", identity=BOB
    )
    assert ours.inner.sasl.offered[0] == "EXTERNAL"
    assert peer.sasl.outcome == PROTON_OK and peer.sasl.mech == "EXTERNAL"
    assert peer.transport.encrypted
    # Proton names certificates as tls_identity does (our identity above came from it)
    assert peer.transport.ssl().get_cert_subject() == SERVER_SUBJECT
    assert peer.opened and ours.inner.is_open


def test_external_our_client_to_proton_server(certs: Path) -> None:
    ctx = ssl.create_default_context(cafile=certs / "ca.pem")
    ctx.load_cert_chain(certs / "client.pem", certs / "client-key.pem")

    def make_client(tls: ssl.SSLObject) -> SaslConnection:
        sasl = SaslClient(tls_client_certificate=True, hostname="localhost")
        conn = SaslConnection.client(sasl, "amqp10")
        conn.open()
        return conn

    ours = TlsLayer(ctx, make_client, server_side=False)
    dom = SSLDomain(SSLDomain.MODE_SERVER)
    dom.set_credentials(str(certs / "server.pem"), str(certs / "server-key.pem"), None)
    dom.set_trusted_ca_db(str(certs / "ca.pem"))
    dom.set_peer_authentication(SSLDomain.VERIFY_PEER, str(certs / "ca.pem"))
    peer = ProtonPeer(server=True, ssl_domain=dom)
    events = pump(ours, peer)
    assert only(events, SaslCompleted).mechanism == "EXTERNAL"
    assert ours.inner.sasl.offered == ("EXTERNAL", "ANONYMOUS")
    assert peer.sasl.outcome == PROTON_OK and peer.sasl.mech == "EXTERNAL"
    # both implementations name certificates the same way
    assert peer.transport.user == BOB
    assert tls_identity(ours.tls.getpeercert()) == SERVER_SUBJECT
    assert peer.opened and ours.inner.is_open


# --------------------------------------------------------------------------- sockets


class SocketServer:
    """Our SASL server and engine behind a loopback socket, one connection, in a thread.

    The loop is the least a driver does: write what the engine has, read with a short
    timeout, feed it, tick; end when the engine says it is closed (after a half-close
    and a short drain, so the peer reads our last bytes before the socket goes).
    """

    def __init__(self, make_conn: Callable[[], SaslConnection]) -> None:
        self._make_conn = make_conn
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(TIME_LIMIT)
        self.port = self.listener.getsockname()[1]
        self.events: list[Any] = []
        self.conn: SaslConnection | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name="amqp10-sasl-test-server", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            sock, _ = self.listener.accept()
            with sock:
                self._serve(sock)
        except BaseException as exc:
            self.error = exc
        finally:
            self.listener.close()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(0.02)
        conn = self.conn = self._make_conn()
        deadline = time.monotonic() + TIME_LIMIT
        eof = False
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("server loop ran out of time")
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
            if conn.is_closed or eof:
                break
            try:
                data = sock.recv(65536)
            except TimeoutError:
                conn.tick(time.monotonic())
                self.events += conn.poll_events()
                continue
            eof = not data
            got = conn.receive_data(data)
            self.events += got
            accept_ours(conn, got)
        sock.shutdown(socket.SHUT_WR)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                if not sock.recv(65536):
                    break
            except TimeoutError:
                continue
            except OSError:
                break

    def join(self) -> None:
        self._thread.join(TIME_LIMIT + 5)
        assert not self._thread.is_alive(), "server thread did not finish"
        if self.error is not None:
            raise self.error


def serve(offered: tuple[str, ...]) -> SocketServer:
    return SocketServer(lambda: SaslConnection.server(SaslServer(offered, STORE), "amqp10"))


@pytest.mark.parametrize(
    ("kwargs", "mechanism", "identity"),
    [
        ({"allowed_mechs": "ANONYMOUS"}, "ANONYMOUS", None),
        (
            {
                "user": "alice",
                "password": "secret",
                "allowed_mechs": "PLAIN",
                "allow_insecure_mechs": True,
            },
            "PLAIN",
            "alice",
        ),
    ],
    ids=["anonymous", "plain"],
)
def test_blocking_connection_over_loopback(
    kwargs: dict[str, Any], mechanism: str, identity: str | None
) -> None:
    server = serve((*PASSWORD_MECHS, "ANONYMOUS"))
    try:
        bc = BlockingConnection(f"127.0.0.1:{server.port}", timeout=TIME_LIMIT, **kwargs)
        try:
            assert bc.conn.state & Endpoint.REMOTE_ACTIVE
            assert bc.conn.transport.sasl().outcome == PROTON_OK
        finally:
            bc.close()
    finally:
        server.join()
    assert only(server.events, SaslCompleted) == SaslCompleted(
        outcome=SaslCode.OK, mechanism=mechanism, identity=identity
    )
    assert server.conn is not None and server.conn.is_closed
    assert [type(e).__name__ for e in server.events][-2:] == [
        "ConnectionOpened",
        "ConnectionClosed",
    ]


def test_blocking_connection_with_a_wrong_password_over_loopback() -> None:
    server = serve(PASSWORD_MECHS)
    try:
        with pytest.raises(proton.ConnectionException, match="unauthorized-access"):
            BlockingConnection(
                f"127.0.0.1:{server.port}", timeout=TIME_LIMIT, user="alice", password="wrong",
                allowed_mechs="PLAIN", allow_insecure_mechs=True,
            )  # fmt: skip
    finally:
        server.join()
    assert only(server.events, SaslFailed).outcome is SaslCode.AUTH
    assert not any(isinstance(e, ConnectionOpened) for e in server.events)
