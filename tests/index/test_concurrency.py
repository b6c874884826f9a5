"""Index syncs, prunes and table commits at the same time, in real processes and interleaved in one.

The index under test is kept in sync with a small Delta table written by delta-rs: the stream is
``write_deltalake`` appends, the compactor ``DeltaTable.optimize.compact`` (files removed and their
rows added back in new files, ``dataChange=false``). The oracle of a prune is the Delta log itself:
the stats of ``DeltaTable(path, version=v).get_add_actions`` at the version the prune reports,
encoded and evaluated with the same predicate semantics.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster import predicate as P
from lakecluster.errors import StatsIndexError
from lakecluster.index import store as store_module
from lakecluster.index.prune import evaluate, prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.stats import add_action_parts, empty_rows
from lakecluster.index.store import IndexStore, Manifest
from lakecluster.index.sync import rebuild, store_for, sync
from lakecluster.storage import delta_options
from lakecluster.table import LakeTable
from tests.index.oracle import split_rows

SCHEMA = pa.schema({"id": pa.int64(), "city": pa.string(), "year": pa.int32(), "x": pa.float64()})
PARTITION_BY = ["year"]
YEARS = (1992, 1993, 1994)
CITIES = np.array(["LONDON", "LONDONDERRY", "LYON", "PARIS", "PARMA"], dtype=object)
PREDICATES = (
    "id >= 300 AND id < 700",
    "city = 'LYON'",
    "year = 1993 OR id < 100",
    "city LIKE 'PAR%' AND year != 1992",
    "id IN (5, 1234, 2500) OR x > 2.5",
    "city IS NULL",
)
RUN_S = 25.0  # how long the processes race; with start-up and checks the test takes ~40 s
STRESS_GRACE_S = 6.0  # short enough that files are collected during the run, long above any sync's duration


# ---------------------------------------------------------------------------------------------
# The table


def batch(start: int, n: int, seed: int) -> pa.Table:
    """Rows ``start..start+n-1`` over three partitions; two cities per batch, so city predicates prune."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    x = rng.normal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    cities = rng.choice(CITIES, 2, replace=False)[rng.integers(0, 2, n)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(cities, pa.string(), mask=rng.random(n) < 0.05),
            "year": pa.array([YEARS[i % 3] for i in (ids // 7)], pa.int32()),
            "x": pa.array(x),
        },
        schema=SCHEMA,
    )


def append(table: Path, data: pa.Table) -> None:
    """A stream commit: one new file per partition."""
    write_deltalake(str(table), data, mode="append", partition_by=PARTITION_BY)


def compact(table: Path, year: int) -> int:
    """A compactor commit: the partition's files replaced by one (dataChange=false); files removed."""
    metrics = DeltaTable(str(table)).optimize.compact(partition_filters=[("year", "=", str(year))])
    return int(metrics["numFilesRemoved"])


def new_table(tmp_path: Path, commits: int = 6, **spec_changes: Any) -> tuple[Path, IndexSpec]:
    """A table of ``commits`` commits and its index, built by a first sync. With the default, the
    index's base is big enough that a later commit's segment is not merged (``store.merge_plan``)."""
    table = tmp_path / "t"
    for i in range(commits):
        append(table, batch(i * 100_000, 100, seed=i))
    spec = replace(IndexSpec.for_location(LakeTable.at(str(table))), **spec_changes)
    assert sync(spec).mode == "rebuild"
    return table, spec


def live_files(table: Path | str, version: int, storage_options: dict[str, str] | None = None) -> set[str]:
    snapshot = DeltaTable(str(table), version=version, storage_options=storage_options)
    return set(pa.table(snapshot.get_add_actions(flatten=True))["path"].to_pylist())


def problems(spec: IndexSpec, table: Path | str) -> list[str]:
    """What is wrong with the index now: files its manifest names that are gone, rows that are not
    exactly the live files of the table version it reports, or a failure to read it. The table and
    its index may be local or on S3 (the storage settings of ``spec.table``)."""
    store = store_for(spec)
    try:
        manifest = store.manifest()
        if manifest is None:
            return ["no manifest"]
        found = store.fs.get_file_info([f"{store.root}/{f}" for f in manifest.files])
        missing = [f for f, info in zip(manifest.files, found, strict=True) if info.type == pafs.FileType.NotFound]
        if missing:
            return [f"version {manifest.delta_version}: manifest names missing file(s) {missing}"]
        indexed = set(store.read_all()["file"].to_pylist())  # the manifest just read: the store holds it
    except (StatsIndexError, OSError) as e:
        return [f"index unreadable: {e!r}"]
    expected = live_files(table, manifest.delta_version, delta_options(str(table), spec.table.storage))
    if indexed != expected:
        return [f"version {manifest.delta_version}: index rows of {len(indexed)} files, log has {len(expected)}; "
                f"extra {sorted(indexed - expected)[:3]}, lacking {sorted(expected - indexed)[:3]}"]  # fmt: skip
    return []


def assert_sound_and_current(spec: IndexSpec, table: Path) -> Manifest:
    """The index is intact, at the table's latest version, and equal to a rebuild from scratch."""
    assert problems(spec, table) == []
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.delta_version == DeltaTable(str(table)).version()
    other = replace(spec, index_path=spec.index_path + "-rebuilt")
    rebuild(other)
    assert store_for(spec).read_all().equals(store_for(other).read_all())
    return manifest


class LogOracle:
    """Which files the Delta log's own stats at a version keep for a predicate, evaluated with the
    index's predicate semantics; each version's stats are encoded once."""

    def __init__(self, table: Path, manifest: Manifest) -> None:
        self.table = table
        self.columns = manifest.columns()
        self.indexed = manifest.indexed_columns()
        self.partition_by = manifest.partition_by
        self._versions: dict[int, tuple[pa.Table, dict[str, pa.Table]]] = {}

    def _stats(self, version: int) -> tuple[pa.Table, dict[str, pa.Table]]:
        if version not in self._versions:
            actions = pa.table(DeltaTable(str(self.table), version=version).get_add_actions(flatten=True))
            rows = (pa.concat_tables(list(add_action_parts(actions, self.indexed, self.partition_by, 0)))
                    if actions.num_rows else empty_rows())
            self._versions[version] = split_rows(rows)
        return self._versions[version]

    def files(self, version: int) -> set[str]:
        return set(self._stats(version)[0]["file"].to_pylist())

    def keep(self, version: int, where: str) -> set[str]:
        files, entries = self._stats(version)
        expr = P.parse(where, self.columns)
        by_column = {c: entries[c] for c in P.columns_of(expr) if c in entries}
        mask, _ = evaluate(expr, self.indexed, by_column, files)
        return set(files["file"].filter(pa.array(mask)).to_pylist())


def index_files_on_disk(spec: IndexSpec) -> set[str]:
    return {p.name for p in Path(spec.index_path).glob("*.parquet")}


def age(spec: IndexSpec, seconds: float) -> None:
    """Set every index data file's modification time ``seconds`` into the past (as if written long ago)."""
    then = time.time() - seconds
    for p in Path(spec.index_path).glob("*.parquet"):
        os.utime(p, (then, then))


# ---------------------------------------------------------------------------------------------
# Interleavings, deterministic, in one process: the second sync runs while the first one is
# between writing its segment and publishing its manifest.


def pause_first_publish(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> list[Any]:
    """Make the first ``IndexStore.publish`` call run ``meanwhile()`` before it proceeds."""
    original = IndexStore.publish
    seen: list[Any] = []

    def publish(self: IndexStore, *args: Any, **kwargs: Any) -> Any:
        if not seen:
            seen.append("paused")
            seen.append(meanwhile())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(IndexStore, "publish", publish)
    return seen


def test_a_sync_publishing_while_another_has_an_unpublished_segment_leaves_the_index_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, spec = new_table(tmp_path)
    append(table, batch(200, 100, seed=2))
    seen = pause_first_publish(monkeypatch, lambda: sync(spec))  # B syncs the same commit, publishes, collects
    first = sync(spec)  # A: its segment is written when B runs
    monkeypatch.undo()
    assert seen[0] == "paused" and seen[1].mode == "incremental" and seen[1].published
    assert first.mode == "incremental" and not first.published  # B already published this version
    assert "already" in first.reason
    manifest = assert_sound_and_current(spec, table)
    assert len(manifest.segments) == 1  # B's segment; A's is unreferenced garbage for the collector


def test_a_slower_sync_of_an_older_version_never_moves_the_index_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, spec = new_table(tmp_path)
    append(table, batch(200, 100, seed=2))
    older = DeltaTable(str(table)).version()

    def newer_commit_and_sync() -> Any:
        append(table, batch(300, 100, seed=3))
        return sync(spec)

    seen = pause_first_publish(monkeypatch, newer_commit_and_sync)
    slow = sync(spec)  # A: at `older`, paused while B commits and syncs the newer version
    monkeypatch.undo()
    assert seen[1].to_version == older + 1 and seen[1].published
    assert slow.to_version == older and not slow.published
    manifest = assert_sound_and_current(spec, table)
    assert manifest.delta_version == older + 1


def test_a_sync_built_on_a_manifest_whose_files_are_gone_rebuilds_instead_of_publishing_it(tmp_path: Path) -> None:
    table, spec = new_table(tmp_path)
    base = store_for(spec).manifest().base  # type: ignore[union-attr]
    Path(spec.index_path, base).unlink()  # as an unsafe collector (or a person) could leave it
    append(table, batch(200, 100, seed=2))
    result = sync(spec)
    assert result.mode == "rebuild" and "missing" in result.reason
    assert_sound_and_current(spec, table)


def test_a_reader_keeps_its_manifest_through_a_merge_until_the_grace_period_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grace = 60.0
    table, spec = new_table(tmp_path, commits=2, gc_grace_s=grace)
    reader = store_for(spec)
    held = reader.manifest()
    assert held is not None and held.base is not None and held.segments == []
    before = reader.read_all()
    # The held files were written long ago: only the time they stopped being named protects them.
    age(spec, 10 * grace)
    append(table, batch(300, 100, seed=3))
    assert sync(spec).mode == "incremental"  # a segment half as big as the base: merged into a new base
    current = store_for(spec).manifest()
    assert current is not None and current.segments == [] and current.base != held.base
    assert set(held.files) <= set(current.retired)
    assert set(held.files) <= index_files_on_disk(spec)
    assert reader.read_all().equals(before)  # exactly the manifest it holds, not the newer one
    assert len(reader.read_column("id").rows) == len(live_files(table, held.delta_version))

    deleted = store_for(spec).gc(now=time.time() + grace + 1)
    assert set(held.files) <= set(deleted)
    assert index_files_on_disk(spec) == set(current.files)
    # What this process read of the held files is still its manifest's, exactly; a reader without
    # it (another process) slower than the grace period fails: it never mixes versions.
    assert reader.read_all().equals(before)
    monkeypatch.setattr(store_module, "_PARTS", store_module._PartCache(max_bytes=1 << 26))
    with pytest.raises(StatsIndexError, match="gone"):
        reader.read_all()
    assert problems(spec, table) == []


def test_unpublished_files_are_collected_only_once_older_than_the_grace_period(tmp_path: Path) -> None:
    grace = 60.0
    table, spec = new_table(tmp_path, gc_grace_s=grace)
    store = store_for(spec)
    manifest = store.manifest()
    assert manifest is not None
    rows = pq.read_table(Path(spec.index_path, manifest.base))  # type: ignore[arg-type]
    in_flight = store.write(rows, "seg", manifest.delta_version + 1)  # another writer's, unpublished
    leftover = Path(spec.index_path, ".manifest.json.0123abcd")  # a crashed writer's temporary manifest
    leftover.write_text("{")
    assert store.gc() == []
    assert in_flight in index_files_on_disk(spec) and leftover.exists()
    assert sorted(store.gc(now=time.time() + grace + 1)) == sorted([in_flight, leftover.name])
    assert index_files_on_disk(spec) == set(manifest.files) and not leftover.exists()
    assert problems(spec, table) == []


def test_a_writer_slower_than_half_the_grace_period_does_not_publish(tmp_path: Path) -> None:
    _, spec = new_table(tmp_path, gc_grace_s=10.0)
    store = store_for(spec)
    old = store.manifest()
    assert old is not None
    newer = Manifest(**{**asdict(old), "delta_version": old.delta_version + 1})
    late = store.publish(newer, based_on=old, started=time.monotonic() - 6)
    assert not late.published and "gc_grace_s" in late.reason
    assert store_for(spec).manifest() == old
    assert store.publish(newer, based_on=old, started=time.monotonic()).published
    assert store_for(spec).manifest().delta_version == old.delta_version + 1  # type: ignore[union-attr]


def test_a_reader_never_sees_a_partly_written_manifest(tmp_path: Path) -> None:
    _, spec = new_table(tmp_path)
    store = store_for(spec)
    first = store.manifest()
    assert first is not None
    stop, seen, errors = threading.Event(), set(), []

    def read() -> None:
        while not stop.is_set():
            try:
                m = store_for(spec).manifest()
                seen.add(m.delta_version if m else None)
            except StatsIndexError as e:
                errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 200):
            now = Manifest(**{**asdict(first), "delta_version": first.delta_version + i})
            assert store.publish(now, based_on=None, started=time.monotonic()).published
    finally:
        stop.set()
        reader.join(timeout=30)
    assert not reader.is_alive() and errors == [] and len(seen) > 1 and None not in seen


# ---------------------------------------------------------------------------------------------
# Real processes: four syncing and pruning, a stream appending and a compactor rewriting, each
# syncing after its commits as production does.


class _Rebuilds(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "rebuilt" in record.getMessage():
            self.messages.append(record.getMessage())


def _worker(kind: str, seed: int, table: str, spec: IndexSpec, barrier: Any, out: str) -> None:
    """One process of the race; everything it saw goes to ``out`` as JSON."""
    rebuilds = _Rebuilds()
    logging.getLogger("lakecluster.index.sync").addHandler(rebuilds)
    logging.getLogger("lakecluster.index.sync").setLevel(logging.INFO)
    rng = np.random.default_rng(seed)
    report: dict[str, Any] = {"kind": kind, "prunes": [], "syncs": [], "errors": [], "commits": 0}
    barrier.wait(timeout=180)
    end = time.monotonic() + RUN_S
    next_id = 10_000 * (seed + 1)
    while time.monotonic() < end:
        try:
            if kind == "stream":
                append(Path(table), batch(next_id, 30, seed=next_id))
                next_id += 30
                report["commits"] += 1
            elif kind == "compactor":
                report["commits"] += compact(Path(table), int(rng.choice(YEARS))) > 0
                time.sleep(0.3)
            if kind != "pruner" or rng.random() < 0.3:
                r = sync(spec)
                report["syncs"].append({"mode": r.mode, "to": r.to_version, "published": r.published})
            if kind == "pruner":
                where = str(rng.choice(PREDICATES))
                res = prune(spec, where)
                report["prunes"].append({"where": where, "version": res.version, "paths": res.paths})
        except Exception:
            report["errors"].append(traceback.format_exc())
    report["rebuilds"] = rebuilds.messages
    Path(out).write_text(json.dumps(report))


@pytest.mark.integration
def test_four_processes_syncing_and_pruning_beside_a_stream_and_a_compactor(tmp_path: Path) -> None:
    table, spec = new_table(tmp_path, max_segments=2, gc_grace_s=STRESS_GRACE_S)
    for year in YEARS:  # more than one file per partition, so the first compactions have work
        append(tmp_path / "t", batch(200 + year, 30, seed=year))
    ctx = multiprocessing.get_context("spawn")  # delta-rs must not be forked
    barrier = ctx.Barrier(7)
    kinds = ["pruner"] * 4 + ["stream", "compactor"]
    outs = [str(tmp_path / f"worker-{i}.json") for i in range(len(kinds))]
    procs = [ctx.Process(target=_worker, args=(k, i, str(table), spec, barrier, out), daemon=True)
             for i, (k, out) in enumerate(zip(kinds, outs, strict=True))]  # fmt: skip
    for p in procs:
        p.start()
    sampled: list[str] = []
    samples = 0
    try:
        barrier.wait(timeout=180)  # every process imported and ready
        end = time.monotonic() + RUN_S + 120
        while any(p.is_alive() for p in procs) and time.monotonic() < end:
            sampled += problems(spec, table)
            samples += 1
            time.sleep(0.5)
        for p in procs:
            p.join(timeout=max(0.0, end - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    reports = [json.loads(Path(o).read_text()) for o in outs]

    errors = [e for r in reports for e in r["errors"]]
    assert errors == [], errors[0]
    assert sampled == [] and samples >= 20
    assert [m for r in reports for m in r["rebuilds"]] == []  # no sync ever found the index unreadable
    by_kind = {r["kind"]: r for r in reports}
    assert by_kind["stream"]["commits"] >= 10 and by_kind["compactor"]["commits"] >= 3
    syncs = [s for r in reports for s in r["syncs"]]
    assert sum(s["published"] for s in syncs) >= 20 and sum(not s["published"] for s in syncs) >= 1
    assert {s["mode"] for s in syncs} <= {"current", "incremental"}

    # Every prune kept exactly the files the log's stats keep at the version the prune reports.
    manifest = store_for(spec).manifest()
    assert manifest is not None
    log_oracle = LogOracle(table, manifest)
    prunes = [p for r in reports for p in r["prunes"]]
    assert len(prunes) >= 40 and len({p["version"] for p in prunes}) >= 10
    wrong = [(p["version"], p["where"]) for p in prunes if set(p["paths"]) != log_oracle.keep(p["version"], p["where"])]
    assert wrong == []
    assert any(0 < len(p["paths"]) < len(log_oracle.files(p["version"])) for p in prunes)  # pruning did skip files

    # The end state: intact, current, equal to a rebuild; the collector kept up during the run.
    sync(spec)
    manifest = assert_sound_and_current(spec, table)
    on_disk = index_files_on_disk(spec)
    assert len(on_disk) < sum(s["published"] for s in syncs) / 2
    store_for(spec).gc(now=time.time() + STRESS_GRACE_S + 1)
    assert index_files_on_disk(spec) == set(manifest.files)
