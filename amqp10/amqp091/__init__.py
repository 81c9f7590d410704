"""The sans-IO AMQP 0-9-1 engine (with the 0-9 and 0-8 dialects).

Built like :mod:`amqp10.transport`: ``Connection.receive_data(bytes) -> list[Event]``,
``Connection.data_to_send() -> bytes``, ``Connection.tick(now) -> deadline | None``
(events raised by ``tick`` or by the application's calls come from
``poll_events()``). No sockets, clocks or threads; ``receive_data(b"")`` is the end
of the stream. One class plays both roles: ``Connection("server")`` for the
broker's front end, ``Connection("client", username=..., password=...)`` for tools
and the tests' pair harness.

Server, handshake (the engine asks, the application answers):

- ``LoginRequested(mechanism, response, username, password, client_properties)``
  → ``accept_login()`` (sends ``tune``), ``challenge(data)`` (``secure``; the
  answer is ``SecureResponse``) or ``reject_login()`` (ACCESS_REFUSED, RabbitMQ's text).
- ``ConnectionTuned(channel_max, frame_max, heartbeat)``: limits now enforced both
  ways (an oversized frame is FRAME_ERROR; heartbeats sent and checked by ``tick``).
- ``VirtualHostRequested(virtual_host)`` → ``accept_open()`` (``ConnectionOpened``
  follows) or ``refuse_open(NOT_ALLOWED | ACCESS_REFUSED)``.

Open connection:

- Channels the client opens are answered at once (``ChannelOpened``).
- ``MethodReceived(channel, method)`` for every method without content the
  application must carry out (exchange/queue/basic/tx/confirm); answer with
  ``send_method(channel, method)``.
- ``ContentReceived(channel, method, properties, raw_properties, body)`` for
  ``basic.publish`` (assembled from its method, header and body frames).
  ``send_content(channel, method, properties_or_raw_bytes, body)`` sends
  ``deliver``/``get-ok``/``return``, cut to frame-max.
- ``close_channel(channel, code, text, class_id, method_id)`` is a channel exception
  (403/404/405/406 with ``errors.reply_text``/``not_found``); ``ChannelClosed`` follows.
  ``close(code, text)`` closes the connection; ``ConnectionClosed`` follows.
- ``ChannelFlowChanged`` (answered with flow-ok; a server refuses a client's active=false
  with 540, as RabbitMQ; ``flow(channel, active)`` asks the peer), ``SecretUpdateRequested`` → ``update_secret_ok()``,
  ``block(reason)``/``unblock()`` (only if the client announced ``connection.blocked``).
- ``ConnectionFailed`` when the engine closed the connection for a peer violation
  (501-505, 530, 540, 541: the reply code and text it sent); ``ConnectionLost`` when
  it is dead without a handshake (heartbeats missed, handshake or close-ok timeout,
  end of stream, unsupported protocol header). After either, flush
  ``data_to_send()`` and close the socket.

The codec: ``methods`` (classes generated from the spec XML by ``_generate``),
``fields`` (field tables, RabbitMQ's errata types), ``framing``, ``dialects``
(0-9 and 0-8 as difference tables; pass ``dialect=`` to the connection;
``dialect_for_header`` names the one a connection's first 8 bytes ask for). The state tables
are in ``connection_state`` and ``channel_state``; ``python -m
amqp10.amqp091._diagrams`` draws them.
"""

from __future__ import annotations

from .base import Method, Properties
from .channel_state import ChannelState
from .connection import Connection
from .connection_state import ConnectionState
from .dialects import AMQP_0_8, AMQP_0_9, AMQP_0_9_1, DIALECTS, Dialect, dialect_for_header
from .errors import (
    AMQPError,
    ChannelException,
    ConnectionException,
    IllegalStateError,
    not_found,
    reply_text,
)
from .events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionBlocked,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionTuned,
    ConnectionUnblocked,
    ContentReceived,
    Event,
    LoginRequested,
    MethodReceived,
    SecretUpdated,
    SecretUpdateRequested,
    SecureChallenge,
    SecureResponse,
    VirtualHostRequested,
)
from .handshake import CAPABILITIES
from .methods import BasicProperties, ReplyCode

__all__ = [
    "AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "CAPABILITIES", "DIALECTS", "AMQPError",
    "BasicProperties", "ChannelClosed", "ChannelException", "ChannelFlowChanged",
    "ChannelOpened", "ChannelState", "Connection", "ConnectionBlocked", "ConnectionClosed",
    "ConnectionException", "ConnectionFailed", "ConnectionLost", "ConnectionOpened",
    "ConnectionState", "ConnectionTuned", "ConnectionUnblocked", "ContentReceived",
    "Dialect", "Event", "IllegalStateError", "LoginRequested", "Method", "MethodReceived",
    "Properties", "ReplyCode", "SecretUpdateRequested", "SecretUpdated",
    "SecureChallenge", "SecureResponse", "VirtualHostRequested",
    "dialect_for_header", "not_found", "reply_text",
]  # fmt: skip
