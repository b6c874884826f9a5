"""A table, its column-stats index, its capture store and its adoption store as lakecluster wrote
them before the layout became a record of the table (tests/fixtures/before-44/, written by main at
d7d830f with tests/fixtures/write_before_44.py) are read as before; the adoption only its file
has is in effect, and the first compactor of this version records it in the log."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.config import WorkloadConfig, load_config
from lakecluster.index.prune import prune
from lakecluster.index.spec import IndexSpec
from lakecluster.table import LAYOUT_DOMAIN, Adoption, LakeTable
from lakecluster.workload.capture import read_capture
from lakecluster.workload.queries import Predicate

FIXTURE = Path(__file__).parent / "fixtures" / "before-44" / "table"
ROWS = 600  # what the fixture's stream wrote


@pytest.fixture
def old_table(tmp_path: Path) -> Path:
    copy = tmp_path / "table"
    shutil.copytree(FIXTURE, copy)
    return copy


def _config(path: Path, mode: str = "apply"):  # type: ignore[no-untyped-def]
    return load_config(overrides={"table.path": str(path), "table.partition_by": "[]", "index.enabled": "true",
                                  "compaction.auto_layout": mode, "metrics.port": "0",
                                  "compaction.target_file_bytes": "60000", "compaction.min_file_bytes": "30000",
                                  "compaction.min_input_files": "2",
                                  "compaction.rewrite_budget_bytes_per_day": "1000000000"}, environ={})  # fmt: skip


def test_the_table_index_and_capture_store_of_before_are_read_as_before(old_table: Path) -> None:
    table = LakeTable(_config(old_table))
    state = table.state()
    assert state.version == 4 and state.rows == ROWS and state.streams  # the stream's commits, as recorded
    assert state.sketches_version == 3  # the stream's sketch files

    spec = IndexSpec.for_location(table)
    stored = prune(spec, "s_city = 'UNITED KI1'", index="stored")  # the index as it was written, not rebuilt
    assert stored.index_version == 4 and stored.commits_from_log == 0
    live = {Path(p).name for p in DeltaTable(str(old_table)).file_uris()}
    assert {Path(p).name for p in stored.paths} <= live

    capture = read_capture(table, WorkloadConfig(), since_s=100 * 365 * 86_400.0)
    assert capture.skipped == [] and len(capture.scans) == 2
    first, second = capture.scans
    assert set(first.predicates) == {Predicate("s_city", "eq", ("UNITED KI1",)),
                                     Predicate("lo_orderdate", "range", low=dt.date(1995, 1, 1))}  # fmt: skip
    assert Predicate("lo_quantity", "range", low=Decimal(10), high=Decimal(20)) in second.predicates


def test_an_adoption_of_before_is_in_effect_and_a_compactor_of_now_records_it(spark, old_table: Path) -> None:  # type: ignore[no-untyped-def]
    config = _config(old_table)
    filed = json.loads((old_table / "_lakecluster" / "layout" / "adoption-00000001.json").read_text())
    table = LakeTable(config)
    assert table.adoption() == (Adoption.from_dict(filed), False)
    layout = table.layout()
    assert layout.is_adopted and not layout.recorded and layout.clustering_columns == ("lo_quantity", "s_city")
    assert table.adoptions().recommendation() == {"decision": "adopted layout 1", "gain": 0.4}
    assert not LakeTable(_config(old_table, "advise")).layout().is_adopted  # only with apply, as before

    compactor = Compactor(config, table=table, spark=spark)  # follows the adoption, recording it first
    assert compactor.adoption == Adoption.from_dict(filed)
    assert compactor.config.table.clustering_columns == ("lo_quantity", "s_city")
    actions = [json.loads(line) for f in sorted((old_table / "_delta_log").glob("*.json"))
               for line in f.read_text().splitlines()]  # fmt: skip
    records = [a["domainMetadata"] for a in actions if "domainMetadata" in a]
    assert [json.loads(r["configuration"])["adoption"] for r in records if r["domain"] == LAYOUT_DOMAIN] == [filed]
    assert table.layout().recorded
    before = set(DeltaTable(str(old_table)).file_uris())
    assert [r.result for r in compactor.run_once()] == ["committed"]  # the re-cluster of the file of before
    written = set(DeltaTable(str(old_table)).file_uris()) - before
    assert written and all(f"-l{filed['fingerprint']}-" in p for p in written)  # clustered by the adopted layout
    assert DeltaTable(str(old_table)).to_pyarrow_table().num_rows == ROWS
