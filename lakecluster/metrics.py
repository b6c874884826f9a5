"""Prometheus metrics of every lakecluster service, on one registry and one HTTP endpoint.

Names follow Prometheus conventions (``lakecluster_`` prefix, base units, ``_total`` counters,
histograms for durations, labels of bounded cardinality). Every metric is listed with its meaning
in docs/operations.md ("Metrics"); tests/lakecluster/test_metrics.py checks the counters through a
real Prometheus server against the Delta log, tests/docker/test_monitoring.py evaluates the
dashboard's and the alert rules' expressions against a live stream and compactor.

A process serves one table: the endpoint adds a ``table`` label (``LakeTable.name``) to every
series it serves, at collection time (:class:`LabelledView`), so the call sites that count and set
stay as they are and in-process readers of :data:`REGISTRY` see the series without it.

The endpoint also answers ``/healthz`` and ``/readyz`` (lakecluster/health.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.core import GaugeHistogramMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from lakecluster.health import HEALTH
from lakecluster.jvm_metrics import JvmCollector

log = logging.getLogger(__name__)
disable_created_metrics()  # no *_created series: they double the series count and no panel uses them
REGISTRY = CollectorRegistry(auto_describe=True)


class WeightedHistogram:
    """A histogram that takes many observations at once as (value, count) pairs.

    The stream summarises a micro-batch's record timestamps per second in its Spark tasks; this
    records them without a Python call per record.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self._bounds = np.asarray(sorted(buckets), dtype=np.float64)
        self._counts = np.zeros(len(self._bounds) + 1, dtype=np.int64)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, values: Iterable[float], counts: Iterable[int]) -> None:
        v = np.fromiter(values, dtype=np.float64)
        c = np.fromiter(counts, dtype=np.int64)
        if len(v) == 0:
            return
        slots = np.searchsorted(self._bounds, v, side="left")  # value == bound falls in that bucket (le)
        with self._lock:
            np.add.at(self._counts, slots, c)
            self._sum += float(np.dot(v, c))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total = self._sum
        buckets = [(floatToGoString(b), int(n)) for b, n in zip(self._bounds, cumulative[:-1], strict=True)]
        buckets.append(("+Inf", int(cumulative[-1])))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=total)


