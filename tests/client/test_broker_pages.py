"""The example of each broker page (docs/brokers/*.md) runs as written against our broker.

Each page's example (the Python block under its "## Example" heading) names where it
connects in one assignment (``URL = ...`` or ``CONNECTION_STRING = (...)``); the test
points that at a broker on 127.0.0.1 and runs the rest unchanged, in a thread (the
example calls ``anyio.run`` itself).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import amqp10.sync
from tests.broker.conftest import broker_with

PAGES = Path(__file__).resolve().parents[2] / "docs" / "brokers"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


def example(page: str, heading: str = "## Example") -> str:
    text = (PAGES / page).read_text()
    section = text.split(heading, 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, f"{page}: no Python block under {heading!r}"
    return found.group(1)


def run(code: str, target: str, value: str) -> str:
    """Run ``code`` with its ``target = ...`` assignment replaced by ``value``; its output."""
    pattern = re.compile(rf"^{target} = (\(.*?\)|\".*?\")$", re.S | re.M)
    assert pattern.search(code), f"no {target} assignment in the example"
    code = pattern.sub(f"{target} = {value!r}", code, count=1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
    return out.getvalue()


def test_the_rabbitmq_example(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        with amqp10.sync.connect(b.url) as conn:  # declare the queue, as on RabbitMQ
            conn.open_receiver("orders", credit=0).close()
        out = run(example("rabbitmq.md"), "URL", f"amqp://{b.url}")
    assert out.splitlines() == ["Accepted()", "{'id': 1}"]


def test_the_rabbitmq_management_example(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        out = run(example("rabbitmq.md", "## Managing queues and exchanges"), "URL", f"amqp://{b.url}")
    assert out.splitlines() == ["invoices quorum", "1", "409", "1", "0"]


def test_the_artemis_and_qpid_example(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        out = run(example("artemis-qpid.md"), "URL", f"amqp://{b.url}")
    assert out.splitlines() == ["blue"]


def test_the_azure_example(tmp_path: Path) -> None:
    sb = {
        "enabled": True,
        "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
        "queues": [{"name": "queue.1"}],
    }
    with broker_with(tmp_path, servicebus=sb) as b:
        conn_str = f"Endpoint=sb://127.0.0.1:{b.port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};UseDevelopmentEmulator=true"
        out = run(example("azure.md"), "CONNECTION_STRING", conn_str)
    assert out.splitlines() == ["Accepted()", "hello"]
