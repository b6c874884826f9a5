"""Consumer lag: records the brokers hold that the table has not committed yet, per topic-partition.

Spark's Kafka source keeps its offsets in the checkpoint and commits none to Kafka, so Kafka's own
lag tools (consumer groups) see nothing. The table is the source of truth instead: every
micro-batch records the offsets it read up to in its commit (stream/resume.py). Lag is the
brokers' end offset minus that offset; a partition the stream has not read yet counts from the
start of its log (records already deleted by Kafka's retention are not lag, they are gone).

``measure`` answers once (``lakecluster status``); ``LagMonitor`` is the stream's thread that
measures every ``stream.lag_interval_s`` and sets ``lakecluster_stream_lag_records``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from lakecluster import metrics
from lakecluster.config import KafkaSourceConfig
from lakecluster.stream import kafka
from lakecluster.stream.kafka import Offsets
from lakecluster.table import LakeTable

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


def recorded_offsets(table: LakeTable) -> Offsets | None:
    """The offsets the table's stream's newest commit recorded; None if it never committed."""
    stream_id = table.stream_id
    last = table.delta.last_commit_of(lambda meta: meta.get("stream") == stream_id and "offsets" in meta)
    if last is None or not last.get("offsets"):
        return None
    offsets = last["offsets"]
    return kafka.parse_offsets(offsets if isinstance(offsets, str) else json.dumps(offsets))


def lag(
    ends: Mapping[TopicPartition, int], starts: Mapping[TopicPartition, int], committed: Offsets
) -> dict[TopicPartition, int]:
    """Records behind per topic-partition: end offset minus the committed offset, or minus the log's
    start where the stream has committed nothing of the partition or Kafka deleted past its offset."""
    out = {}
    for (topic, partition), end in ends.items():
        floor = starts.get((topic, partition), 0)
        done = committed.get(topic, {}).get(partition, floor)
        out[(topic, partition)] = max(0, end - max(done, floor))
    return out


def measure(k: KafkaSourceConfig, client: Any, committed: Offsets) -> dict[TopicPartition, int]:
    """Lag of every partition the source covers now (topics or pattern), asking the brokers."""
    from kafka import TopicPartition as KafkaTopicPartition

    tps = [KafkaTopicPartition(t, p) for t, p in kafka.partitions(k, client)]
    ends = {(tp.topic, tp.partition): int(o) for tp, o in client.end_offsets(tps).items()}
    starts = {(tp.topic, tp.partition): int(o) for tp, o in client.beginning_offsets(tps).items()}
    return lag(ends, starts, committed)


class LagMonitor:
    """Measures the stream's lag every ``interval_s`` in a daemon thread and exports it.

    ``committed`` is updated by the stream after every micro-batch; a broker that does not answer
    leaves the gauges at their last values (``lakecluster_stream_waiting_for_source`` tells that
    the source is unreachable) and is logged at debug level only.
    """

    def __init__(self, k: KafkaSourceConfig, interval_s: float, committed: Offsets | None) -> None:
        self.k = k
        self.interval_s = interval_s
        self._committed = committed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self.latest: dict[TopicPartition, int] | None = None

    def committed(self, offsets_json: str | None) -> None:
        """The offsets a micro-batch just committed (Spark's JSON)."""
        if offsets_json:
            parsed = kafka.parse_offsets(offsets_json)
            with self._lock:
                merged = dict(self._committed or {})
                for topic, parts in parsed.items():
                    merged[topic] = {**merged.get(topic, {}), **parts}
                self._committed = merged

    def start(self) -> None:
        if self.interval_s <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="lakecluster-lag", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # A measurement blocked on an unreachable broker must not delay the stop; the daemon
            # thread then ends with the process, its client with it.
            self._thread.join(timeout=2)
            if self._thread.is_alive():
                return
        if self._client is not None:
            self._client.close()
            self._client = None

    def measure_once(self) -> dict[TopicPartition, int] | None:
        with self._lock:
            committed = self._committed
        if committed is None:
            return None  # nothing committed yet: the stream's first batch tells where it starts
        if self._client is None:
            self._client = kafka.consumer(self.k, report_waiting=False)  # its own failures are logged
        lags = measure(self.k, self._client, committed)
        for (topic, partition), value in lags.items():
            metrics.STREAM_LAG.labels(topic, str(partition)).set(value)
        self.latest = lags
        return lags

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.measure_once()
            except Exception as e:  # never let lag measurement affect ingest
                log.debug("consumer lag not measured: %s", e)
            self._stop.wait(self.interval_s)
