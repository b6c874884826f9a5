"""The key-prefixed column-stats index: per-file stats of the table's columns, kept in step with
the Delta log (:func:`sync`), and the files a where-clause must read (:func:`prune`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakecluster.index.prune import PruneResult, prune
    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import SyncResult, rebuild, sync

_WHERE = {"prune": "lakecluster.index.prune", "PruneResult": "lakecluster.index.prune",
          "IndexSpec": "lakecluster.index.spec", "sync": "lakecluster.index.sync", "rebuild": "lakecluster.index.sync",
          "SyncResult": "lakecluster.index.sync"}  # fmt: skip
__all__ = ["IndexSpec", "PruneResult", "SyncResult", "prune", "rebuild", "sync"]


def __getattr__(name: str) -> Any:  # imported on first use
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'lakecluster.index' has no attribute {name!r}")
