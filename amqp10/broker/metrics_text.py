"""Writing ``/metrics`` cheaply: big labelled families as rows, label text kept between scrapes.

``prometheus_client`` keeps one :class:`~prometheus_client.samples.Sample` (with a dict
of labels) per sample, and its ``generate_latest`` checks every label name of every
sample against a regular expression, escapes every label value and formats every
value, each time. With a series per node that is 12 samples a queue: about 10 ms of
CPU a scrape for 100 queues, a second for 10,000. Here:

- :class:`LabelledFamily` is a ``prometheus_client`` :class:`Metric` that keeps its
  samples as rows (a tuple of label values, a value), and several families may share
  one list of label tuples (the per-node families all share the node list);
- :class:`TextWriter` writes such a family with the library's own functions, but
  escapes each label name once per family, writes each label set's text once and
  keeps it for the next scrape (a node's labels do not change), and formats each
  distinct integer value once. Every other metric (the process collector's, the
  histogram, the unlabelled gauges) goes through ``generate_latest``.

The text is exactly what ``generate_latest`` writes for the same families (the tests
compare the two byte for byte, so a ``prometheus_client`` that escapes otherwise fails
them): this only skips work whose result is already known. The label-value escaping
is the library's ``openmetrics._escape`` (private; ``prometheus_client`` 0.26).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

_float_text = cast(Callable[[float], str], floatToGoString)  # the library's, untyped

__all__ = ["LabelKey", "LabelledFamily", "TextWriter", "library_text", "samples_in"]

LabelKey = tuple[str, ...]
"""One sample's label values, in the order of its family's label names."""


class LabelledFamily(Metric):
    """A counter or gauge family whose samples are kept as rows, not Sample objects.

    ``keys`` (one tuple of label values a sample, in ``labelnames``' order) may be a
    list shared with other families over the same things; ``values`` is parallel to it.
    ``samples`` builds the library's Sample objects when something asks for them.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        typ: str,
        labelnames: Sequence[str],
        keys: list[LabelKey] | None = None,
        values: list[float] | None = None,
    ) -> None:
        if typ not in ("counter", "gauge"):
            raise ValueError(f"a labelled family is a counter or a gauge, not {typ!r}")
        if typ == "counter":
            name = name.removesuffix("_total")  # as CounterMetricFamily: the samples add it
        super().__init__(name, documentation, typ)
        self.labelnames: LabelKey = tuple(labelnames)
        if len(set(self.labelnames)) != len(self.labelnames):
            raise ValueError(f"label names repeated: {self.labelnames}")
        self.keys: list[LabelKey] = [] if keys is None else keys
        self.values: list[float] = [] if values is None else values
        if len(self.keys) != len(self.values):
            raise ValueError(f"{len(self.keys)} label sets for {len(self.values)} values")
        self.sample_name = f"{name}_total" if typ == "counter" else name

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """Add a sample (``labels``: its label values, in ``labelnames``' order)."""
        key = tuple(labels)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{len(key)} label values for labels {self.labelnames}")
        self.keys.append(key)
        self.values.append(value)

    @property
    def samples(self) -> list[Sample]:
        names = self.labelnames
        name = self.sample_name
        return [Sample(name, dict(zip(names, k)), v) for k, v in zip(self.keys, self.values)]

    @samples.setter
    def samples(self, samples: list[Sample]) -> None:
        if samples:  # Metric.__init__ sets an empty list
            raise TypeError("a LabelledFamily's samples are its keys and values")


