"""Printing results as text or JSON, and leaving quietly when the reader of the output goes away."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def emit(data: Any, text: str, fmt: str) -> None:
    """Print ``data`` as JSON, or ``text`` for people."""
    if fmt == "json":
        print(json.dumps(data, indent=2, default=str), flush=True)
    else:
        print(text, flush=True)


def quiet_broken_pipe() -> None:
    """`lakecluster ... | head`: the reader closed the pipe; exit without a traceback.

    Python would report the failed flush of stdout at exit; pointing stdout at /dev/null first
    makes that flush succeed.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
