"""The scenarios driven by rhea (Node.js), from ``interop/rhea/scenarios.js``.

rhea comes from the npm registry (:mod:`interop.peers.rhea`); its npm package
has no ``examples/``, so each scenario is a script of ours that behaves like
one of rhea's examples: ``sasl-anonymous`` (connect), ``at-least-once``
(``simple_send.js`` then ``simple_recv.js``), ``request-response`` and
``anonymous-relay`` (``server.js`` answering ``client.js`` through
``connection.send``, a sender with an empty target; the relay row also sends
to a ``to`` that names no node), ``drain`` (``drain.js``: 25 messages, batches
of 10 credit with drain set; it must get all 25, then stop), and #14's
conventions written with rhea's own means (``rhea.filter.selector``, filters as
``rhea.types`` described values, termini
with ``durable``/``expiry_policy``/``capabilities``, a container ``id``,
``message_annotations``, ``group_id``): see :mod:`.rhea_conventions`. What the
scripts do not cover is n/a.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..peers.rhea import install_rhea, rhea_version
from . import FILTER_ROWS, Ctx, NotApplicable, ScenarioFailed, check
from .rhea_conventions import CONVENTIONS, check_convention

__all__ = ["NA", "client_version", "prepare", "run"]

SCRIPT = Path(__file__).resolve().parents[1] / "rhea" / "scenarios.js"
WAIT = 30.0
REQUESTS = [
    "Twas brillig, and the slithy toves",
    "Did gire and gymble in the wabe.",
    "All mimsy were the borogroves,",
    "And the mome raths outgrabe.",
]

_NOT_WRITTEN = "no rhea scenario written for it (rhea's examples cover the others)"
COVERED = (
    "sasl-anonymous",
    "at-least-once",
    "request-response",
    "anonymous-relay",
    "drain",
    *CONVENTIONS,
)
NA: dict[str, str] = {}  # filled below: every row the scripts do not cover

_modules: list[Path] = []


def prepare(install: bool = False) -> None:
    """npm-install rhea (raises PeerUnavailable with the reason if that cannot be done)."""
    if not _modules:
        _modules.append(install_rhea())


def client_version() -> str:
    return f"rhea {rhea_version()}"


def _node(ctx: Ctx, address: str) -> dict[str, Any]:
    prepare()
    rows = json.dumps(asdict(FILTER_ROWS))
    env = dict(os.environ, NODE_PATH=str(_modules[0]), INTEROP_FILTERS=rows)
    argv = ["node", str(SCRIPT), ctx.scenario, str(ctx.ep.port), address]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT, env=env)
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"rhea's {ctx.scenario} did not finish within {WAIT:g}s") from None
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        err = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[
            -1
        ]
        raise ScenarioFailed(f"node failed: {err}")
    result: dict[str, Any] = json.loads(lines[-1])
    if "error" in result:
        raise ScenarioFailed(f"rhea: {result['error']}")
    return result


def run(ctx: Ctx) -> str | None:
    a = ctx.addr()
    out = _node(ctx, a)
    sid = ctx.scenario
    if sid == "sasl-anonymous":
        check(out.get("opened"), "the connection did not open")
    elif sid == "at-least-once":
        check(out["confirmed"] == 10, f"{out['confirmed']} of 10 sends accepted")
        check(out["sequences"] == list(range(1, 11)), f"received {out['sequences']}")
    elif sid in ("request-response", "anonymous-relay"):
        expected = [[r, r.upper()] for r in REQUESTS]
        check(out["answers"] == expected, f"client.js got {out['answers']}")
        if sid == "anonymous-relay":
            check(
                out["unknown"] == "rejected:amqp:not-found",
                f"a message to no node got {out['unknown']!r}, not rejected(amqp:not-found)",
            )
    elif sid == "drain":
        got = out["sequences"]
        check(got == list(range(1, 26)), f"drain.js got {len(got)} of 25 ({got[:3]}...{got[-3:]})")
    elif sid in CONVENTIONS:
        return check_convention(sid, out)
    else:  # pragma: no cover - NA covers the rest
        raise NotApplicable(_NOT_WRITTEN)
    return None


def _fill_na() -> None:
    from . import scenario_ids

    for sid in scenario_ids():
        if sid not in COVERED:
            NA[sid] = _NOT_WRITTEN


_fill_na()
