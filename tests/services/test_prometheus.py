"""The tests' Prometheus server dies with the process that started it, as the other servers do
(tests/services/process.py): a test run killed by a CI timeout leaves no server behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, subprocess_env
from tests.services.watchdog import start_time

pytestmark = pytest.mark.integration

STARTER = """
import sys, time
from pathlib import Path
from tests.prometheus import start_prometheus
server = start_prometheus(Path(sys.argv[1]))
print(server.process.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one reaps yet does not: the killed starter cannot)."""
    return start_time(pid) is not None


def test_a_killed_starter_takes_its_prometheus_with_it(tmp_path: Path) -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                               text=True, env=subprocess_env(PYTHONPATH=str(REPO)))  # fmt: skip
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        assert alive(pid)
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=30)
        deadline = time.monotonic() + 20
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        gone = not alive(pid)
        if not gone:
            os.kill(pid, signal.SIGKILL)
        assert gone, "prometheus outlived the process that started it"
    finally:
        starter.kill()
        starter.wait(timeout=30)
