"""A Service Bus queue stored by a broker of store schema 6 or older carries
``x-delivery-limit`` = its max delivery count (deliveries allowed, the old meaning);
``x-delivery-limit`` now counts returns, as RabbitMQ's does, so the store's migration to
version 7 lowers it by one: the queue keeps its max delivery count across the upgrade.
Other queues' limits (a RabbitMQ client's, meant as returns) are left as they are."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from amqp10.broker.core import Queue
from amqp10.broker.core import store as st
from tests.broker.conftest import broker_with

SERVICEBUS = {"enabled": True, "queues": [{"name": "orders", "max_delivery_count": 3}]}
OLD_ORDERS = {
    "arguments": {
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "orders/$deadletterqueue",
        "x-delivery-limit": 3,  # as schema 6 stored it: deliveries
    }
}
RABBIT = {"arguments": {"x-dead-letter-exchange": "dlx", "x-delivery-limit": 3}}


def write_old_store(path: Path) -> None:
    """A schema-6 store as the earlier broker left it for SERVICEBUS (and a RabbitMQ
    client's queue beside it)."""
    s = st.Store(path)
    s.apply([
        (st.NODE, "/", "orders/$deadletterqueue", "queue", "{}"),
        (st.NODE, "/", "orders", "queue", json.dumps(OLD_ORDERS, sort_keys=True)),
        (st.NODE, "/", "rabbit", "queue", json.dumps(RABBIT, sort_keys=True)),
    ])  # fmt: skip
    s.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 6")
    db.commit()
    db.close()


def stored_arguments(path: Path) -> dict[str, dict[str, object]]:
    s = st.Store(path)
    try:
        return {
            n.name: json.loads(n.properties).get("arguments", {})
            for n in s.load(messages=False).nodes
        }
    finally:
        s.close()


def test_an_old_servicebus_queue_keeps_its_max_delivery_count(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    write_old_store(path)
    with broker_with(tmp_path, servicebus=SERVICEBUS) as b:
        orders, rabbit = b.broker.default.nodes["orders"], b.broker.default.nodes["rabbit"]
        assert isinstance(orders, Queue) and isinstance(rabbit, Queue)
        assert orders.policy.delivery_limit == 3  # deliveries: 2 returns, as configured
        assert rabbit.policy.delivery_limit == 4  # 3 returns, as its client asked
    args = stored_arguments(path)
    assert args["orders"]["x-delivery-limit"] == 2 and args["rabbit"]["x-delivery-limit"] == 3
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == st.SCHEMA_VERSION  # (migrated to the current schema: 7 added this migration)
    db.close()
    with broker_with(tmp_path, servicebus=SERVICEBUS) as b:  # migrated once, not again
        assert b.broker.default.nodes["orders"].policy.delivery_limit == 3


def test_which_stored_queues_the_migration_changes() -> None:
    old = json.dumps(OLD_ORDERS)
    fixed = st.servicebus_limit_as_returns("orders", old)
    assert fixed is not None and json.loads(fixed)["arguments"]["x-delivery-limit"] == 2
    assert st.servicebus_limit_as_returns("other", old) is None  # its dead letters go elsewhere
    assert st.servicebus_limit_as_returns("rabbit", json.dumps(RABBIT)) is None
    assert st.servicebus_limit_as_returns("orders", "{}") is None
    assert st.servicebus_limit_as_returns("orders", "not json") is None
