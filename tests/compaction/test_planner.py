"""The planner over a table of live files makes exactly the plan it makes over every file, while
turning into Python objects only the files a group could take."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakecluster.compaction.planner import Group, plan_files, plan_live
from lakecluster.config import CompactionConfig
from lakecluster.table.deletion_vectors import descriptors
from lakecluster.table.live_files import DataFile

MB = 1 << 20


@st.composite
def tables(draw: st.DrawFn) -> list[DataFile]:
    files = []
    for part in draw(st.lists(st.sampled_from(["1992", "1993", None]), min_size=1, max_size=3, unique=True)):
        for _ in range(draw(st.integers(0, 12))):  # stream files
            i = len(files)
            size = draw(st.integers(1, 40)) * MB
            files.append(DataFile(f"p{part}/part-{i:05d}.parquet", size, 100, (("year", part),), 0, None))
        for r in range(draw(st.integers(0, 14))):  # runs of compaction, some with small files
            gen = draw(st.integers(1, 7))
            run = f"{len(files):04x}{r:02x}"
            for _ in range(draw(st.integers(1, 4))):
                i = len(files)
                files.append(DataFile(f"p{part}/part-g{gen:02d}-{run}-{i:05d}.parquet",
                                      draw(st.sampled_from([1, 20, 100, 128])) * MB, 1000, (("year", part),), gen,
                                      run))  # fmt: skip
    return files


def live_table(files: list[DataFile]) -> pa.Table:
    return pa.table({
        "path": pa.array([f.path for f in files], pa.string()), "size": pa.array([f.size for f in files], pa.int64()),
        "rows": pa.array([f.rows for f in files], pa.int64()),
        "deletion_vector": descriptors([f.deletion_vector.to_log() if f.deletion_vector else None for f in files]),
        "partition.year": pa.array([f.partition_values.get("year") for f in files], pa.string()),
        "generation": pa.array([f.generation for f in files], pa.int32()),
        "run": pa.array([f.run for f in files], pa.string()),
    })  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(files=tables(), fanout=st.integers(2, 5), max_generation=st.integers(1, 7),
       group_mb=st.sampled_from([128, 300, 1024]), min_input=st.integers(1, 5),
       main_ratio=st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0]))  # fmt: skip
def test_plan_from_live_files_equals_plan_over_every_file(files: list[DataFile], fanout: int, max_generation: int,
                                                          group_mb: int, min_input: int,
                                                          main_ratio: float) -> None:  # fmt: skip
    cfg = CompactionConfig(merge_fanout=fanout, max_generation=max_generation, max_group_bytes=group_mb * MB,
                           min_input_files=min_input, max_groups_per_run=100,
                           main_run_merge_ratio=main_ratio)  # fmt: skip
    expected = plan_files(files, 7, cfg)
    got = plan_live(live_table(files), 7, ["year"], cfg)
    assert got == expected


def test_an_unpartitioned_table_of_settled_runs_plans_only_its_new_files() -> None:
    settled = [DataFile(f"part-g06-{r:04x}-{i:05d}.parquet", 128 * MB, 1000, (), 6, f"{r:04x}")
               for r in range(50) for i in range(20)]  # fmt: skip
    fresh = [DataFile(f"part-{i:05d}.parquet", 4 * MB, 100, (), 0, None) for i in range(8)]
    got = plan_live(live_table([*settled, *fresh]).drop_columns(["partition.year"]), 3, [], CompactionConfig())
    assert [len(g.files) for g in got.groups] == [8]
    assert (got.files_total, got.bytes_total) == (1008, 1000 * 128 * MB + 8 * 4 * MB)


def test_a_group_becomes_the_nearest_count_of_target_size_files() -> None:
    # bench/ssb.py sizes files as input bytes // files: a group a few bytes over 300 files' worth
    # made 301 files (the next count up), one more than the Delta layouts beside it.
    target = 718_473
    files = tuple(DataFile(f"part-{i:05d}.parquet", target + (1 if i < 100 else 0), 100, (), 0, None)
                  for i in range(300))  # fmt: skip
    group = Group((), files, 1, "cluster")
    assert group.expected_files(target) == 300
    assert Group((), files[:1], 1, "cluster").expected_files(10 * target) == 1
    assert Group((), files[:3], 1, "cluster").expected_files(2 * target) == 2  # 1.5 files' worth


def _run(gen: int, run: str, files: int, mb: int, partition: tuple = ()) -> list[DataFile]:
    return [DataFile(f"part-g{gen:02d}-{run}-{i:05d}.parquet", mb * MB, 1000, partition, gen, run)
            for i in range(files)]  # fmt: skip


def test_a_partition_is_merged_into_its_main_run_once_enough_bytes_are_outside_it() -> None:
    main = _run(7, "aa", 10, 100)  # 1,000 MB, settled (beyond max_generation)
    others = _run(1, "bb", 2, 100) + _run(2, "cc", 1, 100)  # 300 MB in two runs
    fresh = [DataFile(f"part-{i:05d}.parquet", 50 * MB, 100, (), 0, None) for i in range(2)]  # 100 MB
    cfg = CompactionConfig(main_run_merge_ratio=0.5, max_group_bytes=4096 * MB, max_groups_per_run=100)
    below = plan_files([*main, *others, *fresh], 1, cfg)  # 400 MB outside: 40 % < 50 %
    assert all(not g.reason.startswith("merge into the main run") for g in below.groups)
    assert all(f not in g.files for g in below.groups for f in main), "the main run stays as it is"
    more = [DataFile(f"part-{i:05d}.parquet", 50 * MB, 100, (), 0, None) for i in range(2, 4)]  # 500 MB: 50 %
    [whole] = plan_files([*main, *others, *fresh, *more], 1, cfg).groups
    assert set(whole.files) == {*main, *others, *fresh, *more} and whole.generation == 8
    assert whole.reason == "merge into the main run: 50% of its bytes outside it, 2 other run(s) and 4 new file(s)"
    # The same table read as live files: the settled main run is planned too, and only then.
    live = live_table([*main, *others, *fresh, *more]).drop_columns(["partition.year"])
    assert plan_live(live, 1, [], cfg).groups == [whole]
    off = plan_files([*main, *others, *fresh, *more], 1, CompactionConfig(max_group_bytes=4096 * MB))
    assert all(f not in g.files for g in off.groups for f in main), "0 (the default) turns it off"


def test_a_partition_too_big_for_one_group_is_not_merged_into_its_main_run() -> None:
    main = _run(7, "aa", 10, 100)
    fresh = [DataFile(f"part-{i:05d}.parquet", 100 * MB, 100, (), 0, None) for i in range(8)]
    cfg = CompactionConfig(main_run_merge_ratio=0.5, max_group_bytes=1024 * MB)  # 1,800 MB would not fit
    groups = plan_files([*main, *fresh], 1, cfg).groups
    assert groups and all(f not in g.files for g in groups for f in main)
    assert plan_live(live_table([*main, *fresh]).drop_columns(["partition.year"]), 1, [], cfg).groups == groups


def test_each_partition_is_merged_into_its_own_main_run() -> None:
    y92, y93 = (("year", "1992"),), (("year", None),)
    files = [*_run(7, "aa", 4, 100, y92), *_run(1, "bb", 3, 100, y92),  # 1992: 300 MB outside 400: due
             *_run(7, "cc", 4, 100, y93), *_run(1, "dd", 1, 100, y93)]  # null year: 100 MB outside 400: not due
    cfg = CompactionConfig(main_run_merge_ratio=0.5, max_group_bytes=4096 * MB, max_groups_per_run=100)
    expected = plan_files(files, 1, cfg)
    merged = [g for g in expected.groups if g.reason.startswith("merge into the main run")]
    assert [set(g.files) for g in merged] == [{f for f in files if f.partition == y92}]
    assert plan_live(live_table(files), 1, ["year"], cfg) == expected


def test_partition_values_that_look_alike_are_told_apart() -> None:
    """Values holding the separator or the text a null once became: each is its own partition."""
    one = (("year", "\x00null"),)
    null = (("year", None),)
    files = [*_run(7, "aa", 4, 100, one), *_run(1, "bb", 3, 100, one), *_run(7, "cc", 10, 100, null),
             *_run(1, "dd", 1, 100, null)]  # fmt: skip
    cfg = CompactionConfig(main_run_merge_ratio=0.5, max_group_bytes=1024 * MB, max_groups_per_run=100)
    expected = plan_files(files, 1, cfg)
    assert [g.partition for g in expected.groups if g.reason.startswith("merge into the main run")] == [one]
    assert plan_live(live_table(files), 1, ["year"], cfg) == expected
    two = [*_run(7, "ee", 4, 100, (("a", "x\x00y"), ("b", "z"))), *_run(1, "ff", 3, 100, (("a", "x\x00y"), ("b", "z"))),
           *_run(7, "gg", 10, 100, (("a", "x"), ("b", "y\x00z")))]  # fmt: skip
    table = pa.table({"path": [f.path for f in two], "size": pa.array([f.size for f in two], pa.int64()),
                      "rows": pa.array([f.rows for f in two], pa.int64()),
                      "deletion_vector": descriptors([None] * len(two)),
                      "partition.a": [f.partition_values["a"] for f in two],
                      "partition.b": [f.partition_values["b"] for f in two],
                      "generation": pa.array([f.generation for f in two], pa.int32()),
                      "run": [f.run for f in two]})  # fmt: skip
    expected = plan_files(two, 1, cfg)
    assert [g.partition for g in expected.groups] == [(("a", "x\x00y"), ("b", "z"))]
    assert plan_live(table, 1, ["a", "b"], cfg) == expected


def test_a_merge_into_the_main_run_ranks_by_the_files_outside_the_main_run() -> None:
    """Ranked by all its files per byte, the merge of a big main run would come after every group of
    new files and wait behind them round after round (``max_groups_per_run``)."""
    due = (("year", "1992"),)
    busy = (("year", "1993"),)
    files = [*_run(7, "aa", 6, 100, due)]
    files += [DataFile(f"p92/part-{i:05d}.parquet", 10 * MB, 100, due, 0, None) for i in range(30)]  # 300 MB
    files += [DataFile(f"p93/part-{i:05d}.parquet", 20 * MB, 100, busy, 0, None) for i in range(10)]
    cfg = CompactionConfig(main_run_merge_ratio=0.5, max_group_bytes=4096 * MB, max_groups_per_run=1)
    [first] = plan_files(files, 1, cfg).groups  # 30 files per 300 MB outside beats 10 per 200 MB
    assert first.partition == due and first.reason.startswith("merge into the main run")


def test_settled_files_whose_deletion_vectors_pass_the_share_are_purged_first() -> None:
    """Large files of a settled run are left alone, until their deletion vectors delete
    ``purge_deleted_share`` of their rows: then they are rewritten, in front, keeping their generation."""
    from lakecluster.table.deletion_vectors import DeletionVector

    def vector(n: int) -> DeletionVector:
        return DeletionVector("u", f"{n:020d}", 1, 40, n)

    run = [DataFile(f"part-g03-aa-{i:05d}.parquet", 128 * MB, 1000 - n, (), 3, "aa", vector(n) if n else None)
           for i, n in enumerate([0, 20, 60, 100])]  # 0 %, 2 %, 6 % and 10 % of 1,000 rows deleted
    cfg = replace(CompactionConfig(), purge_deleted_share=0.05)
    plan = plan_live(live_table(run).drop_columns(["partition.year"]), 1, [], cfg)
    assert [sorted(f.path for f in g.files) for g in plan.groups] == [[run[2].path, run[3].path]]
    assert plan.groups[0].generation == 3 and "purge" in plan.groups[0].reason
    assert plan_live(live_table(run).drop_columns(["partition.year"]), 1, [],
                     replace(cfg, purge_deletion_vectors=False)).groups == []  # fmt: skip
    assert plan_live(live_table(run).drop_columns(["partition.year"]), 1, [],
                     replace(cfg, purge_deleted_share=0.2)).groups == []  # fmt: skip
