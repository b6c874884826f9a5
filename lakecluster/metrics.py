"""Prometheus metrics of the stream and the compactor, on one registry and one HTTP endpoint.

Names follow Prometheus conventions (``_total`` counters, ``_seconds``, ``_bytes``). Every metric
is listed with its meaning in docs/compaction.md ("Metrics"); tests/lakecluster/test_metrics.py
checks them through a real Prometheus server against the Delta log.
"""

from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)
REGISTRY = CollectorRegistry(auto_describe=True)

STREAM_BATCHES = Counter("lakecluster_stream_batches_total", "Micro-batches run (empty ones included)",
                         registry=REGISTRY)  # fmt: skip
STREAM_ROWS = Counter("lakecluster_stream_rows_total", "Rows committed to the table", registry=REGISTRY)
STREAM_QUARANTINED = Counter("lakecluster_stream_quarantined_total", "Records sent to the quarantine table",
                             registry=REGISTRY)  # fmt: skip
STREAM_FILES = Counter("lakecluster_stream_files_total", "Data files written by the stream", registry=REGISTRY)
STREAM_BATCH_SECONDS = Histogram("lakecluster_stream_batch_seconds", "Wall time of a micro-batch (write+commit)",
                                 registry=REGISTRY, buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))  # fmt: skip

COMPACTION_RUNS = Counter("lakecluster_compaction_runs_total", "Compaction planning rounds", registry=REGISTRY)
COMPACTION_GROUPS = Counter("lakecluster_compaction_groups_total", "Groups by outcome", ["result"], registry=REGISTRY)
COMPACTION_FILES_IN = Counter("lakecluster_compaction_files_removed_total", "Input files rewritten",
                              registry=REGISTRY)  # fmt: skip
COMPACTION_FILES_OUT = Counter("lakecluster_compaction_files_added_total", "Output files written",
                               registry=REGISTRY)  # fmt: skip
COMPACTION_BYTES_IN = Counter("lakecluster_compaction_bytes_read_total", "Bytes of input files rewritten",
                              registry=REGISTRY)  # fmt: skip
COMPACTION_BYTES_OUT = Counter("lakecluster_compaction_bytes_written_total", "Bytes of output files",
                               registry=REGISTRY)  # fmt: skip
COMPACTION_GROUP_SECONDS = Histogram("lakecluster_compaction_group_seconds", "Wall time of one group rewrite",
                                     registry=REGISTRY, buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 900))  # fmt: skip

TABLE_VERSION = Gauge("lakecluster_table_version", "Delta version last seen", registry=REGISTRY)
TABLE_FILES = Gauge("lakecluster_table_files", "Live data files", registry=REGISTRY)
TABLE_BYTES = Gauge("lakecluster_table_bytes", "Bytes of live data files", registry=REGISTRY)
FILES_SCANNED = Gauge("lakecluster_point_query_files_estimate",
                      "Expected files a point query on the column reads (clustering depth)", ["column"],
                      registry=REGISTRY)  # fmt: skip
STREAM_SOURCE_WAITS = Counter("lakecluster_stream_source_waits_total",
                              "Episodes of a micro-batch waiting longer than stream.source_wait_warning_s for the "
                              "source's offsets (brokers unreachable)", registry=REGISTRY)  # fmt: skip
STREAM_WAITING = Gauge("lakecluster_stream_waiting_for_source",
                       "1 while a micro-batch has waited longer than stream.source_wait_warning_s for the source",
                       registry=REGISTRY)  # fmt: skip
STREAM_LAG = Gauge("lakecluster_stream_lag_records",
                   "Records the brokers hold past the offsets the table committed, per topic-partition "
                   "(measured every stream.lag_interval_s)", ["topic", "partition"], registry=REGISTRY)  # fmt: skip
SERVICE_FAILURES = Counter("lakecluster_service_failures_total",
                           "Faults of a service by kind (transient, fatal, unknown)", ["service", "kind"],
                           registry=REGISTRY)  # fmt: skip
SERVICE_RESTARTS = Counter("lakecluster_service_restarts_total", "Retries of a service after a fault", ["service"],
                           registry=REGISTRY)  # fmt: skip
VACUUM_FILES = Counter("lakecluster_vacuum_deleted_files_total", "Files deleted by vacuum", registry=REGISTRY)
VACUUM_BYTES = Counter("lakecluster_vacuum_deleted_bytes_total", "Bytes of files deleted by vacuum", registry=REGISTRY)
VACUUM_LAST_SUCCESS = Gauge("lakecluster_vacuum_last_success_timestamp_seconds", "When vacuum last completed",
                            registry=REGISTRY)  # fmt: skip
PENDING_GROUPS = Gauge("lakecluster_compaction_pending_groups", "Groups the last plan found", registry=REGISTRY)

_server_lock = threading.Lock()
_server_port: int | None = None


def serve(port: int, host: str = "127.0.0.1") -> int | None:
    """Start the /metrics endpoint once per process (port 0 = off). Returns the port."""
    global _server_port
    if port == 0:
        return None
    with _server_lock:
        if _server_port is None:
            start_http_server(port, addr=host, registry=REGISTRY)
            _server_port = port
            log.info("metrics on http://%s:%d/metrics", host, port)
        return _server_port
