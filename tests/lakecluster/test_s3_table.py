"""A Kafka stream into an ``s3://`` table on a real S3 server, its endpoint and credentials in the
configuration: the table, the quarantine, the checkpoint and the sketches all land on S3, delta-rs
reads them back. (Stream, compaction, explain, vacuum and status on S3: tests/lakecluster/test_cluster.py.)"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from tests.conftest import lakecluster_cmd, subprocess_env
from tests.services.kafka import KafkaBroker
from tests.services.s3 import S3Server
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration


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
