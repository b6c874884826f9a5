"""Boundary sketches built from the table's own rows, for clustering columns the stream never sketched.

The stream sketches the clustering columns it was started with, batch by batch; after the columns
change (``tune --queries``' advice applied), the rows already in the table have no sketch of the
new ones, and without boundaries they could never be re-clustered. The compactor then builds the
sketches it lacks once: it reads whole files, in an order fixed by the table version, until it has
at least ``SAMPLE_ROWS`` rows (or every file), only the missing columns, with pyarrow (no Python
loop over rows), and sketches them as the stream's tasks sketch a batch.

A column lacks a sketch when no sketch file has it, or when its sketch has seen fewer than half
the table's rows and was never built from the table (a stream restarted with the new columns
before the compactor ran has sketched only its new batches; rows another writer added). Such a
sketch gets the sample merged in; every built column is marked (``BoundarySketches.from_table``)
and never built again.

The result is stored where the configured stream keeps its sketches: a new version of its sketch
file holding what it had plus the built columns, under the same stream batch id (so a stream
replaying a batch decides as before). The stream re-reads its folder's newest file when another
process wrote it (``stream/sink.py``) and from then on sketches its batches on the built columns
too, so its next files carry them on, kept up to date: the stream and the compactor agree on the
boundaries. Nothing here takes the stream's lease or
waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from lakecluster.config import Config
from lakecluster.hierarchy import Parent, find_parents, parent_candidates
from lakecluster.schema import ColumnSpec, arrow_schema
from lakecluster.sizes import human_bytes
from lakecluster.sketches import BoundarySketches
from lakecluster.storage import filesystem
from lakecluster.table import LakeTable
from lakecluster.table.deletion_vectors import DeletionVector
from lakecluster.table.file_rows import LiveFile, file_head, read_live

log = logging.getLogger(__name__)

SAMPLE_ROWS = 100_000  # at least this many rows (whole files) are read, or every row of a smaller table


def lacking(sketches: BoundarySketches | None, columns: Sequence[str], live: pa.Table) -> list[str]:
    """The ``columns`` whose sketch must be built from the table (see above); none of an empty table."""
    table_rows = int(np.nansum(live["rows"].to_numpy(zero_copy_only=False).astype(np.float64)))
    if not table_rows:
        return []
    if sketches is None:
        return list(columns)
    return [c for c in columns
            if c not in sketches.sketches or (c not in sketches.from_table and 2 * sketches.rows(c) < table_rows)]


def sample_files(live: pa.Table, version: int, rows: int = SAMPLE_ROWS) -> pa.Table:
    """Live files in an order fixed by ``version``, as many as hold at least ``rows`` rows (all of
    them when the table has fewer)."""
    order = np.random.default_rng(version).permutation(live.num_rows)
    shuffled = live.take(pa.array(order, pa.int64()))
    counts = np.nan_to_num(shuffled["rows"].to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0)
    enough = np.flatnonzero(np.cumsum(counts) >= rows)
    return shuffled if not len(enough) else shuffled.slice(0, int(enough[0]) + 1)


def live_refs(files: pa.Table) -> list[LiveFile]:
    """The files of rows of the live files' table (``path``, ``deletion_vector``) as the log names them."""
    return [LiveFile(path, DeletionVector.of(vector))
            for path, vector in zip(files["path"].to_pylist(), files["deletion_vector"].to_pylist(), strict=True)]


def read_columns(table: LakeTable, files: pa.Table, columns: Sequence[ColumnSpec]) -> pa.Table:
    """``columns`` of the live rows of ``files`` (rows of the live files' table), in their declared types."""
    fs, root = filesystem(table.uri, table.storage)
    return read_live(fs, root, live_refs(files), arrow_schema(tuple(columns)))


