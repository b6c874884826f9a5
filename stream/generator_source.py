"""The built-in source: SSB-like rows at a configurable rate (see ``ssb``), as a Spark streaming
data source (``GeneratorDataSource``) and as a stream's :class:`~lakecluster.stream.source.Source`."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from lakecluster.config import Config, GeneratorSourceConfig
from lakecluster.errors import ConfigError
from lakecluster.schema import ColumnSpec, spark_ddl
from lakecluster.stream.generator import BATCH_ROWS, BLOCK_ROWS, GeneratorSettings, generate
from lakecluster.stream.ssb import SSB_COLUMNS, SSB_FULL_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakecluster.table import LakeTable

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


class GeneratorSource:
    """``[source.generator]``: the built-in SSB-like rows (``ssb``), typed, at a configured rate."""

    kind = "generator"
    quarantines = False

    def __init__(self, config: Config) -> None:
        section = config.source.selected
        assert isinstance(section, GeneratorSourceConfig)
        self.settings = section
        self.columns = config.table.columns
        check_columns(self.columns)

    def describe(self) -> str:
        return "generator"

    def check(self) -> None:
        pass  # nothing outside this process

    def configured_offsets(self) -> str:
        return ""

    def resume_offsets(self) -> None:
        return None

    def frame(self, spark: SparkSession, starting_offsets: str | None) -> DataFrame:
        g = self.settings
        options = {
            "columns": [asdict(c) for c in self.columns], "seed": g.seed, "brand_skew": g.brand_skew,
            "scale_factor": g.scale_factor, "rows_per_second": g.rows_per_second, "partitions": g.partitions,
            "max_rows": g.max_rows, "max_rows_per_trigger": g.max_rows_per_trigger,
            "starting_offsets": starting_offsets,
        }  # fmt: skip
        spark.dataSource.register(GeneratorDataSource)
        return spark.readStream.format(FORMAT_NAME).option("config", json.dumps(options)).load()

    def start(self, table: LakeTable) -> None:
        pass

    def committed(self, offsets: str | None) -> None:
        pass

    def stop(self) -> None:
        pass

    def lag(self) -> None:
        return None  # the generator makes rows as they are read: nothing waits

    def measure_lag(self, table: LakeTable, timeout_s: float) -> None:
        return None


def check_columns(columns: Sequence[ColumnSpec]) -> None:
    """Every declared column is one the generator makes, of a type it makes it in.

    Raises:
        ConfigError: naming the ``table.columns`` entry it does not make.
    """
    known: dict[str, list[str]] = {}
    for c in (*SSB_COLUMNS, *SSB_FULL_COLUMNS):
        known.setdefault(c.name, [])
        if c.type not in known[c.name]:
            known[c.name].append(c.type)
    for i, c in enumerate(columns):
        if c.name not in known:
            raise ConfigError(
                f"table.columns[{i}].name",
                f"the generator source does not produce '{c.name}'; it produces {', '.join(known)}",
            )
        if c.type not in known[c.name]:
            raise ConfigError(f"table.columns[{i}].type",
                              f"the generator produces {c.name} as {' or '.join(known[c.name])}")  # fmt: skip
