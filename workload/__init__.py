"""The workload: the queries readers run on the table, as the layout is chosen for them.

A listener in reader applications captures their scans of the table (``listener``, the Java
``WorkloadListener``), Spark event logs are imported into the same capture files (``eventlog``,
``plan_filters``, ``eventlog_import``), the capture files are read back and expired (``capture``),
and captured scans are grouped into weighted queries (``captured``) of the workload model
(``queries``). Nothing here rewrites or decides a layout: ``lakecluster.layout`` does.
"""

from lakecluster.workload.capture import ExpiryReport, expire

__all__ = ["ExpiryReport", "expire"]  # what the compactor needs: the capture's expiry, on its schedule
