"""Pieces of the micro-batch task that run on every record, checked against plain Python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from lakecluster.stream.batch_task import _below_floor

records = st.lists(st.tuples(st.sampled_from(["a", "b", "orders"]), st.integers(0, 3), st.integers(0, 50)),
                   max_size=200)  # fmt: skip
floors = st.dictionaries(st.tuples(st.sampled_from(["a", "b", "absent"]), st.integers(0, 3)), st.integers(0, 50))


@given(records, floors)
def test_below_floor_marks_exactly_the_records_under_their_partitions_floor(
    rows: list[tuple[str, int, int]], floor: dict[tuple[str, int], int]
) -> None:
    source = pa.table({
        "topic": pa.array([t for t, _, _ in rows], pa.string()),
        "partition": pa.array([p for _, p, _ in rows], pa.int32()),
        "offset": pa.array([o for _, _, o in rows], pa.int64()),
    })  # fmt: skip
    expected = [o < floor.get((t, p), -1) for t, p, o in rows]
    assert _below_floor(source, floor).tolist() == expected
    assert _below_floor(source, floor).dtype == np.bool_
