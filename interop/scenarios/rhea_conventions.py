"""What rhea's scripts for #14's conventions must have seen (``interop/rhea/scenarios.js``).

Each script prints what it saw as JSON; :func:`check_convention` judges it the
way :mod:`.ours_conventions` judges our client's run: the same messages, the
same expectations, and n/a when the peer's answers show it lacks the feature.
"""

from __future__ import annotations

from typing import Any

from . import CONVENTIONS, FILTER_ROWS, NotApplicable, check

__all__ = ["CONVENTIONS", "check_convention"]


def _attach_answer(out: dict[str, Any]) -> str | None:
    rcv, snd = out["receiver"], out["sender"]
    check(
        rcv["source"] and rcv["source"].get("address"),
        f"a receiver's answer had source {rcv['source']}",
    )
    check(
        rcv["target"] and str(rcv["target"].get("address", "")).endswith(".mine"),
        f"a receiver's answer did not echo its target: {rcv['target']}",
    )
    check(
        snd["target"] and snd["target"].get("address"),
        f"a sender's answer had target {snd['target']}",
    )
    check(
        snd["source"] and str(snd["source"].get("address", "")).endswith(".from"),
        f"a sender's answer did not echo its source: {snd['source']}",
    )
    notes = []
    if not {"queue", "topic"} & set(map(str, _list(rcv["source"].get("capabilities")))):
        notes.append("no queue/topic capability on its source")
    missing = {"ANONYMOUS-RELAY", "DELAYED_DELIVERY", "SHARED-SUBS"} - set(out["offered"])
    if missing:
        notes.append(f"its open does not offer {', '.join(sorted(missing))}")
    return "; ".join(notes) or None


def _list(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def _selector(out: dict[str, Any]) -> None:
    if "jms-selector" not in out["filter"]:
        raise NotApplicable("the peer did not apply the selector (not in its attach answer)")
    check(out["green"] == [f"green {i}" for i in (1, 3, 5, 7)], f"the selector got {out['green']}")
    check(out["red"] == [f"red {i}" for i in (2, 4, 6, 8)], f"the others got {out['red']}")


def _filter_expressions(out: dict[str, Any]) -> None:
    for (key, descriptor, _code, _value, want), echoed, got in zip(
        FILTER_ROWS.filters, out["filters"], [*out["got"], None], strict=False
    ):
        if key not in echoed:
            raise NotApplicable(f"the peer did not apply {descriptor} (not in its answer)")
        check(got == want, f"the {descriptor} consumer got {got}")
    check(out["rest"] == FILTER_ROWS.rest, f"the others got {out['rest']}")


def _no_local(out: dict[str, Any]) -> None:
    if "no-local" not in out["filter"]:
        raise NotApplicable("the peer did not apply the no-local filter (not in its answer)")
    check(
        out["plain"] == ["own", "other"],
        f"a plain subscriber on the same connection got {out['plain']}",
    )
    check(out["sub"] == ["other"], f"the no-local subscriber got {out['sub']}")


def _topic_wildcard(out: dict[str, Any]) -> None:
    if "topic" not in out["caps"]:
        raise NotApplicable("the peer's answer to topic://... carries no 'topic' capability")
    one, two, star, deep = out["got"]
    check(one == ["n"] and two == ["n"], f"the two subscribers got {one} and {two}")
    check(star == ["n", "o"], f"the '*' subscriber got {star}")
    check(deep == ["n", "x", "o"], f"the '#' subscriber got {deep}")


def _durable(out: dict[str, Any]) -> None:
    if out["durable"] != 2:
        raise NotApplicable("the peer's answer to a durable subscription is not durable")
    check(out["kept"] == ["d1", "d2", "d3"], f"the re-attached subscription had {out['kept']}")
    check(
        out["after"] == [],
        f"after unsubscribing, a new subscription of that name had {out['after']}",
    )


def _shared(out: dict[str, Any]) -> None:
    if "shared" not in out["caps"]:
        raise NotApplicable("the peer's answer carries no 'shared' capability")
    a, b = out["a"], out["b"]
    check(len(a) == 3 and len(b) == 3, f"the two consumers got {a} and {b}")
    check(sorted(a + b) == [f"p{i}" for i in range(6)], f"the two consumers got {a} and {b}")


def _scheduled(out: dict[str, Any]) -> None:
    if "DELAYED_DELIVERY" not in out["offered"]:
        raise NotApplicable("the peer does not offer DELAYED_DELIVERY")
    check(out["order"] == ["now", "later"], f"the deliveries came as {out['order']}")
    check(out["early_ms"] <= 50, f"'later' came {out['early_ms']} ms before its time")


def _groups(out: dict[str, Any]) -> None:
    got = out["got"]
    for g in "ABC":
        owners = [i for i, bodies in enumerate(got) if any(b.startswith(g) for b in bodies)]
        check(len(owners) == 1, f"group {g} went to both consumers: {got}")
        seq = [b for b in got[owners[0]] if b.startswith(g)]
        check(seq == [f"{g}1", f"{g}2", f"{g}3"], f"group {g} arrived as {seq}")


def check_convention(sid: str, out: dict[str, Any]) -> str | None:
    if sid == "attach-answer":
        return _attach_answer(out)
    {
        "selector": _selector,
        "filter-expressions": _filter_expressions,
        "no-local": _no_local,
        "topic-wildcard": _topic_wildcard,
        "durable-subscription": _durable,
        "shared-subscription": _shared,
        "scheduled-delivery": _scheduled,
        "message-groups": _groups,
    }[sid](out)
    return None
