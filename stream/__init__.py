"""The streaming ingestion job: records from a :class:`Source` (Kafka, or the built-in generator)
into a Delta table, with malformed records quarantined and per-column boundary sketches kept up
to date (:class:`StreamJob`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakecluster.stream.job import StreamJob
    from lakecluster.stream.source import Source, open_source

_WHERE = {"Source": "lakecluster.stream.source", "open_source": "lakecluster.stream.source",
          "StreamJob": "lakecluster.stream.job"}  # fmt: skip
__all__ = ["Source", "StreamJob", "open_source"]


def __getattr__(name: str) -> Any:  # imported on first use: a Spark task imports this package
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'lakecluster.stream' has no attribute {name!r}")
