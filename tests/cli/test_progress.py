"""Progress on stdout for the long-running commands, and quiet stdout beside JSON logs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import filled_for_subprocesses
from tests.services.process import group_gone_within

pytestmark = pytest.mark.integration


def _compact_until(args: list[str], done: str, stream: str, *, ctrl_c: bool = False) -> tuple[str, str]:
    """Run ``compact`` (the service loop) until ``done`` appears on ``stream``, then stop it: SIGTERM
    to the process, or with ``ctrl_c`` SIGINT to its whole process group (the JVM and the Python
    workers too), as Ctrl-C in a terminal does; either way it must exit 0 and leave no process."""
    cmd = lakecluster_cmd(*args, "--set=compaction.interval_s=0.5", "--set=stream.progress=true",
                          "--set=vacuum.interval_s=0", "compact")  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
                            start_new_session=True)  # fmt: skip
    outputs: dict[str, list[str]] = {"stdout": [], "stderr": []}
    seen = threading.Event()

    def read(name: str, pipe: IO[str]) -> None:
        for line in pipe:
            outputs[name].append(line)
            if name == stream and done in line:
                seen.set()

    readers = [threading.Thread(target=read, args=(name, pipe), daemon=True)
               for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))]  # fmt: skip
    for r in readers:
        r.start()
    try:
        seen.wait(600)
        if ctrl_c:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        pass  # reported below, with the output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for r in readers:
        r.join(timeout=10)
    out, err = "".join(outputs["stdout"]), "".join(outputs["stderr"])
    assert seen.is_set(), f"no {done!r} on {stream}: " + (out + err)[-3000:]
    assert proc.returncode == 0, f"exit {proc.returncode}: " + (out + err)[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    assert group_gone_within(proc.pid, 30), "the JVM or a Python worker outlived the driver"
    return out, err


def test_the_compactor_shows_each_round_and_group_with_what_is_left(filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    args = filled_for_subprocesses(filled, tmp_path / "t")
    out, err = _compact_until(args, "left 0 group(s)", "stdout", ctrl_c=True)
    lines = [ln for ln in out.splitlines() if ln.startswith("compaction:")]
    assert lines, out + err[-2000:]
    head = re.fullmatch(r"compaction: version (\d+), (\d+) group\(s\), ([\d.,]+) (B|KiB|MiB|GiB) to rewrite", lines[0])
    assert head, lines[0]
    groups = int(head.group(2))
    assert groups >= 1
    for i, line in enumerate(lines[1 : groups + 1], start=1):
        assert line.startswith(f"compaction: group {i}/{groups} committed: "), line
        assert f"left {groups - i} group(s)" in line and "point-query files" in line, line
    assert lines[groups].endswith("left 0 group(s), 0 B")


def test_beside_json_logs_stdout_stays_quiet_and_log_lines_are_json(filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    args = filled_for_subprocesses(filled, tmp_path / "t")
    out, err = _compact_until(["--log-format=json", "--log-level=INFO", *args], '"message": "compacted', "stderr")
    assert out == ""  # no progress lines, no banner: only the log stream
    ours = [json.loads(ln) for ln in err.splitlines() if ln.startswith("{")]
    assert any(r["logger"] == "lakecluster.cli" and r["message"].startswith("lakecluster compact: ") for r in ours)
    assert any(r["message"].startswith("compacted ") and r["level"] == "INFO" for r in ours), err[-3000:]
    assert not any(ln.startswith("compaction:") for ln in err.splitlines())
