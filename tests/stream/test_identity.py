"""A stream keeps its identity when its table is copied or moved (another directory, another way of
writing the path), a stream the previous release wrote keeps its id and state, and a source whose
derived id changed because a setting changed is refused in one line naming ``stream.id`` instead
of reading its topics again into the table."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from lakecluster.config import Config, load_config
from lakecluster.errors import ConfigError
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from lakecluster.table.paths import stream_id_of
from lakecluster.table.stream_identity import RECORD, StreamRecord, resolve
from tests.cli.conftest import run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "previous-release" / "lineorder"
FIXTURE_ID = "generator-9ff66871f330"  # derived from the generator's seed and table.path = "lineorder"


def generator(path: str, rows: int, **extra: str) -> Config:
    """The fixture's stream settings, up to ``rows`` rows."""
    return load_config(overrides={
        "table.path": path, "table.partition_by": "[]", "source.generator.max_rows": str(rows),
        "source.generator.max_rows_per_trigger": "1000", "source.generator.partitions": "1", "metrics.port": "0",
        "stream.progress": "false", "stream.trigger_interval_s": "0", **extra}, environ={})  # fmt: skip


def app_ids(table: Path) -> set[str]:
    """The app ids of every app transaction in the table's log."""
    return {json.loads(line)["txn"]["appId"] for f in (table / "_delta_log").glob("*.json")
            for line in f.read_text().splitlines() if '"txn"' in line}  # fmt: skip


def keys(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_pyarrow_table(columns=["lo_orderkey"])["lo_orderkey"].to_pylist())


pytestmark = pytest.mark.integration


def test_a_stream_the_previous_release_wrote_keeps_its_id_and_state_and_its_table_can_move(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(FIXTURE, tmp_path / "lineorder")
    monkeypatch.chdir(tmp_path)
    assert keys(tmp_path / "lineorder") == list(range(2_000))

    # The same spelling of the path: the derived id is the stream's folder; its checkpoint goes on.
    reports = StreamJob(generator("lineorder", 3_000), spark=spark, available_now=True).run()
    assert sum(r.rows for r in reports) == 1_000
    assert keys(tmp_path / "lineorder") == list(range(3_000))
    assert app_ids(tmp_path / "lineorder") == {FIXTURE_ID}
    record = json.loads((tmp_path / "lineorder" / "_lakecluster/streams" / FIXTURE_ID / RECORD).read_text())
    assert record["id"] == FIXTURE_ID and record["source"] == {"kind": "generator", "seed": 42}

    # Moved (another directory, the path written another way): the record names the stream.
    moved = tmp_path / "elsewhere" / "orders"
    shutil.move(str(tmp_path / "lineorder"), moved)
    reports = StreamJob(generator(f"file://{moved}/", 4_000), spark=spark, available_now=True).run()
    assert sum(r.rows for r in reports) == 1_000  # from the committed offsets: nothing read twice
    assert keys(moved) == list(range(4_000))
    assert app_ids(moved) == {FIXTURE_ID}
    assert [p.name for p in (moved / "_lakecluster/streams").iterdir()] == [FIXTURE_ID]
    assert LakeTable(generator(str(moved), 4_000)).stream_id == FIXTURE_ID  # what status and the gauges follow


def test_a_moved_table_whose_stream_left_no_record_is_refused_in_one_line(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A stream of the previous release recorded nothing but its commits: moved, the table cannot
    tell it from a new stream of another seed, so it is refused, naming the id to set."""
    moved = tmp_path / "t"
    shutil.copytree(FIXTURE, moved)
    refused = run_cli(f"--set=table.path={moved}", "--set=table.partition_by=[]", "--set=metrics.port=0",
                      "--set=source.generator.max_rows=3000", "stream", "--available-now", cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "stream.id" in line and f'stream.id = "{FIXTURE_ID}" to continue it' in line, line
    assert not (moved / "_lakecluster/streams").joinpath(RECORD).exists()
    assert keys(moved) == list(range(2_000))  # nothing was read

    reports = StreamJob(generator(str(moved), 3_000, **{"stream.id": FIXTURE_ID}), spark=spark,
                        available_now=True).run()  # fmt: skip
    assert sum(r.rows for r in reports) == 1_000 and keys(moved) == list(range(3_000))


KAFKA = {"kind": "kafka", "servers": ["a:9092", "b:9092"], "topics": ["orders"], "pattern": None}


def kafka(servers: str = "a:9092,b:9092", topics: str = '["orders"]', **extra: str) -> Config:
    return load_config(overrides={"table.path": "/lake/t", "source.kind": "kafka",
                                  "source.kafka.bootstrap_servers": servers, "source.kafka.topics": topics, **extra},
                       environ={})  # fmt: skip


def no_commits(_: str) -> Mapping[str, Any] | None:
    return None


def test_a_recorded_stream_is_found_by_its_source_whatever_its_id() -> None:
    records: dict[str, StreamRecord | None] = {"kafka-0123456789ab": StreamRecord("kafka-0123456789ab", KAFKA)}
    assert resolve(kafka(), records, no_commits) == "kafka-0123456789ab"
    assert resolve(kafka("b:9092, a:9092"), records, no_commits) == "kafka-0123456789ab"  # the same servers
    assert resolve(kafka(**{"stream.id": "mine"}), records, no_commits) == "mine"  # set: as set
    other = kafka(topics='["returns"]')  # other topics: a new stream, under the id derived for it
    assert resolve(other, records, no_commits) == stream_id_of(other) != "kafka-0123456789ab"
    assert resolve(kafka(), {}, no_commits) == stream_id_of(kafka())


def test_a_source_whose_settings_changed_is_refused_naming_stream_id() -> None:
    records: dict[str, StreamRecord | None] = {"kafka-0123456789ab": StreamRecord("kafka-0123456789ab", KAFKA)}
    with pytest.raises(ConfigError, match=r'reads topics orders from a:9092, b:9092; this configuration reads topics '
                                          r'orders from c:9092: set stream.id = "kafka-0123456789ab"') as refused:
        resolve(kafka("c:9092"), records, no_commits)
    assert refused.value.key == "stream.id"
    with pytest.raises(ConfigError, match=r"stream\.id"):  # a topic more: orders would be read again
        resolve(kafka(topics='["orders", "returns"]'), records, no_commits)
    twice = {**records, "kafka-ba9876543210": StreamRecord("kafka-ba9876543210", KAFKA)}
    with pytest.raises(ConfigError, match="2 streams of this source"):
        resolve(kafka(), twice, no_commits)


def test_a_stream_without_a_record_is_told_apart_by_what_its_commits_read() -> None:
    legacy: dict[str, StreamRecord | None] = {"kafka-aaaaaaaaaaaa": None}
    read_orders = {"source": "kafka", "offsets": json.dumps({"orders": {"0": 10}})}
    with pytest.raises(ConfigError, match=r'set stream\.id = "kafka-aaaaaaaaaaaa" to continue it'):
        resolve(kafka(), legacy, lambda _: read_orders)
    other = kafka(topics='["returns"]')
    assert resolve(other, legacy, lambda _: read_orders) == stream_id_of(other)
    assert resolve(kafka(), legacy, no_commits) == stream_id_of(kafka())  # a folder no commit names
