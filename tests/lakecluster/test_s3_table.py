"""An ``s3://`` table end to end on a real S3 server: the stream writes it through delta-spark and
hadoop-aws, the compactor rewrites it, the index answers ``explain``, delta-rs reads it back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.compaction.test_compaction import SMALL
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.services.s3 import S3Server

pytestmark = pytest.mark.integration

ROWS = 6_000


def test_stream_compact_and_explain_on_an_s3_table(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    uri = f"{s3_prefix.rstrip('/')}/lineorder"
    settings = {
        **SMALL, "table.path": uri, "table.partition_by": "[]",
        "storage.s3_endpoint": s3.endpoint, "storage.s3_region": s3.region,
        "storage.s3_access_key_id": s3.access_key, "storage.s3_secret_access_key": s3.secret_key,
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
