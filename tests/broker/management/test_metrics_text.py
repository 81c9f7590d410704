"""The ``/metrics`` writer: the same text as ``prometheus_client.generate_latest``, byte for
byte, for any label names, label values and values; and a scrape's label work is bounded
by the label sets that are new, not by the number of samples."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.parser import text_string_to_metric_families

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.metrics import (
    INLINE_SAMPLES,
    BrokerCollector,
    MetricsSources,
    exposition,
    metrics_registry,
)
from amqp10.broker.metrics_text import (
    LabelKey,
    LabelledFamily,
    TextWriter,
    library_text,
    samples_in,
)

label_names = st.lists(
    st.text(alphabet="abz_AZ09.-é:", max_size=4), unique=True, max_size=3
)
values = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 0.0, -0.0, 1, 1.0]),
)


@st.composite
def families(draw: st.DrawFn) -> list[Metric]:
    """Labelled families (some sharing their list of label tuples) among ordinary ones."""
    out: list[Metric] = []
    shared: dict[LabelKey, list[LabelKey]] = {}
    for i in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            out.append(GaugeMetricFamily(f"plain_{i}", "a gauge\\ with \n text", value=draw(values)))
            continue
        names = tuple(draw(label_names))
        if names in shared and draw(st.booleans()):
            keys = shared[names]
        else:
            keys = draw(st.lists(st.tuples(*[st.text(max_size=6)] * len(names)), max_size=6))
            shared[names] = keys
        typ = draw(st.sampled_from(["counter", "gauge"]))
        family_values = draw(st.lists(values, min_size=len(keys), max_size=len(keys)))
        out.append(LabelledFamily(f"fam_{i}", 'doc "quoted"', typ, names, keys, family_values))
    return out


@settings(max_examples=300, deadline=None)
@given(families(), families())
def test_the_text_is_generate_latests(first: list[Metric], second: list[Metric]) -> None:
    writer = TextWriter()
    assert writer.write(first) == library_text(first)
    assert writer.write(first) == library_text(first)  # the label text kept from the last
    assert writer.write(second) == library_text(second)  # other label sets


def test_samples_are_the_librarys() -> None:
    ours = LabelledFamily("things_total", "Things", "counter", ["b", "a"])
    ours.add_metric(["x", 'y"\n'], 3)
    theirs = CounterMetricFamily("things", "Things", labels=["b", "a"])
    theirs.add_metric(["x", 'y"\n'], 3)
    assert ours.samples == theirs.samples
    assert library_text([ours]) == library_text([theirs])
    assert ours.name == "things"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("x", "X", "histogram", ["a"]), "a counter or a gauge"),
        (("x", "X", "gauge", ["a", "a"]), "label names repeated"),
        (("x", "X", "gauge", ["a"], [("v",)], []), "1 label sets for 0 values"),
    ],
)
def test_bad_families(args: tuple[object, ...], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        LabelledFamily(*args)  # type: ignore[arg-type]
    family = LabelledFamily("x", "X", "gauge", ["a", "b"])
    with pytest.raises(ValueError, match="1 label values for labels"):
        family.add_metric(["only one"], 1)


def make_broker(queues: int) -> Broker:
    broker = Broker(BrokerConfig())
    for i in range(queues):
        broker.default.create_node(f"q-{i}", "queue")
    broker.default.create_node("s", "stream")  # no unacked series: a second list of label sets
    return broker


def collector(broker: Broker) -> BrokerCollector:
    return BrokerCollector(MetricsSources.of_core(broker))


def label_name_checks(monkeypatch: pytest.MonkeyPatch, broker: Broker) -> int:
    """How often one scrape of ``broker`` checks a label name (the library's regex)."""
    calls = 0
    check = openmetrics._is_valid_legacy_labelname

    def counting(name: str) -> bool:
        nonlocal calls
        calls += 1
        return check(name)

    writer = TextWriter()
    registry = metrics_registry(collector(broker).sources)
    with monkeypatch.context() as m:
        m.setattr(openmetrics, "_is_valid_legacy_labelname", counting)
        text = writer.write(list(registry.collect()))
    parsed = {f.name: f for f in text_string_to_metric_families(text.decode())}
    assert len(parsed["amqp10_node_messages"].samples) == len(broker.default.queues())
    return calls


def test_label_name_checks_do_not_grow_with_the_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    few = label_name_checks(monkeypatch, make_broker(3))
    many = label_name_checks(monkeypatch, make_broker(300))
    assert few == many
    # the node families' 3 label names once for each of their 2 lists of label sets (all
    # nodes; the queues, for unacked), and the frame counters' (the library's: 2 families
    # of 2 samples of 1 label): not once a label of each sample, 3,600 times for 300 nodes
    assert many == 2 * 3 + 2 * 2 * 1


def test_label_text_is_written_once_a_label_set() -> None:
    broker = make_broker(100)
    source = collector(broker)
    writer = TextWriter()
    writer.write(list(source.collect()))
    assert writer.label_texts_written == 101  # each node's once (12 families, 2 lists of them)
    assert writer.label_texts_kept == 101
    writer.write(list(source.collect()))
    assert writer.label_texts_written == 101  # nothing new: the last scrape's text
    for i in range(5):
        broker.default.create_node(f"new-{i}", "queue")
    for i in range(10):
        broker.default.delete_node(f"q-{i}")
    writer.write(list(source.collect()))
    assert writer.label_texts_written == 101 + 5  # the new queues only
    assert writer.label_texts_kept == 96  # the deleted ones are not kept


@pytest.mark.parametrize("queues", [10, INLINE_SAMPLES // 12 + 1])
def test_small_and_big_scrapes(queues: int) -> None:
    """Written in the event loop or, past INLINE_SAMPLES, in a worker thread: the same text."""
    broker = make_broker(queues)
    registry = metrics_registry(MetricsSources.of_core(broker))
    collected = list(registry.collect())
    assert (samples_in(collected) >= INLINE_SAMPLES) == (queues > 10)
    text = anyio.run(exposition, registry, TextWriter()).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    depth = parsed["amqp10_node_messages"].samples
    assert sorted(s.labels["node"] for s in depth) == sorted([*(f"q-{i}" for i in range(queues)), "s"])
