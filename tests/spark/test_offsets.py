"""Per-partition stream offsets without a JVM: Spark's JSON, the read limit's share, the split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp10.spark.offsets import (
    end_offsets,
    from_spark,
    lag,
    plan_ranges,
    share_limit,
    start_specs,
    to_spark,
)
from amqp10.spark.options import OptionError, SourceOptions


def test_spark_offsets_round_trip_and_read_old_checkpoints() -> None:
    assert to_spark("ev", {1: 7, 0: 3}) == {"ev": {"0": 3, "1": 7}}
    assert from_spark({"ev": {"0": 3, "1": 7}}) == {0: 3, 1: 7}
    assert from_spark({"offset": 42}) == {0: 42}  # what the first versions checkpointed


@given(st.dictionaries(st.integers(0, 7), st.integers(0, 1000), min_size=1), st.integers(1, 2000))
def test_the_read_limit_is_shared_in_proportion(available: dict[int, int], most: int) -> None:
    share = share_limit(available, most)
    assert sum(share.values()) == min(most, sum(available.values()))
    assert all(0 <= share[k] <= available[k] for k in available)
    total = sum(available.values())
    if total > most:  # nobody gets more than one offset above its exact share
        assert all(share[k] <= available[k] * most / total + 1 for k in available)


@given(
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 500)), min_size=1, max_size=5),
    st.integers(1, 300),
    st.none() | st.integers(1, 40),
)
def test_ranges_tile_each_partition(
    spans: list[tuple[int, int]], size: int, min_partitions: int | None
) -> None:
    start = {k: min(a, b) for k, (a, b) in enumerate(spans)}
    end = {k: max(a, b) for k, (a, b) in enumerate(spans)}
    n = len(spans)
    ranges = plan_ranges("ev", n, start, end, size, min_partitions)
    for k in range(n):
        mine = [(r.start, r.end) for r in ranges if r.partition == k]
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(start[k], end[k])), "every offset once, in order"
        assert all(0 < b - a <= size for a, b in mine)
        assert all(
            r.address == ("ev" if n == 1 else f"ev/partition/{k}")
            for r in ranges
            if r.partition == k
        )
    offsets = sum(end[k] - start[k] for k in range(n))
    if min_partitions is not None:
        assert len(ranges) >= min(min_partitions, offsets)


def test_min_partitions_splits_in_proportion() -> None:
    ranges = plan_ranges("ev", 2, {0: 0, 1: 0}, {0: 300, 1: 100}, 10_000, 4)
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, 100),
        (0, 100, 200),
        (0, 200, 300),
        (1, 0, 100),
    ]


def test_per_partition_options_against_the_stream() -> None:
    o = SourceOptions.parse(
        {"address": "ev", "startingOffsets": '{"ev":{"1":5}}', "endingOffsets": '{"ev":{"0":4}}'}
    )
    assert start_specs(o, "first", 3) == ["first", 5, "first"]
    infos = [{"first": 0, "next": n, "count": n, "bytes": 0} for n in (10, 20, 30)]
    assert end_offsets(o, infos) == {0: 4, 1: 20, 2: 30}
    with pytest.raises(OptionError, match="names partition 1, but 'ev' has 1"):
        start_specs(o, "first", 1)
    single = SourceOptions.parse({"address": "ev", "startingOffsets": "5"})
    assert start_specs(single, "first", 1) == [5]
    with pytest.raises(OptionError, match="'ev' has 3 partitions, so a single offset is ambiguous"):
        start_specs(single, "first", 3)


def test_lag_from_a_progress() -> None:
    progress = {
        "sources": [
            {
                "description": "amqp10",
                "startOffset": {"ev": {"0": 10, "1": 4}},
                "endOffset": {"ev": {"0": 20, "1": 9}},
                "latestOffset": {"ev": {"0": 50, "1": 9}},
            },
            {"description": "other", "endOffset": "17", "latestOffset": None},
        ]
    }
    assert lag(progress) == {"ev": {"0": 30, "1": 0}}
    as_text = {"sources": [{"endOffset": '{"q": {"0": 1}}', "latestOffset": '{"q": {"0": 3}}'}]}
    assert lag(as_text) == {"q": {"0": 2}}