class _Collected:
    """Metrics already collected, in the shape ``generate_latest`` reads (``collect()``)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def samples_in(metrics: Iterable[Metric]) -> int:
    """How many samples ``metrics`` hold (without building a LabelledFamily's)."""
    return sum(len(m.keys) if isinstance(m, LabelledFamily) else len(m.samples) for m in metrics)


def library_text(metrics: list[Metric]) -> bytes:
    """What ``prometheus_client.generate_latest`` writes for ``metrics``."""
    return generate_latest(cast(CollectorRegistry, _Collected(metrics)))


class TextWriter:
    """Writes the exposition text of collected metrics; keeps label text between scrapes.

    One writer serves one endpoint; scrapes that overlap take turns (a lock), so the
    label text kept is only ever touched by one of them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._labels: dict[LabelKey, dict[LabelKey, str]] = {}
        """Per tuple of label names: each label set's text (``{a="x",b="y"}``) of the last scrape."""
        self._heads: dict[tuple[str, str, str], str] = {}
        """Each labelled family's ``# HELP`` and ``# TYPE`` lines, by name, help and type."""
        self.label_texts_written = 0
        """How many label sets' text were written (not found from the last scrape): a count for tests."""

    @property
    def label_texts_kept(self) -> int:
        """How many label sets' text are kept for the next scrape (those of the last one)."""
        return sum(len(texts) for texts in self._labels.values())

    def write(self, metrics: Iterable[Metric]) -> bytes:
        """The text ``generate_latest`` would write for ``metrics``, in their order."""
        with self._lock:
            old = self._labels
            new: dict[LabelKey, dict[LabelKey, str]] = {}
            shared: dict[int, list[str]] = {}  # id(keys list) -> its label texts, this scrape
            parts: list[str] = []  # one join, one encode: the text of 10,000 nodes is 9 MB
            plain: list[Metric] = []
            for metric in metrics:
                if not isinstance(metric, LabelledFamily):
                    plain.append(metric)
                    continue
                if plain:
                    parts.append(library_text(plain).decode())
                    plain = []
                texts = shared.get(id(metric.keys))
                if texts is None:
                    texts = shared[id(metric.keys)] = self._label_texts(metric, old, new)
                self._add_family(metric, texts, parts)
            if plain:
                parts.append(library_text(plain).decode())
            self._labels = new  # label sets not seen this time (deleted nodes) are dropped
            return "".join(parts).encode()

    def _label_texts(
        self,
        family: LabelledFamily,
        old: dict[LabelKey, dict[LabelKey, str]],
        new: dict[LabelKey, dict[LabelKey, str]],
    ) -> list[str]:
        names = family.labelnames
        if not names:
            return [""] * len(family.keys)
        kept = old.get(names, {})
        current = new.setdefault(names, {})
        # the label names checked and escaped once for the family, in the library's order
        order = sorted(range(len(names)), key=names.__getitem__)
        escaped = [openmetrics.escape_label_name(names[i], openmetrics.UNDERSCORES) for i in order]
        texts: list[str] = []
        for key in family.keys:
            text = current.get(key)
            if text is None:
                text = kept.get(key)
                if text is None:
                    self.label_texts_written += 1
                    text = "{%s}" % ",".join(
                        f'{name}="{_escape_value(key[i])}"' for name, i in zip(escaped, order)
                    )
                current[key] = text
            texts.append(text)
        return texts

    def _add_family(self, family: LabelledFamily, texts: list[str], parts: list[str]) -> None:
        what = (family.name, family.documentation, family.type)
        head = self._heads.get(what)
        if head is None:
            head = self._heads[what] = library_text([Metric(*what)]).decode()
        parts.append(head)
        name = openmetrics.escape_metric_name(family.sample_name, openmetrics.UNDERSCORES)
        parts += [f"{name}{t} {v}\n" for t, v in zip(texts, _value_texts(family.values))]


def _value_texts(values: list[float]) -> list[str]:
    """Each value as ``generate_latest`` writes it; integers (the common case: counts,
    bytes) are formatted once per distinct value."""
    if set(map(type, values)) <= {int}:  # not floats: 0 == -0.0, yet they are written apart
        formatted = {v: _float_text(v) for v in set(values)}
        return [formatted[v] for v in values]
    return [_float_text(v) for v in values]


def _escape_value(value: str) -> str:
    """A label value escaped as ``generate_latest`` escapes it (the library's own function,
    private: the tests compare the whole text with ``generate_latest``'s)."""
    return openmetrics._escape(value, openmetrics.ALLOWUTF8, openmetrics._is_legacy_labelname_rune)
