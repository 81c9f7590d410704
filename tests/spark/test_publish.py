"""``BrokerClient.publish``, the sink's sending path: a window of messages in flight.

Against our direct peer (tests/client/helpers.Service), which rejects messages whose
subject is ``reject``: no Spark session is needed.
"""

from __future__ import annotations

import pytest
from anyio.from_thread import start_blocking_portal

from amqp10 import errors
from amqp10.message import Message
from amqp10.spark._client import BrokerClient
from amqp10.spark.options import SourceOptions
from tests.client.helpers import Service, running


def test_publish_stops_at_a_refusal_and_counts_those_in_flight() -> None:
    svc = Service()
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(running(svc)) as server,
        BrokerClient(SourceOptions.parse({"url": server.url, "address": "q"})) as client,
    ):
        bodies = [Message(body=i, subject="reject" if i in (3, 5) else None) for i in range(10)]
        # window 4: 0-3 go out; 4, 5, 6 follow as 0, 1, 2 are accepted; 3's rejection stops
        # the sending (7-9 never leave), and 4-6 are waited for: 5 is the second refusal
        with pytest.raises(errors.DeliveryError, match=r"^2 message\(s\) to 'q' were not accepted"):
            client.publish("q", [m.encode() for m in bodies], window=4)
        assert [d.message.body for d in svc.received] == list(range(7))
        client.publish("q", [Message(body=i).encode() for i in range(100)], window=7)
        assert [d.message.body for d in svc.received[7:]] == list(range(100))
