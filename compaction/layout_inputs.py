"""What the compactor lays a group out by, from the table: the boundary sketches of the layout's
clustering columns (those the stream never sketched, after a layout change or on a table another
writer filled, built from the table's rows first, once: ``table_sketches.py``), and the parents
of its string clustering columns (``lakecluster.hierarchy``), found in a sample of the table and
kept for ``PARENTS_REFRESH_S``."""

from __future__ import annotations

import logging
import time

import pyarrow as pa

from lakecluster.compaction.table_sketches import build_missing, lacking, table_parents
from lakecluster.config import Config
from lakecluster.errors import NoBoundariesError
from lakecluster.hierarchy import Parent
from lakecluster.sketches import BoundarySketches
from lakecluster.table import LakeTable, SketchStore
from lakecluster.table.snapshot import physical_names

log = logging.getLogger(__name__)

PARENTS_REFRESH_S = 3600.0  # how long the parents found in a sample of the table are used


class LayoutInputs:
    """The boundary sketches and the parents of one table's layout (see the module's docstring)."""

    def __init__(self, table: LakeTable, store: SketchStore) -> None:
        self.table = table
        self.live = table.live_files()
        self.store = store
        # (when found, for which clustering columns, what)
        self._found: tuple[float, tuple[str, ...], dict[str, Parent]] | None = None

    def sketches(self, config: Config) -> BoundarySketches:
        """The boundary sketches of the clustering columns; those the stream never sketched (after a
        layout change, or on a table another writer filled) are built from the table first, once
        (``table_sketches.py``)."""
        cols = config.table.clustering_columns
        version, files = self.live.snapshot()
        physical = physical_names(self.live.metadata)  # a column renamed since keeps its sketch
        latest = self.store.latest(physical)
        missing = lacking(latest, cols, files)
        if missing:
            build_missing(config, self.table, files, version, [config.table.column(c) for c in missing],
                          physical=physical)  # fmt: skip
            latest = self.store.latest(physical)
        # A column that is null in every row has an empty sketch but counts its nulls: it ranks
        # every row 0, and compaction goes on with the other columns.
        if latest is None or any(c not in latest.sketches for c in cols) or all(
            latest.sketches[c].n + latest.sketches[c].nulls + latest.sketches[c].nans == 0 for c in cols
        ):
            raise NoBoundariesError(
                f"no boundary sketches for {', '.join(cols)} under {self.store.directory}; the stream writes them "
                "with every micro-batch (run `lakecluster stream` first)"
            )
        return latest

    def parents(self, config: Config) -> dict[str, Parent]:
        """The parents of the string clustering columns (``lakecluster.hierarchy``), found in rows
        spread over the table's files (``table_sketches.spread_rows``) among the columns rewritten
        files carry stats for; found again after ``PARENTS_REFRESH_S`` or when the clustering
        columns change. None when ``compaction.group_by_parents`` is off; none, with a warning,
        when the sample cannot be read (the layout goes on without)."""
        if not config.compaction.group_by_parents:
            return {}
        now = time.monotonic()
        columns = config.table.clustering_columns  # an adopted layout changes them
        if self._found is not None and now - self._found[0] < PARENTS_REFRESH_S and self._found[1] == columns:
            return self._found[2]
        found: dict[str, Parent] = {}
        try:
            version, live = self.live.snapshot()
            found = table_parents(config, self.table, live, version, self.live.configuration)
        except (OSError, pa.ArrowException) as e:
            log.warning("no parent columns for the layout this time: the table's sample could not be read: %s", e)
        if found:
            log.info("layout: %s", ", ".join(f"{c} also cut by its parent {p.parent}" for c, p in found.items()))
        self._found = (now, columns, found)
        return found
