"""Where the spec XML is: ``../shared/spec`` beside the repo (CI), else ``$AMQP10_SPEC_DIR``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_CANDIDATES = [
    ROOT / "../shared/spec",
    Path(os.environ.get("AMQP10_SPEC_DIR", "/nonexistent")),
    Path("/work/shared/spec"),  # the development machine's shared folder
]


def spec_file(relative: str) -> Path:
    """The spec file at ``relative`` (``amqp-0-9-1/amqp0-9-1.stripped.xml``); fails if absent."""
    for base in _CANDIDATES:
        path = base / relative
        if path.exists():
            return path.resolve()
    pytest.fail(
        f"spec XML {relative} not found (../shared/spec beside the repo, or $AMQP10_SPEC_DIR)"
    )


EXTENDED = "amqp-0-9-1/amqp0-9-1.stripped.extended.xml"
PLAIN = "amqp-0-9-1/amqp0-9-1.stripped.xml"
AMQP_0_9 = "amqp-0-9/amqp0-9.stripped.xml"
AMQP_0_8 = "amqp-0-8/amqp0-8.stripped.xml"
