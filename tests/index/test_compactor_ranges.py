"""The compactor reads clustering-column ranges from the index only when it is current, and an
index that cannot be synced never fails it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lakecluster.compaction.loop import Compactor
from lakecluster.config import Config, load_config
from tests.index.tables import COLUMNS, append, batch


def config_for(table: Path, **extra: str) -> Config:
    columns = "[" + ", ".join(f'{{ name = "{c.name}", type = "{c.type}" }}' for c in COLUMNS) + "]"
    overrides = {"table.path": str(table), "table.columns": columns, "table.partition_by": '["year"]',
                 "table.clustering_columns": '["city"]', "source.kind": "kafka", "source.kafka.topics": '["t"]',
                 **extra}  # fmt: skip
    return load_config(overrides=overrides, environ={})


def test_ranges_come_from_the_index_when_current_else_from_the_log(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 200, seed=1), 0)
    compactor = Compactor(config_for(table))
    assert "size_bytes" in compactor.ranges().column_names  # no index yet: the Delta log's add actions
    compactor.sync_index()
    from_index = compactor.ranges()
    assert from_index.column_names == ["path", "min.city", "max.city"]
    append(table, batch(200, 50, seed=2), 1)
    compactor.table.update_incremental()
    assert "size_bytes" in compactor.ranges().column_names  # stale index: back to the log
    compactor.sync_index()
    again = compactor.ranges()
    assert again.column_names == ["path", "min.city", "max.city"] and again.num_rows > from_index.num_rows


def test_a_failing_index_sync_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 100, seed=1), 0)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    compactor = Compactor(config_for(table, **{"index.path": str(blocker / "index")}))
    with caplog.at_level(logging.WARNING):
        compactor.sync_index()
    assert "index sync failed" in caplog.text
    assert "size_bytes" in compactor.ranges().column_names  # and depth still comes from the log
