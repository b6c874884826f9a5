"""Where a table's companions live: the quarantine table, the index, each stream's folder.

Everything lakecluster keeps beside a table's data lives under ``<table>/_lakecluster/`` (Delta's
VACUUM never enters directories whose names start with ``_``)::

    <table>/_lakecluster/streams/<stream id>/checkpoint/   Spark's checkpoint (stream.checkpoint_location)
    <table>/_lakecluster/streams/<stream id>/lease         one process per stream id
    <table>/_lakecluster/streams/<stream id>/sketches/     the stream's boundary sketches
    <table>/_lakecluster/sketches/                         sketches of versions before stream ids
    <table>/_lakecluster/index/                            the column-stats index (index.path)
    <table>/_lakecluster/workload/day=<yyyy-mm-dd>/        captured queries (docs/workload.md)
    <table>/_lakecluster/layout/                           layouts adopted from them (docs/tuning.md)
    <table>_quarantine                                     the quarantine table (table.quarantine_path)

This module is the one place these paths are worked out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakecluster.errors import ConfigError
from lakecluster.uris import is_local, is_s3, normalize

if TYPE_CHECKING:
    from lakecluster.config import Config

SIDE_FOLDER = "_lakecluster"
SKETCHES = "sketches"  # a stream's sketch folder, inside its own folder
WORKLOAD = "workload"  # the query listener's capture files (workload/jvm/WorkloadWriter.java)
LAYOUT = "layout"  # layouts the compactor adopted from the captured workload (compaction/adoptions.py)


def stream_id_of(config: Config) -> str:
    """``stream.id``, or one derived from the source and the table (stable across restarts).

    The derivation hashes the source's identity and ``table.path`` as spelled in the
    configuration: a stream keeps its id, and its commits their meaning, across restarts.
    """
    if config.stream.id:
        return config.stream.id
    source = config.source.identity()
    what = json.dumps({"source": source, "table": config.table.path.rstrip("/")}, sort_keys=True)
    return f"{source['kind']}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class TablePaths:
    """Every location of one table and its configured stream, normalised (``uris.normalize``)."""

    table: str
    quarantine: str
    index: str
    stream_id: str
    checkpoint: str  # the configured stream's Spark checkpoint

    @classmethod
    def of(cls, config: Config) -> TablePaths:
        """The locations ``config`` names, checked: the quarantine table is another table, and on
        a cluster every executor must see the same storage (a local path would split the table).

        Raises:
            ConfigError: naming the key of the location that cannot be used.
        """
        t = config.table
        table = normalize(t.path)
        stream_id = stream_id_of(config)
        home = f"{table}/{SIDE_FOLDER}/streams/{stream_id}"
        paths = cls(
            table=table,
            quarantine=normalize(t.quarantine_path or t.path.rstrip("/") + "_quarantine"),
            index=normalize(config.index.path or f"{table}/{SIDE_FOLDER}/index"),
            stream_id=stream_id,
            checkpoint=normalize(config.stream.checkpoint_location or f"{home}/checkpoint"),
        )
        if paths.quarantine == paths.table:
            raise ConfigError("table.quarantine_path", f"{paths.quarantine!r} must differ from table.path "
                              f"{paths.table!r}", related=("table.path",))  # fmt: skip
        master = config.spark.master
        for key, path in paths.locations.items():
            if not master.startswith("local") and is_local(path):
                raise ConfigError(key, f"{path!r} is a local path, but spark.master is {master!r}: executors on other "
                                  "machines would each write their own copy; use shared storage such as "
                                  "s3://bucket/path", related=("spark.master",))  # fmt: skip
        return paths

    @property
    def streams(self) -> str:
        """The folder of every stream's own folder."""
        return f"{self.table}/{SIDE_FOLDER}/streams"

    def stream_home(self, stream_id: str | None = None) -> str:
        """``<table>/_lakecluster/streams/<stream id>`` (default: the configured stream's)."""
        return f"{self.streams}/{stream_id or self.stream_id}"

    def lease(self, stream_id: str | None = None) -> str:
        return f"{self.stream_home(stream_id)}/lease"

    def sketches(self, stream_id: str | None) -> str:
        """A stream's sketch folder; ``None``: the folder of versions before stream ids."""
        return f"{self.stream_home(stream_id)}/{SKETCHES}" if stream_id else f"{self.table}/{SIDE_FOLDER}/{SKETCHES}"

    @property
    def workload(self) -> str:
        """``<table>/_lakecluster/workload``: the capture files of every application's query listener."""
        return f"{self.table}/{SIDE_FOLDER}/{WORKLOAD}"

    @property
    def layout(self) -> str:
        """``<table>/_lakecluster/layout``: the adopted layouts and the last recommendation."""
        return f"{self.table}/{SIDE_FOLDER}/{LAYOUT}"

    @property
    def locations(self) -> dict[str, str]:
        """Every location lakecluster reads or writes, by the config key that sets it."""
        return {"table.path": self.table, "table.quarantine_path": self.quarantine,
                "stream.checkpoint_location": self.checkpoint, "index.path": self.index}  # fmt: skip

    @property
    def uses_s3(self) -> bool:
        return any(is_s3(p) for p in self.locations.values())
