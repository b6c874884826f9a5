"""A running compactor takes new thresholds from its config file, on change or on SIGHUP; probed
once a second as a kubelet does, it turns ready after its first round, not after the vacuum that
follows."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import SMALL, filled_for_subprocesses
from tests.probes import Kubelet, assert_ready_before_a_vacuum_ended_and_from_then_on
from tests.services.ports import free_port

pytestmark = pytest.mark.integration


def _config(table: Path, port: int, **thresholds: int) -> str:
    compaction = {k.removeprefix("compaction."): v for k, v in SMALL.items() if k.startswith("compaction.")}
    compaction.update({k: str(v) for k, v in thresholds.items()})
    lines = ["[table]", f'path = "{table}"', "partition_by = []", "[compaction]"]
    lines += [f"{k} = {v}" for k, v in compaction.items()]
    lines += ["[metrics]", f"port = {port}", "[stream]", "progress = false"]
    return "\n".join(lines) + "\n"


def _metrics(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _thresholds(port: int) -> dict[str, str]:
    (sample,) = _metrics(port)["lakecluster_compaction_thresholds_info"]
    return dict(sample.labels)


def _committed(port: int) -> float:
    samples = _metrics(port)["lakecluster_compaction_groups"]
    return sum(s.value for s in samples if s.labels.get("result") == "committed" and s.name.endswith("_total"))


def _wait(what: str, check, timeout_s: float = 300) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:  # the endpoint is not up yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_changed_thresholds_apply_without_a_restart(filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    filled_for_subprocesses(filled, table)
    port = free_port()
    config = tmp_path / "lakecluster.toml"
    config.write_text(_config(table, port, min_input_files=1000))  # more files than the table has: no group
    log = tmp_path / "compact.log"
    # Each vacuum (the first follows the first round) is held a few seconds.
    env = subprocess_env(LAKECLUSTER_TEST_PAUSE_AT="vacuum:6")
    proc = subprocess.Popen(lakecluster_cmd("--config", str(config), "--log-level", "INFO", "compact"),
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    kubelet = Kubelet(port)
    try:
        _wait("the first rounds", lambda: _metrics(port)["lakecluster_compaction_runs"][0].value >= 3)
        assert _thresholds(port)["min_input_files"] == "1000"
        assert _committed(port) == 0

        # The file changes: the next round plans with the new threshold and compacts.
        config.write_text(_config(table, port, min_input_files=2))
        _wait("a group committed under the new threshold", lambda: _committed(port) > 0)
        assert _thresholds(port)["min_input_files"] == "2"
        assert "compaction.min_input_files: 1000 -> 2" in log.read_text()

        # A change the file's timestamp does not show is picked up on SIGHUP.
        stamp = config.stat()
        config.write_text(_config(table, port, min_input_files=2, target_file_bytes=70000))
        os.utime(config, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        time.sleep(3)  # several rounds
        assert _thresholds(port)["target_file_bytes"] == "60000"
        proc.send_signal(signal.SIGHUP)
        _wait("the SIGHUP reload", lambda: _thresholds(port)["target_file_bytes"] == "70000", timeout_s=60)
        assert "(SIGHUP): compaction.target_file_bytes: 60000 -> 70000" in log.read_text()

        # An invalid file is refused and the compactor carries on with what it has.
        config.write_text(_config(table, port, min_input_files=2, target_file_bytes=-5))
        _wait("the refusal", lambda: "configuration not reloaded" in log.read_text(), timeout_s=60)
        assert "compaction.target_file_bytes" in log.read_text().split("configuration not reloaded")[-1]
        assert _thresholds(port)["target_file_bytes"] == "70000"
        assert proc.poll() is None
        assert_ready_before_a_vacuum_ended_and_from_then_on(kubelet.stop())
    finally:
        kubelet.stop()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    assert proc.returncode == 0, log.read_text()[-3000:]