class SizeDistribution:
    """A gauge histogram of the live data files' sizes, replaced as a whole at each observation."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self._bounds = np.asarray(sorted(buckets), dtype=np.float64)
        self._state: tuple[list[tuple[str, float]], float] | None = None
        self._lock = threading.Lock()
        registry.register(self)

    def set(self, sizes: np.ndarray) -> None:
        counts = np.bincount(np.searchsorted(self._bounds, sizes, side="left"), minlength=len(self._bounds) + 1)
        cumulative = np.cumsum(counts)
        buckets = [(floatToGoString(b), float(n)) for b, n in zip(self._bounds, cumulative[:-1], strict=True)]
        buckets.append(("+Inf", float(cumulative[-1])))
        with self._lock:
            self._state = (buckets, float(np.sum(sizes)))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            state = self._state
        if state is not None:
            yield GaugeHistogramMetricFamily(self.name, self.documentation, buckets=state[0], gsum_value=state[1])


BUILD = Info("lakecluster_build", "Version of the running lakecluster", registry=REGISTRY)
ProcessCollector(registry=REGISTRY)  # process_start_time_seconds, CPU and memory of the Python driver
JVM = JvmCollector(REGISTRY)  # lakecluster_jvm_*: heap, GC and threads of the Spark driver's JVM, once Spark runs

STREAM_BATCHES = Counter("lakecluster_stream_batches_total", "Micro-batches run (empty ones included)",
                         registry=REGISTRY)  # fmt: skip
STREAM_ROWS = Counter("lakecluster_stream_rows_total", "Rows committed to the table", registry=REGISTRY)
STREAM_QUARANTINED = Counter("lakecluster_stream_quarantined_total",
                             "Records sent to the quarantine table, by reason code (docs/records.md)", ["reason"],
                             registry=REGISTRY)  # fmt: skip
STREAM_RECORDS_READ = Counter("lakecluster_stream_records_read_total",
                              "Records read from the source: rows written plus records quarantined",
                              registry=REGISTRY)  # fmt: skip
STREAM_INPUT_BYTES = Counter("lakecluster_stream_input_bytes_total", "Bytes of Kafka record values read",
                             registry=REGISTRY)  # fmt: skip
STREAM_BYTES_WRITTEN = Counter("lakecluster_stream_bytes_written_total",
                               "Bytes of data files the stream's commits added", registry=REGISTRY)  # fmt: skip
STREAM_DELAY = WeightedHistogram("lakecluster_stream_delay_seconds",
                                 "End-to-end delay: Kafka record timestamp to the table commit that holds the record",
                                 (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
                                 REGISTRY)  # fmt: skip
STREAM_LAST_COMMIT = Gauge("lakecluster_stream_last_commit_timestamp_seconds",
                           "When the stream last committed a micro-batch with rows or quarantined records",
                           registry=REGISTRY)  # fmt: skip
STREAM_PROGRESS = Gauge("lakecluster_stream_progress_timestamp_seconds",
                        "When the stream last made progress: committed a micro-batch, or (re)started its query",
                        registry=REGISTRY)  # fmt: skip
STREAM_LAST_BATCH = Gauge("lakecluster_stream_last_batch_timestamp_seconds",
                          "When the stream last completed a micro-batch (empty ones included)", registry=REGISTRY)
STREAM_SKETCHES_UPDATED = Gauge("lakecluster_stream_sketches_updated_timestamp_seconds",
                                "When the stream last wrote the boundary sketches", registry=REGISTRY)  # fmt: skip
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
COMPACTION_SPILLED_BYTES = Counter("lakecluster_compaction_spilled_bytes_total",
                                   "Bytes rewrite tasks spilled to local disk (compaction.spill_dir)",
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
STREAM_UNSEEN_FIELD_RECORDS = Counter("lakecluster_stream_unseen_field_records_total",
                                      "Records carrying a value in a field that is no column of the table, by "
                                      'field (the first 50 fields met; later ones as field="_other")', ["field"],
                                      registry=REGISTRY)  # fmt: skip
STREAM_COLUMNS_ADDED = Counter("lakecluster_stream_columns_added_total",
                               "Columns the stream added to the table (stream.schema_evolution = add_columns)",
                               registry=REGISTRY)  # fmt: skip
SCHEMA_REGISTRY_UP = Gauge("lakecluster_schema_registry_up",
                           "1 when the schema registry answered the stream's last request for a writer schema, "
                           "0 when no URL did (a stream of Avro records only)", ["registry"],
                           registry=REGISTRY)  # fmt: skip
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
VACUUM_RUNS = Counter("lakecluster_vacuum_runs_total", "Vacuum runs completed (table and quarantine table)",
                      registry=REGISTRY)  # fmt: skip
PENDING_GROUPS = Gauge("lakecluster_compaction_pending_groups", "Groups the last plan found", registry=REGISTRY)
PENDING_BYTES = Gauge("lakecluster_compaction_pending_bytes", "Bytes of the groups the last plan found (backlog)",
                      registry=REGISTRY)  # fmt: skip
COMPACTION_GROUPS_PLANNED = Counter("lakecluster_compaction_groups_planned_total", "Groups found by planning rounds",
                                    registry=REGISTRY)  # fmt: skip
COMPACTION_COMMIT_ATTEMPTS = Counter("lakecluster_compaction_commit_attempts_total",
                                     "Rewrite commits attempted (committed, conflicted or failed)", registry=REGISTRY)
COMPACTION_LAST_SUCCESS = Gauge("lakecluster_compaction_last_success_timestamp_seconds",
                                "When a compaction round last completed without a fault", registry=REGISTRY)
COMPACTION_THRESHOLDS = Info("lakecluster_compaction_thresholds", "The compaction thresholds in effect",
                             registry=REGISTRY)  # fmt: skip

AUTO_LAYOUT_GAIN = Gauge("lakecluster_auto_layout_predicted_gain_ratio",
                         "Share of files read per captured scan the recommended layout saves against the one in "
                         "effect (0: no better layout, or too little workload)", registry=REGISTRY)  # fmt: skip
AUTO_LAYOUT_FILES_READ = Gauge("lakecluster_auto_layout_files_read_estimate",
                               "Files a captured scan reads, predicted, under the layout in effect (current) and the "
                               "recommended one", ["layout"], registry=REGISTRY)  # fmt: skip
AUTO_LAYOUT_RECOMMENDATION = Info("lakecluster_auto_layout_recommendation",
                                  "The layout the last scoring of the captured workload recommends", registry=REGISTRY)
AUTO_LAYOUT_EVALUATION_SECONDS = Gauge("lakecluster_auto_layout_evaluation_seconds",
                                       "Wall time of the last scoring of layouts on the captured workload",
                                       registry=REGISTRY)  # fmt: skip
AUTO_LAYOUT_EVALUATIONS = Counter("lakecluster_auto_layout_evaluations_total",
                                  "Scorings of layouts on the captured workload", registry=REGISTRY)  # fmt: skip
AUTO_LAYOUT_ADOPTIONS = Counter("lakecluster_auto_layout_adoptions_total",
                                "Layouts this process adopted (compaction.auto_layout = apply)", registry=REGISTRY)
AUTO_LAYOUT_ADOPTION = Gauge("lakecluster_auto_layout_adoption",
                             "Number of the adopted layout in effect (0: the configured one)", registry=REGISTRY)
RELAYOUT_PENDING_FILES = Gauge("lakecluster_relayout_pending_files",
                               "Files still to re-cluster under the adopted layout", registry=REGISTRY)  # fmt: skip
RELAYOUT_PENDING_BYTES = Gauge("lakecluster_relayout_pending_bytes",
                               "Bytes of the files still to re-cluster under the adopted layout", registry=REGISTRY)
RELAYOUT_BUDGET_BYTES = Gauge("lakecluster_relayout_budget_bytes",
                              "Bytes the re-clustering may rewrite per rolling 24 h (compaction.rewrite_budget_bytes_"
                              "per_day)", registry=REGISTRY)  # fmt: skip
RELAYOUT_BUDGET_USED = Gauge("lakecluster_relayout_budget_used_bytes",
                             "Bytes the re-clustering rewrote in the last 24 h (from the log)", registry=REGISTRY)
RELAYOUT_BUDGET_EXHAUSTED = Gauge("lakecluster_relayout_budget_exhausted",
                                  "1 while the re-clustering waits for its daily byte budget", registry=REGISTRY)

TABLE_ROWS = Gauge("lakecluster_table_rows", "Rows in the live data files (from their stats)", registry=REGISTRY)
TABLE_SMALL_FILES = Gauge("lakecluster_table_small_files", "Live data files smaller than compaction.min_file_bytes",
                          registry=REGISTRY)  # fmt: skip
TABLE_FILE_SIZES = SizeDistribution("lakecluster_table_file_size_bytes", "Sizes of the live data files",
                                    tuple(float(2**e) for e in range(10, 34, 2)), REGISTRY)  # 1 KiB .. 8 GiB
TABLE_LAST_REWRITE = Gauge("lakecluster_table_last_rewrite_timestamp_seconds",
                           "When the table's log last recorded a rewrite (OPTIMIZE), by any writer", registry=REGISTRY)
TABLE_LAST_VACUUM = Gauge("lakecluster_table_last_vacuum_timestamp_seconds",
                          "When the table's log last recorded a finished vacuum (VACUUM END), by any process; "
                          "the table's creation time if it was never vacuumed", registry=REGISTRY)  # fmt: skip
TABLE_OBSERVED = Gauge("lakecluster_table_observed_timestamp_seconds",
                       "When the table gauges were last brought up to date", registry=REGISTRY)  # fmt: skip
SKETCHES_BEHIND = Gauge("lakecluster_sketches_versions_behind",
                        "Table versions committed since the boundary sketches were written", registry=REGISTRY)

INDEX_BEHIND = Gauge("lakecluster_index_versions_behind", "Table versions the column-stats index has not synced",
                     registry=REGISTRY)  # fmt: skip
INDEX_ENTRIES = Gauge("lakecluster_index_entries", "Rows (file entries and tombstones) in the column-stats index",
                    registry=REGISTRY)  # fmt: skip
INDEX_SEGMENTS = Gauge("lakecluster_index_segments", "Segment files of the column-stats index", registry=REGISTRY)
INDEX_SYNC_SECONDS = Histogram("lakecluster_index_sync_seconds", "Wall time of an index sync, by mode", ["mode"],
                               registry=REGISTRY, buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120))  # fmt: skip
INDEX_PRUNE_SECONDS = Histogram("lakecluster_index_prune_seconds", "Wall time of pruning files with the index",
                                registry=REGISTRY, buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5))  # fmt: skip

class LabelledView:
    """A registry's series with constant labels added, as the endpoint serves them.

    Quacks like the registry for prometheus_client's exposition (``collect``, and
    ``restricted_registry`` for a scrape asking for ``name[]``); a label a series already has wins.
    """

    def __init__(self, registry: Any, labels: dict[str, str] | None = None) -> None:
        self._registry = registry
        self.labels = dict(labels or {})

    def collect(self) -> Iterator[Metric]:
        labels = self.labels
        for metric in self._registry.collect():
            if labels:
                labelled = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                labelled.samples = [s._replace(labels={**labels, **s.labels}) for s in metric.samples]
                metric = labelled
            yield metric

    def restricted_registry(self, names: Iterable[str]) -> LabelledView:
        return LabelledView(self._registry.restricted_registry(names), self.labels)


EXPOSED = LabelledView(REGISTRY)  # what /metrics serves: REGISTRY with the table label (set by serve)

_server_lock = threading.Lock()
_server_port: int | None = None


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds: not worth a log line each."""


def _app() -> Any:
    metrics_app = make_wsgi_app(EXPOSED)

    def probe(ok: bool, start_response: Any) -> list[bytes]:
        body = json.dumps({"ok": ok, "components": HEALTH.snapshot()}).encode()
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])  # fmt: skip
        return [body]

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return probe(HEALTH.live(), start_response)
        if path == "/readyz":
            return probe(HEALTH.is_ready(), start_response)
        return metrics_app(environ, start_response)

    return app


def serve(port: int, host: str = "127.0.0.1", table: str | None = None) -> int | None:
    """Start the endpoint once per process (port 0 = off): /metrics, /healthz, /readyz. Returns the port.

    Args:
        table: the name of the table the process serves (``LakeTable.name``): every series carries
            it as its ``table`` label.
    """
    global _server_port
    if port == 0:
        return None
    with _server_lock:
        EXPOSED.labels = {"table": table} if table else {}
        if _server_port is None:
            from lakecluster import __version__

            BUILD.info({"version": __version__})
            httpd = make_server(host, port, _app(), _Server, handler_class=_QuietHandler)
            threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
            _server_port = httpd.server_port
            log.info("metrics on http://%s:%d/metrics (probes: /healthz, /readyz)", host, _server_port)
        return _server_port
