"""Parents of string clustering columns found in a sample (``lakecluster.hierarchy``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lakecluster.hierarchy import find_parents, parent_choices
from lakecluster.stream.ssb import CITIES, NATIONS, REGIONS


def _sample(rows: int = 5_000, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(CITIES), rows)
    return pa.table({
        "city": pa.array(CITIES[pick], pa.string()),
        "nation": pa.array(NATIONS[pick // 10], pa.string()),
        "region": pa.array(REGIONS[pick // 10], pa.string()),
        "segment": pa.array(np.array(["A", "B", "C"], dtype=object)[rng.integers(0, 3, rows)], pa.string()),
        "region_id": pa.array(np.unique(REGIONS, return_inverse=True)[1][pick // 10]),
        "amount": pa.array(rng.integers(0, 100, rows)),
    })  # fmt: skip


def test_a_scattered_parent_is_found_and_a_contiguous_one_is_not() -> None:
    found = find_parents(_sample(), ["city"], ["nation", "region", "segment", "amount"])
    # the nation is the city's prefix (the city's order keeps it together); the segment and the
    # amount are not functions of the city; the region is
    assert list(found) == ["city"] and found["city"].parent == "region"
    parent = found["city"]
    assert parent.of(np.asarray(["ALGERIA  3", "UNITED KI1", "VIETNAM  9"], dtype=object)).tolist() == [
        "AFRICA", "EUROPE", "ASIA"]  # fmt: skip
    # a value the sample lacked takes its sorted predecessor's parent
    assert parent.of(np.asarray(["ALGERIA  35"], dtype=object)).tolist() == ["AFRICA"]


def test_of_two_scattered_parents_the_one_with_fewer_values_wins() -> None:
    sample = _sample()
    # a coarser grouping of the regions (scattered as well): 2 values beat the region's 5
    half = pa.array(np.where(np.isin(np.asarray(sample["region"].to_pylist(), dtype=object),
                                     ["AFRICA", "ASIA"]), "EAST", "WEST"), pa.string())  # fmt: skip
    found = find_parents(sample.append_column("half", half), ["city"], ["region", "half"])
    assert found["city"].parent == "half"
    # numbers can be parents too
    assert find_parents(sample, ["city"], ["region_id"])["city"].parent == "region_id"


def test_the_parent_choices_rank_what_find_parents_would_pick_without_the_ones_before() -> None:
    sample = _sample()
    half = pa.array(np.where(np.isin(np.asarray(sample["region"].to_pylist(), dtype=object),
                                     ["AFRICA", "ASIA"]), "EAST", "WEST"), pa.string())  # fmt: skip
    sample = sample.append_column("half", half).append_column("zone", half)  # "zone": a tie with "half"
    candidates = ["nation", "region", "zone", "segment", "half", "region_id"]
    ranked = [p.parent for p in parent_choices(sample, "city", candidates)]
    assert ranked == ["zone", "half", "region", "region_id"]  # fewest values first, then the candidates' order
    for i, parent in enumerate(ranked):  # each is find_parents' pick once the ones before it are left out
        left = [c for c in candidates if c not in ranked[:i]]
        assert find_parents(sample, ["city"], left)["city"].parent == parent
    assert parent_choices(sample, "amount", candidates) == []  # a number keeps its own order


def test_no_parent_without_enough_rows_per_value_nor_for_a_numeric_or_clustering_column() -> None:
    assert find_parents(_sample(rows=500), ["city"], ["region"]) == {}  # two rows per city: not believed
    assert find_parents(_sample(), ["amount"], ["region"]) == {}  # numbers keep their own order
    assert find_parents(_sample(), ["city", "region"], ["region"]) == {}  # cut by its own levels already
    assert find_parents(_sample(), ["missing"], ["region"]) == {}


def test_one_row_with_another_parent_breaks_the_dependency_and_nulls_do_not() -> None:
    sample = _sample()
    regions = sample["region"].to_pylist()
    regions[0] = "EUROPE" if regions[0] != "EUROPE" else "ASIA"
    broken = sample.set_column(sample.column_names.index("region"), "region", pa.array(regions, pa.string()))
    assert find_parents(broken, ["city"], ["region"]) == {}
    regions = sample["region"].to_pylist()
    regions[:50] = [None] * 50
    with_nulls = sample.set_column(sample.column_names.index("region"), "region", pa.array(regions, pa.string()))
    assert find_parents(with_nulls, ["city"], ["region"])["city"].parent == "region"
