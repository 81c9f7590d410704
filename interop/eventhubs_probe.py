"""What the real ``azure-eventhub`` SDK can do against our broker: a probe, not a matrix column.

``python -m interop.eventhubs_probe`` starts our broker (a subprocess on 127.0.0.1)
with ``[servicebus]`` on and a partitioned stream ``hub`` of two partitions, connects
the SDK through its emulator connection string (``UseDevelopmentEmulator=true``) and
tries each operation in turn, each bounded in time; it prints one line per operation,
``works`` or ``fails: <reason>``. ``interop/test_eventhubs_probe.py`` runs it and holds
the result to what ``interop/README.md`` reports. Event Hubs is not required of the
broker (issue #15 asks to report what works).

azure-eventhub 5.15's copy of Azure's ``_pyamqp`` reads performative fields by index
without padding the list (``Open`` field 9, ``Begin`` field 4, ...), where a peer may
leave trailing null fields out (Part 1 §1.4), as our encoder does; azure-servicebus
7.15's copy of ``_pyamqp`` pads them. ``--padded`` runs the probe with the Event Hubs
SDK's frame decoder replaced by the Service Bus SDK's (``azure.servicebus._pyamqp``),
to show what the broker itself lacks beyond that client bug.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .peers.base import HOST
from .peers.ours import OurBroker
from .scenarios.azure_sb import KEY, KEY_NAME

__all__ = ["HUB", "OPERATIONS", "probe"]

HUB = "hub"
PARTITIONS = 2
WAIT = 10.0  # seconds an operation may take before it counts as hanging

CONFIG = f"""
[[addresses]]
pattern = "{HUB}"
kind = "stream"
policy = {{ partitions = {PARTITIONS} }}

[servicebus]
enabled = true
shared_access_keys = [{{ name = "{KEY_NAME}", key = "{KEY}" }}]
"""


def _conn_str(port: int) -> str:
    return (
        f"Endpoint=sb://{HOST}:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
        f"EntityPath={HUB};UseDevelopmentEmulator=true"
    )


def _producer(port: int) -> Any:
    from azure.eventhub import EventHubProducerClient

    return EventHubProducerClient.from_connection_string(_conn_str(port), retry_total=0)


def _consumer(port: int) -> Any:
    from azure.eventhub import EventHubConsumerClient

    return EventHubConsumerClient.from_connection_string(_conn_str(port), "$Default", retry_total=0)


def get_eventhub_properties(port: int) -> str:
    with _producer(port) as p:
        props = p.get_eventhub_properties()
    ids = props.get("partition_ids")
    if list(ids or []) != [str(k) for k in range(PARTITIONS)]:
        raise AssertionError(f"partition_ids {ids!r}")
    return f"name {props.get('eventhub_name')!r}, partition_ids {ids}"


def get_partition_properties(port: int) -> str:
    with _producer(port) as p:
        props = p.get_partition_properties("0")
    if props.get("id") != "0":
        raise AssertionError(f"id {props.get('id')!r}")
    return f"last sequence number {props.get('last_enqueued_sequence_number')}, empty {props.get('is_empty')}"


def _send(port: int, bodies: list[str], **batch: str) -> None:
    """Send ``bodies`` as one batch (``batch``: ``create_batch``'s partition_id or partition_key)."""
    from azure.eventhub import EventData

    with _producer(port) as p:
        b = p.create_batch(**batch)
        for body in bodies:
            b.add(EventData(body))
        p.send_batch(b)


def send_batch(port: int) -> str:
    _send(port, [f"any-{i}" for i in range(3)])
    return "3 events to the hub (the broker places them)"


def send_batch_to_partition(port: int) -> str:
    _send(port, ["p1-0", "p1-1"], partition_id="1")
    return "2 events to partition 1"


def send_batch_with_partition_key(port: int) -> str:
    _send(port, ["key-0", "key-1"], partition_key="customer-7")
    return "2 events with partition key customer-7"


def receive_from_earliest(port: int) -> str:
    """Every event of partition 1 from ``-1`` (the start), with their annotations. The SDK's
    receive reports what fails through ``on_error`` (and retries it later, 30 s or more); the
    first error it reports is this operation's answer, at once, within :data:`WAIT`."""
    got: list[Any] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def on_event(ctx: Any, event: Any) -> None:
        if event is not None:
            got.append(event)
            if len(got) >= 2:
                done.set()

    def on_error(ctx: Any, error: BaseException) -> None:
        errors.append(error)
        done.set()

    c = _consumer(port)
    worker = threading.Thread(
        target=lambda: c.receive(
            on_event, on_error=on_error, partition_id="1", starting_position="-1", max_wait_time=1
        ),
        daemon=True,
    )
    worker.start()
    done.wait(WAIT / 2)
    c.close()
    worker.join(WAIT / 4)
    if errors and len(got) < 2:
        raise errors[0]
    bodies = [e.body_as_str() for e in got]
    if not bodies or not {"p1-0", "p1-1"} <= set(bodies):
        raise AssertionError(f"partition 1 from -1 gave {bodies}")
    e = got[0]
    return f"{bodies}, offset {e.offset!r}, sequence number {e.sequence_number}, enqueued {e.enqueued_time}"


OPERATIONS: dict[str, Callable[[int], str]] = {
    "get_eventhub_properties": get_eventhub_properties,
    "get_partition_properties": get_partition_properties,
    "send_batch": send_batch,
    "send_batch(partition_id)": send_batch_to_partition,
    "send_batch(partition_key)": send_batch_with_partition_key,
    "receive(partition_id, starting_position=-1)": receive_from_earliest,
}


def _bounded(fn: Callable[[int], str], port: int) -> tuple[bool, str]:
    """Run one operation in a thread of its own, waiting at most :data:`WAIT` seconds."""
    out: list[tuple[bool, str]] = []

    def run() -> None:
        try:
            out.append((True, fn(port)))
        except BaseException as exc:  # the SDK's errors, ours, anything: reported
            text = str(exc).strip().splitlines()
            out.append((False, f"{type(exc).__name__}: {text[0] if text else ''}"[:300]))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WAIT)
    return out[0] if out else (False, f"no answer within {WAIT:g}s (the SDK waits)")


def pad_frames() -> None:
    """Give the Event Hubs SDK the Service Bus SDK's frame decoder, which pads performatives
    to their full field count (see the module)."""
    import azure.eventhub._pyamqp._transport as transport
    from azure.servicebus._pyamqp._decode import decode_frame

    transport.decode_frame = decode_frame


def probe(log: Callable[[str], None] = print) -> dict[str, tuple[bool, str]]:
    """Start the broker, try every operation, stop it; (works, detail) by operation."""
    import azure.eventhub

    results: dict[str, tuple[bool, str]] = {}
    with tempfile.TemporaryDirectory(prefix="amqp10-eventhubs-") as tmp:
        peer = OurBroker(plain=False, config=CONFIG)
        with peer.running(Path(tmp), None) as ep:
            log(f"azure-eventhub {azure.eventhub.__version__} -> our broker on {ep.url}")
            for name, fn in OPERATIONS.items():
                ok, detail = _bounded(fn, ep.port)
                results[name] = (ok, detail)
                log(f"{name}: {'works' if ok else 'fails'}: {detail}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interop.eventhubs_probe", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--padded", action="store_true", help="with the Service Bus SDK's frame decoder (see the module)"
    )
    if parser.parse_args(argv).padded:
        pad_frames()
    results = probe()
    return 0 if all(ok for ok, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
