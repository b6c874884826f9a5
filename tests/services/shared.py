"""One server for a whole test run, shared by pytest-xdist's workers.

The first worker that needs it starts it; the others attach to it: a file under the run's
temporary root (``<basetemp>/..``, the same for every worker of a run, another for every run) says
where it is, and a lock on that root keeps two workers from starting it at once. It lives until
the run's controller process exits (``process.spawn(owner=...)``): the worker that started it may
be done first. A run without workers starts it in its one process, and stops it at the end.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def run_wide(
    name: str,
    factory: pytest.TempPathFactory,
    start: Callable[[Path, int], dict[str, Any]],
    attach: Callable[[dict[str, Any]], T],
) -> T:
    """The run's server called ``name``: ``start(workdir, owner_pid)`` starts it and returns what
    ``attach`` needs to reach it; ``attach`` is called in every worker, the starter included."""
    root = factory.getbasetemp().parent
    state = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not state.exists():  # a failed start leaves no state: the next worker tries again
            controller = os.getppid()  # a worker's parent
            if controller == 1:
                raise RuntimeError(f"the run's controller is gone: {name} not started")
            workdir = root / name
            workdir.mkdir(exist_ok=True)
            state.write_text(json.dumps(start(workdir, controller)))
    return attach(json.loads(state.read_text()))
