"""The azure-eventhub probe (``interop/eventhubs_probe.py``) against our broker: what works
and what fails is what interop/README.md reports ("The azure-eventhub probe")."""

from __future__ import annotations

import pytest

from interop import eventhubs_probe


def test_the_sdk_as_it_is_fails_on_the_open_and_begin_it_decodes() -> None:
    """azure-eventhub 5.15's _pyamqp reads Open field 9 and Begin field 4 by index, and our
    broker leaves trailing null fields out (Part 1 §1.4): nothing gets past connecting."""
    results = eventhubs_probe.probe(log=lambda line: None)
    assert [name for name, (ok, _) in results.items() if ok] == []
    for name, (_ok, detail) in results.items():
        assert "list index out of range" in detail, (name, detail)  # receive too: its on_error says it


def test_with_padded_frames_sending_works_and_management_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the Service Bus SDK's frame decoder (it pads performatives), events sent to the
    hub are placed by the broker's partitioned stream, by partition key too; what needs the
    Event Hubs management node (properties, partition ids: a partition's sender, every
    receiver) fails: a token for the hub does not cover ``$management``, and the broker has
    no ``com.microsoft:eventhub`` / ``com.microsoft:partition`` READ."""
    import azure.eventhub._pyamqp._transport as transport
    from azure.servicebus._pyamqp._decode import decode_frame

    monkeypatch.setattr(transport, "decode_frame", decode_frame)
    results = eventhubs_probe.probe(log=lambda line: None)
    works = {name for name, (ok, _) in results.items() if ok}
    assert works == {"send_batch", "send_batch(partition_key)"}
    for name in ("get_eventhub_properties", "get_partition_properties", "send_batch(partition_id)"):
        assert "Failed to open mgmt link" in results[name][1], results[name]
