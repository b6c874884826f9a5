"""Files Spark's file scans really read for a query: the ``numFiles`` metric of every scan in the
executed plan (adaptive plans and query stages included), summed."""

from __future__ import annotations

from typing import Any


def files_scanned(frame: Any) -> int:
    """After ``frame`` has run (collect it first): the files its scans read."""
    files = 0

    def walk(node: Any) -> None:
        nonlocal files
        metric = node.metrics().get("numFiles")  # a file scan's "number of files read"
        if metric.isDefined():
            files += int(metric.get().value())
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            walk(node.finalPhysicalPlan())
        elif kind.endswith("QueryStageExec"):
            walk(node.plan())
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(frame._jdf.queryExecution().executedPlan())
    return files
