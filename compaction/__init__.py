"""The compaction loop: re-clusters fragmented file groups by a Hilbert or Z key and commits each
rewrite atomically (:class:`Compactor`); vacuum on a schedule; the table gauges."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakecluster.compaction.loop import Compactor

__all__ = ["Compactor"]


def __getattr__(name: str) -> Any:  # imported on first use: a Spark task imports this package
    if name == "Compactor":
        return importlib.import_module("lakecluster.compaction.loop").Compactor
    raise AttributeError(f"module 'lakecluster.compaction' has no attribute {name!r}")
