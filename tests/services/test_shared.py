"""A server for the whole run: started once however many workers ask, and living until its owner
(the run's controller) is gone, not only until the worker that started it is."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.services import shared
from tests.services.watchdog import start_time


def test_the_first_caller_starts_the_server_and_every_caller_attaches(tmp_path_factory: pytest.TempPathFactory) -> None:
    name = f"server-{uuid.uuid4().hex[:8]}"
    starts: list[tuple[Path, int]] = []

    def start(workdir: Path, owner: int) -> dict[str, Any]:
        starts.append((workdir, owner))
        if len(starts) == 1:
            raise OSError("the first start fails")
        return {"port": 1234}

    with pytest.raises(OSError, match="first start fails"):
        shared.run_wide(name, tmp_path_factory, start, lambda state: state)
    assert [shared.run_wide(name, tmp_path_factory, start, lambda state: state["port"]) for _ in range(3)] == [1234] * 3
    assert len(starts) == 2, "a failed start is tried again, a good one never"
    assert starts[1][0].is_dir() and starts[1][0].parent == tmp_path_factory.getbasetemp().parent


def test_a_server_outlives_its_starter_and_ends_with_its_owner(tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "300"])
    starter = f"""
import sys
from pathlib import Path
from tests.services.process import spawn
server = spawn(["sleep", "300"], log=Path(sys.argv[1]), cwd=Path(sys.argv[1]).parent, owner={owner.pid})
print(server.pid)
"""
    try:
        done = subprocess.run([sys.executable, "-c", starter, str(tmp_path / "log")], cwd=REPO, capture_output=True,
                              text=True, timeout=60, check=True)  # fmt: skip
        watchdog = int(done.stdout)
        deadline = time.monotonic() + 30
        while not (children := subprocess.run(["pgrep", "-P", str(watchdog)], capture_output=True,
                                              text=True).stdout.split()) and time.monotonic() < deadline:  # fmt: skip
            time.sleep(0.2)
        [server] = map(int, children)
        time.sleep(1)  # the watchdog's first looks at its owner
        assert start_time(server) is not None, "the server ended with the process that started it"
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 15
        while {start_time(server), start_time(watchdog)} != {None} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert start_time(server) is None and start_time(watchdog) is None, "the server outlived its owner"
    finally:
        owner.kill()
        owner.wait()
