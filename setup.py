"""An opt-in compiled build of the hot modules (issue 31); pyproject.toml holds the rest.

By default this file adds nothing: the install is pure Python. With ``AMQP10_COMPILE=1``
the modules of ``COMPILED`` are compiled with mypyc (it needs mypy, from the dev extra, and a
C compiler; pip must not isolate the build, or it would not see mypy):

    make compiled                                     # in place, in this checkout
    AMQP10_COMPILE=1 pip install --no-build-isolation -e .

The compiled modules behave as the pure ones and pass the same tests (make test-compiled).
"""

from __future__ import annotations

import os

from setuptools import setup

# The modules a message's broker CPU goes through (bench/profiles: broker_inproc.py's
# profile and counts.py's 0-9-1 workloads), as far as mypyc compiles them: the AMQP 1.0
# codec and engine; the broker core's message, node, queue, exchange and virtual host
# classes and its pager (paging.py: a queue asks it at every message; Node, NodeElsewhere,
# QueuedMessage allow interpreted subclasses: streams, the 1.0 targets, the other front
# ends' messages; VirtualHost derives from _mypyc's Referable to be weakly referenced);
# the broker's AMQP 1.0 front end on a message's path (its LinkConsumer allows interpreted
# subclasses: Service Bus's); the 0-9-1 engine (amqp091/*)
# and the broker's 0-9-1 front end (broker/amqp091/*, its message and handler included; the
# handler derives from broker/frontend's interpreted ContextHandler, as the 1.0 one does);
# with several workers, a crossing message's path: the internal link (broker/workers/link.py:
# its records, batches and engine driver; InternalLink allows interpreted subclasses:
# peers.py's), its opening side (remote.py: RemoteNodes allows peers.py's) and its answering
# side (owner.py); the client's per-message path (issue 34): the I/O drivers both sides
# share (io/driver.py, io/direct.py), the message model (message/model.py), the async
# sender and receiver and their helpers (client/sender.py, receiver.py, _common.py) and the
# blocking client (client/sync.py, syncloop.py). amqp10/_mypyc.py holds what they need
# from mypyc. Left interpreted: the client's Connection (client/connection.py: it derives
# from interpreted classes, ClaimsLayer down to ConnectionCore, and sets their attributes,
# on which mypyc fails with an internal error) and the client's async generators (mypyc
# compiles none: Sender.pipeline's is in client/_pipeline.py); the
# rest of the core (streams, partitioned, broker: a 0-9-1 publish calls its authorize only
# when there are permissions that do not allow everything, or a token's grant, to ask,
# broker/amqp091/context); the rest of broker/workers (supervisor, peers, control, metadata, handover...: once a link or a
# change, not once a message);
# amqp091's generator (_generate, _diagrams); field_types (0-9-1's int/float/bytes subclasses,
# which mypyc does not compile); broker/frontend and broker/amqp091/login (once a connection); the
# dataclasses' generated methods (made by exec; amqp091/events' per-message ones,
# MethodReceived and ContentReceived, write their __init__ out to be compiled) and the 1.0
# composite types' decoders (made by exec at import).
COMPILED = [
    "amqp10/types/codec.py",
    "amqp10/transport/framing.py",
    "amqp10/transport/connection.py",
    "amqp10/transport/session.py",
    "amqp10/transport/link.py",
    "amqp10/transport/delivery.py",
    "amqp10/transport/serial.py",
    "amqp10/broker/core/message.py",
    "amqp10/broker/core/nodes.py",
    "amqp10/broker/core/queues.py",
    "amqp10/broker/core/exchanges.py",
    "amqp10/broker/core/vhost.py",
    "amqp10/broker/core/paging.py",
    "amqp10/broker/amqp1/message.py",
    "amqp10/broker/amqp1/publishers.py",
    "amqp10/broker/amqp1/consumers.py",
    "amqp10/broker/amqp1/handler.py",
    "amqp10/amqp091/base.py",
    "amqp10/amqp091/fields.py",
    "amqp10/amqp091/framing.py",
    "amqp10/amqp091/methods.py",
    "amqp10/amqp091/errors.py",
    "amqp10/amqp091/events.py",
    "amqp10/amqp091/timers.py",
    "amqp10/amqp091/auth.py",
    "amqp10/amqp091/handshake.py",
    "amqp10/amqp091/dialects.py",
    "amqp10/amqp091/channel_state.py",
    "amqp10/amqp091/connection_state.py",
    "amqp10/amqp091/channel.py",
    "amqp10/amqp091/connection_methods.py",
    "amqp10/amqp091/connection.py",
    "amqp10/broker/amqp091/connection.py",
    "amqp10/broker/amqp091/context.py",
    "amqp10/broker/amqp091/channel.py",
    "amqp10/broker/amqp091/confirm.py",
    "amqp10/broker/amqp091/publish.py",
    "amqp10/broker/amqp091/basic.py",
    "amqp10/broker/amqp091/exchange.py",
    "amqp10/broker/amqp091/queue.py",
    "amqp10/broker/amqp091/tx.py",
    "amqp10/broker/workers/link.py",
    "amqp10/broker/workers/remote.py",
    "amqp10/broker/workers/owner.py",
    "amqp10/broker/amqp091/message.py",
    "amqp10/broker/amqp091/handler.py",
    "amqp10/io/driver.py",
    "amqp10/io/direct.py",
    "amqp10/message/fields.py",
    "amqp10/message/model.py",
    "amqp10/client/_common.py",
    "amqp10/client/sender.py",
    "amqp10/client/receiver.py",
    "amqp10/client/syncloop.py",
    "amqp10/client/sync.py",
]


def _ext_modules() -> list[object]:
    if os.environ.get("AMQP10_COMPILE", "") in ("", "0"):
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3"))


setup(ext_modules=_ext_modules())
