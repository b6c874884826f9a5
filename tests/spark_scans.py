"""What Spark's file scans really read for a query: the ``numFiles`` and ``filesSize`` metrics of
every scan in the executed plan (adaptive plans and query stages included), summed."""

from __future__ import annotations

from typing import Any


def _scan_metric(frame: Any, name: str) -> int:
    total = 0

    def walk(node: Any) -> None:
        nonlocal total
        metric = node.metrics().get(name)  # a file scan's driver metric; other nodes lack it
        if metric.isDefined():
            total += int(metric.get().value())
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            walk(node.finalPhysicalPlan())
        elif kind.endswith("QueryStageExec"):
            walk(node.plan())
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(frame._jdf.queryExecution().executedPlan())
    return total


def files_scanned(frame: Any) -> int:
    """After ``frame`` has run (collect it first): the files its scans read."""
    return _scan_metric(frame, "numFiles")


def bytes_scanned(frame: Any) -> int:
    """After ``frame`` has run (collect it first): the bytes of the files its scans read."""
    return _scan_metric(frame, "filesSize")