def build_missing(config: Config, table: LakeTable, live: pa.Table, version: int, missing: Sequence[ColumnSpec], *,
                  physical: Mapping[str, str] | None = None) -> BoundarySketches:  # fmt: skip
    """Sketch ``missing`` from a sample of the ``live`` files at ``version``, store them with the
    configured stream's sketches, and return that stored version.

    Raises:
        SketchStoreError: the stream's sketch file could not be read or written.
    """
    chosen = sample_files(live, version)
    rows = read_columns(table, chosen, missing)
    sk = config.sketches
    built = BoundarySketches.empty(missing, k=sk.k, max_string_chars=sk.max_string_chars)
    for c in missing:
        built.sketches[c.name].update(rows[c.name])
    store = table.sketches(table.stream_id)
    stored = store.latest(physical) or BoundarySketches({})
    for name, sketch in built.sketches.items():
        partial = stored.sketches.get(name)  # the stream's sketch of its newest rows only, if any
        if partial is not None and partial.kind == sketch.kind:
            sketch.merge(partial)
        stored.sketches[name] = sketch
        stored.from_table[name] = version
    stored.delta_version = max(stored.delta_version, version)
    if physical is not None:
        stored.follow(physical)  # records every sketched column's physical name
    name = store.write(stored, retain=sk.retain_versions)
    size = int(np.nansum(chosen["size"].to_numpy(zero_copy_only=False)))
    log.warning(
        "boundary sketches for %s built from the table: %d rows of %d of its %d files (%s, version %d); stored as "
        "%s/%s beside the stream's (the stream merges its batches into them once it runs with these columns)",
        ", ".join(c.name for c in missing), rows.num_rows, chosen.num_rows, live.num_rows, human_bytes(size),
        version, store.directory, name,
    )  # fmt: skip
    return stored


PARENT_SAMPLE_FILES = 256  # parents are looked for in rows from this many files at most, a slice of each
SAMPLE_READERS = 8  # files spread_rows reads at once


def spread_rows(table: LakeTable, live: pa.Table, version: int, columns: Sequence[ColumnSpec],
                rows: int = SAMPLE_ROWS, files: int = PARENT_SAMPLE_FILES) -> pa.Table:  # fmt: skip
    """About ``rows`` rows of ``columns``: the first live rows of each of up to ``files`` live files in an
    order fixed by ``version``. Unlike whole files (``sample_files``), which after compaction each
    hold a narrow range of the clustering columns, slices of many files cover their whole range."""
    order = np.random.default_rng(version).permutation(live.num_rows)[:files]
    chosen = live.take(pa.array(order, pa.int64()))
    if not chosen.num_rows:
        return pa.table({c.name: pa.array([], arrow_schema((c,)).field(0).type) for c in columns})
    fs, root = filesystem(table.uri, table.storage)
    schema = arrow_schema(tuple(columns))
    each = max(1, rows // chosen.num_rows)

    def head(file: LiveFile) -> pa.Table:
        return file_head(fs, root, file, each, schema)

    # Hundreds of small reads, each mostly waiting on storage (a footer, a page per column): in parallel.
    with ThreadPoolExecutor(max_workers=SAMPLE_READERS) as pool:
        return pa.concat_tables(list(pool.map(head, live_refs(chosen))))


def table_parents(config: Config, table: LakeTable, live: pa.Table, version: int,
                  configuration: Mapping[str, str]) -> dict[str, Parent]:  # fmt: skip
    """The parents (``lakecluster.hierarchy``) of the string clustering columns among the other
    ``parent_candidates``, found in rows spread over the ``live`` files (a table with a ``path``
    column per file) at ``version`` (``spread_rows``)."""
    t = config.table
    children = [c for c in t.clustering_columns if t.column(c).type == "string"]
    others = [c for c in parent_candidates(config, configuration) if c not in t.clustering_columns]
    if not children or not others or not live.num_rows:
        return {}
    rows = spread_rows(table, live, version, [t.column(c) for c in children + others])
    return find_parents(rows, children, others)
