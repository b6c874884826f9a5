"""lakecluster on a Spark standalone cluster (a master and a worker with two cores on loopback), unchanged:
the stream, a compaction round, ``explain``, ``vacuum`` and ``status`` with ``--master spark://...``
on an ``s3://`` table (a real S3 server) whose endpoint and credentials only the driver's AWS
environment holds (the workers have none); delta-rs reads every step back."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import SMALL
from tests.services.process import TEST_JVM
from tests.services.s3 import S3Server
from tests.services.spark_cluster import SparkCluster

pytestmark = pytest.mark.integration

ROWS = 4_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    server = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=1, cores=2)
    try:
        yield server.start()
    finally:
        server.stop()


def test_stream_compact_explain_vacuum_and_status_run_on_a_standalone_cluster(
    cluster: SparkCluster, s3: S3Server, s3_prefix: str, tmp_path: Path
) -> None:
    uri = f"{s3_prefix.rstrip('/')}/lineorder"
    settings = {
        **SMALL, "table.path": uri, "table.partition_by": "[]", "spark.master": cluster.master_url,
        "source.generator.max_rows": str(ROWS), "source.generator.max_rows_per_trigger": "2000",
        "source.generator.partitions": "2", "stream.max_records_per_file": "250",
        "spark.java_options": TEST_JVM,  # the executors' JVM options too
    }  # fmt: skip
    args = [f"--set={k}={v}" for k, v in settings.items()]

    def cli(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(lakecluster_cmd(*args, *command), capture_output=True, text=True, cwd=tmp_path,
                              env=subprocess_env(**s3.aws_environment()), timeout=900)  # fmt: skip

    shown = cli("--json", "config")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert s3.secret_key not in shown.stdout and json.loads(shown.stdout)["storage"]["s3_endpoint"] is None
    streamed = cli("stream", "--available-now")
    assert streamed.returncode == 0, streamed.stdout[-2000:] + streamed.stderr[-3000:]
    assert not [*tmp_path.rglob("*.parquet"), *tmp_path.rglob("_delta_log")], "an s3:// table stays on S3"
    table = DeltaTable(uri, storage_options=s3.storage_options())
    files_streamed = len(table.file_uris())
    assert files_streamed >= ROWS // 250, "the stream writes files of at most 250 records"

    compacted = cli("compact", "--once")
    assert compacted.returncode == 0, compacted.stdout[-2000:] + compacted.stderr[-3000:]
    table = DeltaTable(uri, storage_options=s3.storage_options())
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    assert len(table.file_uris()) < files_streamed
    keys = sorted(table.to_pyarrow_table(columns=["lo_orderkey"]).column("lo_orderkey").to_pylist())
    assert keys == list(range(ROWS)), "every generated row exactly once"

    explained = cli("--json", "explain", "--where", "d_year = 1995")
    assert explained.returncode == 0, explained.stderr[-3000:]
    assert json.loads(explained.stdout)["files_total"] == len(table.file_uris()), explained.stdout

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

    # The work ran on the cluster's executors: the master saw the three Spark applications (stream,
    # compact, vacuum) finish, a moment after each driver exited, and the worker ran their executors.
    deadline = time.monotonic() + 60
    while len(done := cluster.status().get("completedapps", [])) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(done) >= 3, done
    for i in range(cluster.workers):
        assert any((cluster.workdir / f"worker-{i}").rglob("stderr")), f"worker {i} ran no executor"


def test_a_local_table_path_is_refused_with_a_cluster_master(cluster: SparkCluster, tmp_path: Path) -> None:
    result = subprocess.run(
        lakecluster_cmd(f"--set=spark.master={cluster.master_url}", f"--set=table.path={tmp_path / 't'}", "stream"),
        capture_output=True, text=True, cwd=tmp_path, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "config key 'table.path'" in result.stderr and "is a local path" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "t").exists()
