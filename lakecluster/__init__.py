"""lakecluster: streaming ingestion into Delta tables, kept compact and clustered.

The shared core of the components: configuration, errors, the table handle (:class:`LakeTable`:
locations, the Delta log, live files, sketches, the table's state), the one commit protocol every
writer goes through (:func:`commit` of a :class:`CommitPlan`), Parquet writing, boundary sketches,
curves and layouts. The components live in ``lakecluster.stream`` (its sources follow
``lakecluster.stream.Source``), ``lakecluster.compaction`` and ``lakecluster.index`` (the top-level
``stream/``, ``compaction/`` and ``index/`` folders of the repository); the core imports none of them.

Names are imported on first use, so ``import lakecluster`` stays light (a Spark task imports it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakecluster.commit import CommitPlan, Committed, commit
    from lakecluster.config import Config, load_config
    from lakecluster.errors import ConfigError, LakeclusterError
    from lakecluster.table import LakeTable, TableState

_WHERE = {
    "CommitPlan": "lakecluster.commit", "Committed": "lakecluster.commit", "commit": "lakecluster.commit",
    "Config": "lakecluster.config", "load_config": "lakecluster.config",
    "ConfigError": "lakecluster.errors", "LakeclusterError": "lakecluster.errors",
    "LakeTable": "lakecluster.table", "TableState": "lakecluster.table",
}  # fmt: skip

__all__ = ["CommitPlan", "Committed", "Config", "ConfigError", "LakeTable", "LakeclusterError", "TableState",
           "commit", "load_config"]  # fmt: skip
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'lakecluster' has no attribute {name!r}")
