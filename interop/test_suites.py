"""The suites runner's bookkeeping: JUnit reports read, results recorded, the matrix keeps them."""

from __future__ import annotations

from pathlib import Path

import pytest

from interop.suites import BEGIN, END, SUITES, Outcome, parse_junit, reason_for, record

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.acceptance.a.TestOk" name="test" />
<testcase classname="tests.acceptance.a.TestBad" name="test"><failure message="AssertionError: 1 != 2">tb</failure></testcase>
<testcase classname="tests.acceptance.a.TestBroken" name="test"><error message="boom">tb</error></testcase>
<testcase classname="tests.acceptance.a.TestSkip" name="test"><skipped message="kqueue" /></testcase>
</testsuite></testsuites>"""


def test_parse_junit_counts_and_lists_failures(tmp_path: Path) -> None:
    path = tmp_path / "report.xml"
    path.write_text(REPORT)
    o = parse_junit(path)
    assert (o.passed, o.failed, o.errors, o.skipped) == (1, 1, 1, 1)
    assert o.failures == [
        ("tests.acceptance.a.TestBad::test", "AssertionError: 1 != 2"),
        ("tests.acceptance.a.TestBroken::test", "boom"),
    ]


def test_record_replaces_its_own_section_only(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Interop matrix results\n\n| table |\n")
    suite = SUITES["pika"]
    record(path, suite, Outcome(passed=3, failures=[("x::test", "why")], failed=1), {})
    first = path.read_text()
    assert first.startswith("# Interop matrix results\n\n| table |\n")
    assert "| amqp10 broker (this checkout) | 3 | 1 | 0 | 0 | |" in first and "- `x::test`: why" in first
    record(path, suite, Outcome(passed=4), {"x": "known"})
    second = path.read_text()
    assert second.count(BEGIN) == 1 and second.count(END) == 1
    assert "| 4 | 0 | 0 | 0 |" in second and "x::test" not in second


def test_a_run_at_workers_2_is_recorded_next_to_the_one_at_workers_1(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    suite = SUITES["pika"]
    record(path, suite, Outcome(passed=3, failures=[("x::one", "why")], failed=1), {})
    record(path, suite, Outcome(passed=2, failures=[("x::two", "why 2")], failed=2), {}, workers=2)
    text = path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1:] == [
        "| amqp10 broker (this checkout) | 3 | 1 | 0 | 0 | |",
        "| amqp10 broker --workers 2 (this checkout) | 2 | 2 | 0 | 0 | |",
        f"| {suite.reference[0]} | 560 | 1 | 0 | 40 | {suite.reference[5]} |",
    ]
    assert "`python -m interop.suites pika --workers 2`" in text
    assert "Failures:\n\n- `x::one`: why\n" in text and "Failures at `--workers 2`:\n\n- `x::two`: why 2\n" in text
    record(path, suite, Outcome(passed=4), {})  # workers = 1 again: the run at 2 stays
    again = path.read_text()
    assert "| amqp10 broker (this checkout) | 4 | 0 | 0 | 0 | |" in again and "x::one" not in again
    assert "| amqp10 broker --workers 2 (this checkout) | 2 | 2 | 0 | 0 | |" in again and "x::two" in again


NODE_REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites>
<testsuite name="Connect"><testsuite name="Connect API">
<testcase name="ok" classname="test"/>
<testcase name="ipv6" classname="test"><failure message="ECONNREFUSED ::1:5672">tb</failure></testcase>
</testsuite></testsuite></testsuites>"""


def test_node_reports_name_tests_by_their_suites(tmp_path: Path) -> None:
    path = tmp_path / "report.xml"
    path.write_text(NODE_REPORT)
    o = parse_junit(path)
    assert (o.passed, o.failed) == (1, 1)
    assert o.failures == [("Connect::Connect API::ipv6", "ECONNREFUSED ::1:5672")]
    assert reason_for("Connect::Connect API::ipv6", "raw", {"ipv6": "known"}) == "known"
    assert reason_for("a.TestX::test", "a | b", {}) == "a \\| b"


def test_the_sdist_suites_take_their_brokers_address() -> None:
    """aio-pika and aiormq run on free ports (and against RabbitMQ); pika and amqplib
    hard-code 127.0.0.1:5672."""
    assert {name for name, s in SUITES.items() if s.addressed} == {"aio-pika", "aiormq"}
    assert all(s.sdist and s.venv for s in SUITES.values() if s.addressed)


def test_the_shim_names_the_broker_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "shims"))
    import suite_broker

    monkeypatch.setenv("SUITE_BROKER_PORT", "41000")
    monkeypatch.setenv("SUITE_BROKER_TLS_PORT", "41001")
    info = suite_broker.DockerClient(suite_broker.check_docker_available()).run("image", ["5672/tcp"])
    assert (info.host, info.ports) == ("127.0.0.1", {"5672/tcp": 41000, "5671/tcp": 41001})
    sys.modules.pop("suite_broker", None)
