"""The built-in streaming source for Spark: SSB-like rows at a configurable rate (see ``ssb``)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from lakecluster.schema import ColumnSpec, spark_ddl
from lakecluster.stream.generator import BATCH_ROWS, BLOCK_ROWS, GeneratorSettings, generate

FORMAT_NAME = "lakecluster_generator"


class _RangePartition(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class GeneratorDataSource(DataSource):
    """``spark.readStream.format("lakecluster_generator").option("config", json)``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return spark_ddl(_options_columns(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratorStreamReader(json.loads(self.options["config"]))


def _options_columns(options: Any) -> tuple[ColumnSpec, ...]:
    cfg = json.loads(options["config"])
    return tuple(ColumnSpec(**c) for c in cfg["columns"])


class GeneratorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.columns = tuple(ColumnSpec(**c) for c in cfg["columns"])
        self.settings = GeneratorSettings(seed=cfg["seed"], brand_skew=cfg["brand_skew"],
                                          scale_factor=cfg.get("scale_factor", 1.0))  # fmt: skip
        self._origin: tuple[float, int] | None = None
        self._available_now_end: int | None = None

    def initialOffset(self) -> dict:
        # A stream resumed from the offsets its table recorded starts there (stream/resume.py).
        start = self.cfg.get("starting_offsets")
        return {"rows": int(json.loads(start)["rows"])} if start else {"rows": 0}

    def _available(self, start: int) -> int:
        now = time.monotonic()
        if self._origin is None:
            self._origin = (now, start)
        t0, rows0 = self._origin
        available = rows0 + int((now - t0) * self.cfg["rows_per_second"])
        if self.cfg.get("max_rows") is not None:
            available = min(available, self.cfg["max_rows"])
        return max(available, start)

    def prepareForTriggerAvailableNow(self) -> None:
        # With a finite generator, "everything available" is all of it; otherwise what the rate
        # has produced by now.
        max_rows = self.cfg.get("max_rows")
        self._available_now_end = max_rows if max_rows is not None else None

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.cfg.get("max_rows_per_trigger")
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["rows"])
        if self._available_now_end is not None:
            end = self._available_now_end
        else:
            end = self._available(begin)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"rows": max(begin, end)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = int(start["rows"]), int(end["rows"])
        if stop <= begin:
            return []
        n = max(1, min(int(self.cfg["partitions"]), (stop - begin + BLOCK_ROWS - 1) // BLOCK_ROWS))
        cuts = np.linspace(begin, stop, n + 1).astype(np.int64)
        return [_RangePartition(int(a), int(b)) for a, b in itertools.pairwise(cuts) if b > a]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _RangePartition)
        for lo in range(partition.start, partition.end, BATCH_ROWS):
            yield generate(lo, min(lo + BATCH_ROWS, partition.end), self.settings, self.columns)

    def commit(self, end: dict) -> None:
        pass
