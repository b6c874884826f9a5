"""An ``s3://`` table end to end on a real S3 server: the stream writes it through delta-spark and
hadoop-aws, the compactor rewrites it, the index answers ``explain``, delta-rs reads it back."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from tests.compaction.test_compaction import SMALL
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.services.kafka import KafkaBroker
from tests.services.s3 import S3Server
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration

ROWS = 6_000


def test_stream_compact_and_explain_on_an_s3_table(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    uri = f"{s3_prefix.rstrip('/')}/lineorder"
    settings = {
        **SMALL, "table.path": uri, "table.partition_by": "[]",
        **s3.lakecluster_settings(),
        "source.generator.max_rows": str(ROWS), "source.generator.max_rows_per_trigger": "2000",
        "stream.max_records_per_file": "400",
    }  # fmt: skip
    args = [f"--set={k}={v}" for k, v in settings.items()]

    def cli(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(lakecluster_cmd(*args, *command), capture_output=True, text=True, cwd=tmp_path,
                              env=subprocess_env(), timeout=600)  # fmt: skip

    streamed = cli("stream", "--available-now")
    assert streamed.returncode == 0, streamed.stdout[-2000:] + streamed.stderr[-3000:]
    assert not [*tmp_path.rglob("*.parquet"), *tmp_path.rglob("_delta_log")], "an s3:// table stays on S3"
    table = DeltaTable(uri, storage_options=s3.storage_options())
    files_streamed = len(table.file_uris())
    assert files_streamed >= ROWS // 400, "the stream writes files of at most 400 records"

    compacted = cli("compact", "--once")
    assert compacted.returncode == 0, compacted.stdout[-2000:] + compacted.stderr[-3000:]
    table = DeltaTable(uri, storage_options=s3.storage_options())
    assert len(table.file_uris()) < files_streamed
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    keys = sorted(table.to_pyarrow_table(columns=["lo_orderkey"]).column("lo_orderkey").to_pylist())
    assert keys == list(range(ROWS)), "every generated row exactly once"

    explained = cli("--json", "explain", "--where", "d_year = 1995")
    assert explained.returncode == 0, explained.stderr[-3000:]
    report = json.loads(explained.stdout)
    assert report["files_total"] == len(table.file_uris()), report

    # Vacuum with no retention deletes exactly the files the rewrite replaced; the table still reads.
    vacuumed = cli("--json", "vacuum", "--retention", "0", "--force")
    assert vacuumed.returncode == 0, vacuumed.stdout[-2000:] + vacuumed.stderr[-3000:]
    fs = s3.filesystem()
    root = uri.removeprefix("s3://")
    on_s3 = {f.path for f in fs.get_file_info(pafs.FileSelector(root, recursive=True))
             if f.path.endswith(".parquet") and "/_" not in f.path.removeprefix(root)}  # fmt: skip
    live = {u.removeprefix("s3://") for u in DeltaTable(uri, storage_options=s3.storage_options()).file_uris()}
    assert on_s3 == live
    keys = DeltaTable(uri, storage_options=s3.storage_options()).to_pyarrow_table(columns=["lo_orderkey"])
    assert sorted(keys.column("lo_orderkey").to_pylist()) == list(range(ROWS))

    status = cli("--json", "status")
    assert status.returncode == 0, status.stderr[-3000:]
    seen = json.loads(status.stdout)
    assert seen["rows"] == ROWS and seen["files"] == len(live)
    assert seen["vacuum"]["last_run"] is not None and seen["compaction"]["last_rewrite"] is not None


def test_kafka_stream_with_quarantine_checkpoint_and_sketches_on_s3(
    s3: S3Server, s3_prefix: str, broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"s3_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 3)
    records = kr.build(0, 500, partitions=3, seed=21)
    broker.produce(topic, [(r.partition, r.value) for r in records])
    uri = f"{s3_prefix.rstrip('/')}/orders"
    config = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=uri)  # type: ignore[arg-type]
    settings = {**s3.lakecluster_settings(), "metrics.port": "0"}
    command = lakecluster_cmd("--config", str(config), *[f"--set={k}={v}" for k, v in settings.items()],
                              "stream", "--available-now")  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=subprocess_env(), timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    local = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "c.toml"]
    assert local == [], "table, quarantine, checkpoint and sketches stay on S3"

    options = s3.storage_options()
    assert kr.table_rows(DeltaTable(uri, storage_options=options).to_pyarrow_table()) == kr.expected_rows(records)
    quarantine = DeltaTable(f"{uri}_quarantine", storage_options=options).to_pyarrow_table().to_pylist()
    assert sorted(q["raw_value"] or b"" for q in quarantine) == sorted(r.value or b"" for r in records if r.reason)
    fs = s3.filesystem()
    root = uri.removeprefix("s3://")
    kept = [f.path for f in fs.get_file_info(pafs.FileSelector(f"{root}/_lakecluster/streams", recursive=True))]
    assert any("/checkpoint/commits/" in p for p in kept), kept
    assert any(p.endswith(".sketches") for p in kept), kept
