"""Delta tables filled by lakecluster's own stream from the built-in generator, as the compaction,
CLI and index tests need them: small settings, one fill per configuration and test process."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from lakecluster.config import Config, load_config
from lakecluster.index.sync import sync
from lakecluster.stream.job import StreamJob

# Compaction settings at the scale of these tables (tens of KB per file).
SMALL = {
    "compaction.target_file_bytes": "60000",
    "compaction.min_file_bytes": "30000",
    "compaction.min_input_files": "2",
    "compaction.max_groups_per_run": "50",
    "compaction.interval_s": "0.5",
    "metrics.port": "0",
    "stream.progress": "false",
    "stream.trigger_interval_s": "0",
}


def generator_config(table: Path, rows: int, per_batch: int, **extra: str) -> Config:
    overrides = {
        "table.path": str(table), "table.partition_by": '["d_year"]',
        "source.generator.max_rows": str(rows), "source.generator.max_rows_per_trigger": str(per_batch),
        **SMALL, **extra,
    }  # fmt: skip
    return load_config(overrides=overrides, environ={})


def fill(spark, config: Config) -> None:  # type: ignore[no-untyped-def]
    """Stream the generator's rows into the table, as ``lakecluster stream --available-now`` does
    (the index synced after each batch when ``index.sync_after_stream`` says so)."""
    StreamJob(config, spark=spark, available_now=True, index_sync=sync).run()


def row_multiset(table: pa.Table) -> Counter:
    """Every row, all columns, as a multiset (duplicates count)."""
    columns = sorted(table.column_names)
    return Counter(tuple(row[c] for c in columns) for row in table.select(columns).to_pylist())


class FilledTables:
    """``fill``, streamed once per configuration in this test process; each call after the first
    copies that table (log, data, the stream's checkpoint and sketches, quarantine) to the
    configuration's ``table.path``, as if it had been filled there.

    For tests that read, compact or vacuum what a finished stream wrote, not for streaming into
    the copy again: the copy's stream id (derived from the path) differs from the original's, so
    its checkpoint would not be found. The configurations compare without the table's path and
    the compaction engine (``compaction.local_rewrite_max_bytes``), which the stream never reads.
    """

    def __init__(self, spark, home: Path) -> None:  # type: ignore[no-untyped-def]
        self.spark = spark
        self.home = home
        self.tables: dict[str, Path] = {}

    def __call__(self, config: Config) -> None:
        key = repr(replace(config, table=replace(config.table, path=""),
                           compaction=replace(config.compaction, local_rewrite_max_bytes=0)))  # fmt: skip
        if key not in self.tables:
            original = self.home / f"t{len(self.tables)}"
            fill(self.spark, replace(config, table=replace(config.table, path=str(original))))
            self.tables[key] = original
        original, target = self.tables[key], Path(config.table.path)
        shutil.copytree(original, target)
        quarantine = Path(f"{original}_quarantine")
        if quarantine.exists() and not config.table.quarantine_path:
            shutil.copytree(quarantine, f"{target}_quarantine")


def filled_for_subprocesses(filled: FilledTables, table: Path) -> list[str]:
    """Fill ``table`` (unpartitioned: one group per round) with 9,000 generator rows in 3 commits,
    in this process; returns the CLI args of compactors that work on it."""
    filled(generator_config(table, rows=9_000, per_batch=3_000, **{"table.partition_by": "[]"}))
    return [f"--set=table.path={table}", "--set=table.partition_by=[]", *[f"--set={k}={v}" for k, v in SMALL.items()]]
