"""Two Delta writers in two JVMs commit to one ``s3://`` table at the same moments: every commit
lands, none replaces another (lakecluster's LogStore: one conditional PUT per log version).

Run as a script, this file is one writer: a Spark session with lakecluster's settings that appends
``rounds`` small batches, each after a barrier shared with the other writer, so that both read the
same table version and race for the next one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 3  # both writers race for each round's version: the loser retries on the next
ROWS = 25


def _writer(uri: str, name: str, other: str, barrier: Path, storage: dict[str, str], logstore: str | None) -> None:
    from lakecluster.config import SparkConfig, StorageConfig
    from lakecluster.spark import get_session

    extra = {f"spark.delta.logStore.{s}.impl": logstore for s in ("s3", "s3a")} if logstore else {}
    spark = get_session(SparkConfig(master="local[1]"), StorageConfig(**storage), s3=True, app_name=name, extra=extra)
    (barrier / f"{name}-up").touch()
    for i in range(ROUNDS):
        (barrier / f"{name}-{i}").touch()
        deadline = time.monotonic() + 300
        while not (barrier / f"{other}-{i}").exists():  # both writers start round i together
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: {other} never reached round {i}")
            time.sleep(0.01)
        rows = [(name, i, j) for j in range(ROWS)]
        spark.createDataFrame(rows, "writer string, round int, j int").write.format("delta").mode("append").save(uri)
    spark.stop()


@pytest.mark.integration
def test_two_jvms_appending_at_once_lose_no_commit(s3, s3_prefix: str, tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri = f"{s3_prefix.rstrip('/')}/racers"
    schema = pa.schema([("writer", pa.string()), ("round", pa.int32()), ("j", pa.int32())])
    write_deltalake(uri, schema.empty_table(), storage_options=s3.storage_options())
    storage = s3.storage_settings()
    logstore = os.environ.get("S3_WRITERS_LOGSTORE", "")  # only to show what Delta's own store does
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKECLUSTER_")}
    env["PYTHONPATH"] = str(REPO)
    writers = {}
    for name, other in (("a", "b"), ("b", "a")):
        command = [sys.executable, __file__, uri, name, other, str(tmp_path), json.dumps(storage), logstore]
        writers[name] = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)  # fmt: skip
    outputs = {name: p.communicate(timeout=600)[0] for name, p in writers.items()}
    for name, p in writers.items():
        assert p.returncode == 0, f"writer {name} failed:\n{outputs[name][-3000:]}"

    table = DeltaTable(uri, storage_options=s3.storage_options())
    assert table.version() == 2 * ROUNDS, "one log version per append, none written twice"
    data = table.to_pyarrow_table().to_pylist()
    assert len(data) == 2 * ROUNDS * ROWS
    assert {(r["writer"], r["round"], r["j"]) for r in data} == {
        (w, i, j) for w in "ab" for i in range(ROUNDS) for j in range(ROWS)
    }
    # Both read the same version and raced for the next one at least once: the loser retried on a
    # later version (its commit says which version it read).
    history = [h for h in table.history() if h["version"] > 0]  # version 0: the table created by delta-rs
    assert len(history) == 2 * ROUNDS
    assert any(h["readVersion"] < h["version"] - 1 for h in history), [
        (h["version"], h.get("readVersion")) for h in history
    ]


if __name__ == "__main__":
    _writer(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6] or None)
