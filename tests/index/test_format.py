"""An index written in an older format (``fixtures/format1_table``: entries keyed by path, written
by the code before file numbers) is never read with today's rules: reading it is an error that
names the format, and the next sync rebuilds it, after which its answers are sound and current."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakecluster.errors import StatsIndexError
from lakecluster.index.prune import prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.store import FORMAT, IndexFormatError
from lakecluster.index.sync import store_for, sync
from tests.index.tables import fixture_copy

WHERE = {  # the predicate, and the same as a pyarrow expression
    "city = 'city3'": pc.field("city") == "city3",
    "id < 30": pc.field("id") < 30,
    "day >= DATE '2024-02-01'": pc.field("day") >= pc.scalar(dt.date(2024, 2, 1)),
    "region = 'east' AND price > 300": (pc.field("region") == "east") & (pc.field("price") > 300),
}


def matching_rows(path: str, expr: pc.Expression) -> int:
    """Rows of one data file (its partition value from its path) that satisfy ``expr``."""
    data = pq.read_table(path)
    data = data.cast(pa.schema([pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type)
                                for f in data.schema]))  # delta-rs writes strings as views
    region = Path(path).parent.name.removeprefix("region=")
    data = data.append_column("region", pa.array([region] * data.num_rows, pa.string()))
    return data.filter(expr).num_rows


@pytest.fixture
def old_index(tmp_path: Path) -> tuple[Path, IndexSpec]:
    return fixture_copy("format1_table", tmp_path)


def test_the_fixture_is_a_format_1_index_behind_its_table(old_index: tuple[Path, IndexSpec]) -> None:
    table, spec = old_index
    manifest = (Path(spec.index_path) / "manifest.json").read_text()
    assert '"format": 1' in manifest and FORMAT == 3  # 3 since the manifest records the table's id
    assert '"delta_version": 3' in manifest and DeltaTable(str(table)).version() == 5


def test_an_old_format_is_never_read_and_the_error_says_what_to_do(old_index: tuple[Path, IndexSpec]) -> None:
    _, spec = old_index
    with pytest.raises(IndexFormatError, match=r"format 1.*lakecluster index sync"):
        store_for(spec).manifest()
    with pytest.raises(StatsIndexError):
        prune(spec, "city = 'city3'", index="stored")


def test_a_sync_rebuilds_an_old_format_and_answers_soundly(old_index: tuple[Path, IndexSpec]) -> None:
    table, spec = old_index
    old_files = {p.name for p in Path(spec.index_path).glob("*.parquet")}
    result = sync(spec)
    assert result.mode == "rebuild" and "format 1" in result.reason and result.to_version == 5
    # the old files are retired now: a reader of the old index still has the grace period
    manifest = store_for(spec).manifest()
    assert manifest is not None and old_files <= set(manifest.retired)
    assert store_for(spec).gc(now=time.time()) == [] and old_files <= {p.name for p in Path(spec.index_path).iterdir()}
    live = [u.removeprefix("file://") for u in DeltaTable(str(table)).file_uris()]
    skipped_somewhere = False
    for where, expr in WHERE.items():
        r = prune(spec, where, index="stored")
        kept = {str(table / p) for p in r.paths}
        assert r.version == 5 and r.files_total == len(live) and kept <= set(live)
        holding = {path for path in live if matching_rows(path, expr)}
        assert holding and holding <= kept, where  # every file holding a matching row is kept
        skipped_somewhere |= len(kept) < len(live)
    assert skipped_somewhere
    # The old format's files are named by no manifest: collected after the grace period.
    deleted = store_for(spec).gc(now=time.time() + spec.gc_grace_s + 1)
    assert old_files <= set(deleted)
