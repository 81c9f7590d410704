"""The connection-class methods the 0-9-1 connection receives, as a mixin.

:class:`~amqp10.amqp091.connection.Connection` dispatches each method of class 10
(``connection.*``) received on channel 0 here, once its state table allowed it:
the handshake (start, secure, tune, open), the close dialogue and RabbitMQ's
extensions (blocked, unblocked, update-secret). The handlers record what the peer
said, answer what the engine answers itself and raise the events the application
answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .auth import parse_credentials
from .base import Method
from .connection_state import ConnectionInput, ConnectionState
from .errors import ConnectionException
from .events import (
    ConnectionBlocked,
    ConnectionClosed,
    ConnectionOpened,
    ConnectionTuned,
    ConnectionUnblocked,
    Event,
    LoginRequested,
    SecretUpdated,
    SecretUpdateRequested,
    SecureChallenge,
    SecureResponse,
    VirtualHostRequested,
    reason_of,
)
from .handshake import check_tune_ok, client_start_ok, client_tune_ok
from .methods import (
    ConnectionBlocked as Blocked,
)
from .methods import (
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUpdateSecret,
    ReplyCode,
)
from .methods import (
    ConnectionUnblocked as Unblocked,
)
from .timers import Timers

if TYPE_CHECKING:
    from .channel import Channel

__all__ = ["ConnectionMethods"]

S = ConnectionState
I = ConnectionInput  # noqa: E741
_U32: Final = 0xFFFFFFFF


class ConnectionMethods:
    """The handlers of received ``connection.*`` methods (mixed into ``Connection``)."""

    # what the handlers use of the connection (set by Connection.__init__)
    state: ConnectionState
    channel_max: int
    frame_max: int
    heartbeat: int | None
    mechanisms: tuple[str, ...]
    username: str
    password: str
    mechanism: str
    virtual_host: str
    client_properties: dict[str, Any] | None
    peer_properties: dict[str, Any]
    peer_mechanisms: tuple[str, ...]
    login_mechanism: str | None
    close_sent: ConnectionClose | None
    close_received: ConnectionClose | None
    _channels: dict[int, Channel]
    _events: list[Event]
    _discard_input: bool
    _recv_frame_max: int
    _send_frame_max: int
    _timers: Timers

    # Connection's (real methods, not stubs under TYPE_CHECKING: mypyc compiles the calls
    # below against these and rejects a conditional class body)
    def _move(self, event: ConnectionInput) -> None:
        raise NotImplementedError

    def _send_method(self, channel: int, method: Method) -> None:
        raise NotImplementedError

    def _extension(self, method: Method) -> None:
        if isinstance(method, Blocked):
            self._events.append(ConnectionBlocked(reason=method.reason))
        elif isinstance(method, Unblocked):
            self._events.append(ConnectionUnblocked())
        elif isinstance(method, ConnectionUpdateSecret):
            self._events.append(
                SecretUpdateRequested(new_secret=method.new_secret, reason=method.reason)
            )
        else:
            self._events.append(SecretUpdated())

    def _on_start(self, method: ConnectionStart) -> None:
        self.peer_properties = method.server_properties
        self.peer_mechanisms = tuple(method.mechanisms.decode(errors="replace").split())
        self._move(I.SEND_START_OK)
        self._send_method(
            0,
            client_start_ok(
                method, self.mechanism, self.username, self.password, self.client_properties
            ),
        )

    def _on_start_ok(self, method: ConnectionStartOk) -> None:
        self.peer_properties = method.client_properties
        if method.mechanism not in self.mechanisms:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"COMMAND_INVALID - unknown authentication mechanism '{method.mechanism}'",
                10,
                11,
            )
        self.login_mechanism = method.mechanism
        username, password = parse_credentials(method.mechanism, method.response)
        if username is not None:
            self.username = username
        self._events.append(
            LoginRequested(
                mechanism=method.mechanism,
                response=method.response,
                username=username,
                password=password,
                client_properties=method.client_properties,
                locale=method.locale,
            )
        )

    def _on_secure(self, method: ConnectionSecure) -> None:
        self._events.append(SecureChallenge(challenge=method.challenge))

    def _on_secure_ok(self, method: ConnectionSecureOk) -> None:
        self._events.append(SecureResponse(response=method.response))

    def _on_tune(self, method: ConnectionTune) -> None:
        tune_ok = client_tune_ok(method, self.channel_max, self.frame_max, self.heartbeat)
        self._move(I.SEND_TUNE_OK)
        self._send_method(0, tune_ok)
        self._tuned(tune_ok.channel_max, tune_ok.frame_max, tune_ok.heartbeat)
        self._move(I.SEND_OPEN)
        self._send_method(0, ConnectionOpen(virtual_host=self.virtual_host))

    def _on_tune_ok(self, method: ConnectionTuneOk) -> None:
        self._tuned(*check_tune_ok(method, self.channel_max, self.frame_max))

    def _tuned(self, channel_max: int, frame_max: int, heartbeat: int) -> None:
        self.channel_max, self.frame_max, self.heartbeat = channel_max, frame_max, heartbeat
        self._timers.heartbeat = heartbeat
        self._recv_frame_max = self._send_frame_max = frame_max or _U32
        self._events.append(
            ConnectionTuned(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat)
        )

    def _on_open(self, method: ConnectionOpen) -> None:
        self.virtual_host = method.virtual_host
        self._events.append(VirtualHostRequested(virtual_host=method.virtual_host))

    def _on_open_ok(self, method: ConnectionOpenOk) -> None:
        self._events.append(ConnectionOpened(virtual_host=self.virtual_host))

    def _on_close(self, method: ConnectionClose) -> None:
        self.close_received = method
        self._channels.clear()
        if self.state is S.CLOSE_RCVD:
            self._move(I.SEND_CLOSE_OK)
            self._send_method(0, ConnectionCloseOk())
            self._discard_input = True
            self._events.append(
                ConnectionClosed(
                    **reason_of(method),
                    by_peer=True,
                )
            )
        else:  # crossing closes: answer, and wait for the close-ok to ours
            self._move(I.SEND_CLOSE_OK)
            self._send_method(0, ConnectionCloseOk())

    def _on_close_ok(self, method: ConnectionCloseOk) -> None:
        close = self.close_sent
        assert close is not None
        self._discard_input = True
        self._events.append(
            ConnectionClosed(
                **reason_of(close),
                by_peer=False,
            )
        )
