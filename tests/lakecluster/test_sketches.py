"""Boundary sketches: accuracy within the KLL bound, exact strings, merging, ranks, the store.

The string summary's own properties (error bound, prefixes, old formats, cost) are in
test_string_summary.py.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

from lakecluster.schema import ColumnSpec
from lakecluster.sketches import BoundarySketches, ColumnSketch
from lakecluster.table import LakeTable, load_or_empty


def _rank_of(sorted_values: np.ndarray, q: float) -> float:
    """Normalized rank of a value in the exact data (midpoint of its run of equal values)."""
    lo = np.searchsorted(sorted_values, q, side="left")
    hi = np.searchsorted(sorted_values, q, side="right")
    return float((lo + hi) / 2 / len(sorted_values))


def test_numeric_quantiles_within_kll_error_bound_after_merging_parts() -> None:
    rng = np.random.default_rng(5)
    data = np.concatenate([rng.lognormal(3, 1, 150_000), rng.integers(0, 100, 50_000).astype(float)])
    rng.shuffle(data)
    merged = ColumnSketch("numeric", k=200)
    for part in np.array_split(data, 8):  # as executors would, one sketch per task
        s = ColumnSketch("numeric", k=200)
        s.update(pa.array(part))
        merged.merge(ColumnSketch.from_bytes(s.to_bytes()))
    assert merged.n == len(data)
    eps = merged.normalized_rank_error()
    assert 0 < eps < 0.02
    exact = np.sort(data)
    fractions = np.linspace(0.01, 0.99, 99)
    for f, q in zip(fractions, merged.quantiles(list(fractions)), strict=True):
        lo = np.searchsorted(exact, q, side="left") / len(exact)
        hi = np.searchsorted(exact, q, side="right") / len(exact)
        # the true rank of the returned value must be within eps of the asked-for rank
        assert lo - eps <= f <= hi + eps, (f, q, lo, hi, eps)


def test_high_cardinality_strings_compact_and_stay_within_their_bound() -> None:
    values = np.array([f"https://example.com/item/{i:07d}" for i in range(60_000)], dtype=object)
    np.random.default_rng(1).shuffle(values)
    sketch = ColumnSketch("string", k=200, exact_limit=1000)
    for part in np.array_split(values, 4):
        sketch.update(pa.array(part.tolist()))
    assert not sketch.is_exact and sketch.entries <= 1000 and sketch.n == len(values)
    eps = sketch.normalized_rank_error()
    assert 0 < eps < 2 / 1000
    exact = np.sort(values.astype(str))
    for f in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        (q,) = sketch.quantiles([f])
        lo = np.searchsorted(exact, q, side="left") / len(exact)
        hi = np.searchsorted(exact, q, side="right") / len(exact)
        assert lo - eps <= f <= hi + eps, (f, q, lo, hi, eps)


def test_low_cardinality_strings_are_exact_and_not_cut_at_eight_bytes() -> None:
    # Brands share an 8-byte prefix; cutting there would merge them into one boundary.
    brands = [f"MFGR#{i:04d}" for i in range(1000)]
    sketch = ColumnSketch("string")
    sketch.update(pa.array(brands * 3 + [None, None, ""]))
    assert sketch.is_exact and sketch.nulls == 2 and sketch.n == 3001
    b = BoundarySketches({"p_brand": sketch}).boundaries("p_brand", 100)
    assert len(b) == 100 and len(set(b.edges.tolist())) == 100
    ranks = b.ranks(pa.array(["", "MFGR#0000", "MFGR#0999", None, "zzz"]))
    assert ranks.tolist() == [0, 0, 99, 0, 99]


def test_ranks_are_dense_and_nan_ranks_last() -> None:
    sketch = ColumnSketch("numeric")
    sketch.update(pa.array([1.0, 1.0, 1.0, 2.0, float("nan"), None]))
    assert (sketch.n, sketch.nans, sketch.nulls) == (4, 1, 1)
    b = BoundarySketches({"x": sketch}).boundaries("x", 1024)
    assert b.edges.tolist() == [1.0, 2.0]  # equal quantiles collapse: ranks stay dense
    assert b.ranks(pa.array([0.5, 1.0, 1.5, 2.0, 99.0, float("nan"), None])).tolist() == [0, 0, 0, 1, 1, 1, 0]


def test_dates_and_timestamps_rank_in_time_order() -> None:
    import datetime as dt

    days = pa.array([dt.date(2024, 1, d) for d in range(1, 29)])
    sketch = ColumnSketch("numeric")
    sketch.update(days)
    b = BoundarySketches({"d": sketch}).boundaries("d", 4)
    ranks = b.ranks(days).tolist()
    assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[-1] == len(b) - 1


def test_store_writes_atomically_and_latest_wins(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cols = (ColumnSpec("city", "string"), ColumnSpec("qty", "int"))
    store = LakeTable.at(str(tmp_path)).sketches()
    state = load_or_empty(store, cols, k=64)
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    writing = threading.Event()
    writing.set()

    def read_while_writing() -> None:
        reader = LakeTable.at(str(tmp_path)).sketches()
        while writing.is_set():
            try:
                got = reader.latest()
            except BaseException as e:  # a half-written file would land here
                errors.append(e)
                return
            if got is not None:
                seen.append((got.delta_version, got.sketches["qty"].n))

    thread = threading.Thread(target=read_while_writing)
    thread.start()
    try:
        for version in range(1, 201):
            state.merge({"city": _sketch_of("string", [f"c{version}"]), "qty": _sketch_of("numeric", [version])})
            state.delta_version, state.stream_batch_id = version, version - 1
            store.write(state)
    finally:
        writing.clear()
        thread.join()
    assert not errors, errors
    assert len({v for v, _ in seen}) >= 2, "the reader should have seen the writer's progress"
    assert all(n == v for v, n in seen), "a read saw a version whose content is not that version's"

    state.merge({"city": _sketch_of("string", ["c999"]), "qty": _sketch_of("numeric", [999])})
    state.delta_version, state.stream_batch_id = 201, 200
    store.write(state, retain=2)
    files = sorted(p.name for p in (tmp_path / "_lakecluster" / "sketches").iterdir())
    assert len(files) == 2 and not any(f.startswith(".tmp") for f in files)
    latest = store.latest()
    assert latest is not None and latest.delta_version == 201 and latest.stream_batch_id == 200
    assert latest.sketches["qty"].n == 201 and latest.sketches["city"].quantiles([0.999]) == ["c999"]


def _sketch_of(kind: str, values: list) -> ColumnSketch:  # type: ignore[type-arg]
    s = ColumnSketch(kind)  # type: ignore[arg-type]
    s.update(pa.array(values))
    return s


def test_merging_kinds_that_differ_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot merge"):
        ColumnSketch("numeric").merge(ColumnSketch("string"))
