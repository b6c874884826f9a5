"""Following the table's layout: the compactor clusters by the layout in effect
(``LakeTable.layout``: an adopted one when ``compaction.auto_layout = apply``), scores layouts on
the captured workload between rounds (``lakecluster.layout.auto_layout``, which decides), and puts
the re-cluster of the files written under another layout in front of each round's groups, within
its byte budget (``relayout.py``); with ``compact --full``, every file off the layout.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import metrics
from lakecluster.compaction.planner import Plan
from lakecluster.compaction.relayout import still_pending, with_relayout, within_budget
from lakecluster.config import Config
from lakecluster.layout.auto_layout import AutoLayout, capped, fingerprint_of, pending
from lakecluster.retry import first_line
from lakecluster.table import Adoption, LakeTable, TableLayout
from lakecluster.table.layout_record import clusters_data_columns
from lakecluster.table.live_files import off_layout

log = logging.getLogger(__name__)


class LayoutFollower:
    """The layout one compactor clusters by, and its re-cluster to that layout.

    Args:
        table: the table's handle (its layout in effect, its live files).
        config: the configuration as loaded (:attr:`base_config`; ``config`` is it with the layout
            in effect applied).
        auto: the layout loop's policy.
        full: ``compact --full``: re-cluster every file off the layout, a bounded part per round.
        on_change: called with the new ``config`` when the layout in effect changes.
    """

    def __init__(self, table: LakeTable, config: Config, auto: AutoLayout, *, full: bool = False,
                 on_change: Callable[[Config], None] = lambda _: None) -> None:  # fmt: skip
        self.table = table
        self.base_config = config
        self.config = config
        self.auto = auto
        self.full = full
        self.on_change = on_change
        self.adoption: Adoption | None = None  # the adopted layout in effect (compaction.auto_layout = apply)
        self.relayout_left_planned = (0, 0)  # files, bytes the re-cluster has left (as last planned)
        self._refused: str | None = None  # an adoption this configuration cannot take (logged once)
        self._pending: pa.Array | None = None  # --full: the files off the layout when the pass started

    @property
    def fingerprint(self) -> str:
        """The current layout's fingerprint (columns, weights, curve, parents on or off), as rewritten
        files carry it."""
        return fingerprint_of(self.config)

    def follow(self) -> None:
        """Take the table's layout in effect: the newest adopted one, another compactor's too, when
        ``auto_layout = apply``; the configured one otherwise. An adoption only its file has (an
        earlier version adopted it) is recorded in the log first."""
        base = self.base_config
        found = None
        if base.compaction.auto_layout == "apply":
            found = self.table.adoption()  # once a round: a listing of the adoption files
            if found[0] is not None and not found[1]:
                self.auto.store.record_pending()
                found = self.table.adoption()
            latest = found[0]
            if latest is not None and not clusters_data_columns(base, latest) and self._refused != latest.id:
                self._refused = latest.id
                log.warning("layout loop: adopted layout %d clusters by %s, which are not data columns of the table as "
                            "configured; the configured layout stays in effect", latest.number,
                            ", ".join(latest.clustering_columns))  # fmt: skip
        layout = self.table.layout(base, found)
        adopted = layout.adoption
        metrics.AUTO_LAYOUT_ADOPTION.set(adopted.number if adopted is not None else 0)
        if (adopted.id if adopted else None) == (self.adoption.id if self.adoption else None):
            return
        self.adoption = adopted
        if adopted is not None:
            log.info("layout loop: clustering by adopted layout %d: %s (weights %s)", adopted.number,
                     ", ".join(adopted.clustering_columns), ", ".join(f"{w:g}" for w in adopted.weights))  # fmt: skip
        self.apply(layout)

    def apply(self, layout: TableLayout | None = None) -> None:
        """``config`` = the loaded one with the layout in effect (default: the table's now)."""
        config = (layout or self.table.layout(self.base_config)).applied_to(self.base_config)
        if fingerprint_of(config) != fingerprint_of(self.config):
            self._pending = None  # a --full pass re-clusters to the new layout from the files off it now
        self.config = config
        self.on_change(config)

    def score(self, stopping: bool) -> None:
        """Between rounds: score layouts on the captured workload when due. A failure is logged:
        the layout loop is never worth a round."""
        if self.full or stopping or not self.auto.due(self.config):
            return
        try:
            version, files = self.table.live_files().snapshot()
            result = self.auto.evaluate(self.config, self.adoption, files, version)
        except Exception as e:
            log.warning("layout loop: scoring layouts on the captured workload failed (compaction goes on): %s",
                        first_line(f"{type(e).__name__}: {e}"))  # fmt: skip
            return
        if result.adopted is not None or "following it" in result.decision:
            self.follow()

    def with_relayout(self, the_plan: Plan, files: pa.Table, partition_by: tuple[str, ...]) -> Plan:
        """The round's plan with the re-cluster in front: every file off the layout with ``full``,
        else the compacted files off an adopted layout, within the budget."""
        if self.full:
            return with_relayout(the_plan, files, self.pass_files(files), self.fingerprint, partition_by,
                                 self.config.compaction)  # fmt: skip
        if self.adoption is not None and self.config.compaction.auto_layout == "apply":
            return self._auto_relayout(the_plan, files, partition_by)
        return the_plan

    def _auto_relayout(self, the_plan: Plan, files: pa.Table, partition_by: tuple[str, ...]) -> Plan:
        """The round's plan with groups re-clustering the files left on another layout in front, the
        files the captured workload reads most first, as many as the budget's window allows."""
        assert self.adoption is not None
        todo = pending(files, self.fingerprint)
        if not len(todo):
            self.relayout_left_planned = (0, 0)
            metrics.RELAYOUT_PENDING_FILES.set(0)
            metrics.RELAYOUT_PENDING_BYTES.set(0)
            self.auto.note_budget(False, 0, 0)
            return the_plan
        budget = self.auto.budget(self.config, files, the_plan.table_version)
        cfg = capped(self.config, budget["limit"])
        relaid = with_relayout(the_plan, files, todo, self.fingerprint, partition_by, cfg,
                               priority=self.auto.priority, why=f"layout adoption {self.adoption.number}")  # fmt: skip
        self.relayout_left_planned = (relaid.relayout_files, relaid.relayout_bytes)
        metrics.RELAYOUT_PENDING_FILES.set(relaid.relayout_files)
        metrics.RELAYOUT_PENDING_BYTES.set(relaid.relayout_bytes)
        groups, cut = within_budget(relaid.groups, budget["left"])
        self.auto.note_budget(cut and not any(g.relayout for g in groups), budget["limit"], budget["used"],
                              self.config.compaction.rewrite_budget_window_s)  # fmt: skip
        return dataclasses.replace(relaid, groups=groups)

    def commit_details(self, relayout: bool) -> dict[str, str]:
        """What a re-cluster group's commit records of the adoption it moves toward."""
        if not relayout or self.adoption is None:
            return {}
        files, size = self.relayout_left_planned
        return {"adoption": str(self.adoption.number), "adoption_id": self.adoption.id,
                "relayout_files_left": str(files), "relayout_bytes_left": str(size)}  # fmt: skip

    def pass_files(self, files: pa.Table) -> pa.Array:
        """``--full``: the files off the current layout when the pass started (taken from ``files``
        the first time)."""
        if self._pending is None:
            self._pending = off_layout(files, self.fingerprint)
        return self._pending

    def pass_left(self, files: pa.Table) -> tuple[int, int]:
        """``--full``: (files, bytes) of the pass still off the current layout."""
        left = still_pending(files, self.pass_files(files), self.fingerprint)
        return left.num_rows, int(pc.sum(left["size"]).as_py() or 0)
