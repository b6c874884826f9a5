"""The compactor's vacuum waits while it is held (``lakecluster run`` holds it until the stream is
up), and a vacuum of a young table finishes without starting Spark."""

from __future__ import annotations

from pathlib import Path

from lakecluster.compaction.loop import Compactor
from lakecluster.config import load_config
from tests.cli.conftest import write_ssb_table


def test_a_held_vacuum_waits_and_a_young_tables_vacuum_needs_no_spark(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "t")
    compactor = Compactor(load_config(overrides={"table.path": str(table), "metrics.port": "0"}, environ={}))
    compactor.vacuum_allowed = lambda: False
    compactor.maybe_vacuum()
    assert compactor.last_vacuum is None, "a held vacuum ran"
    compactor.vacuum_allowed = lambda: True
    compactor.maybe_vacuum()
    assert compactor.last_vacuum is not None
    assert compactor._spark is None, "Spark started for a vacuum with nothing to delete"
