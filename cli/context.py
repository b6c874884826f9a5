"""What a command runs with: its arguments, the configuration, and, built once when first asked
for, the table's handle and the stream's source."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lakecluster.config import Config
from lakecluster.errors import ConfigError
from lakecluster.table import LakeTable

if TYPE_CHECKING:
    from lakecluster.stream.source import Source


@dataclass
class Context:
    args: argparse.Namespace
    config: Config

    @functools.cached_property
    def table(self) -> LakeTable:
        """The configured table's handle, shared by everything the command runs."""
        return LakeTable(self.config)

    @functools.cached_property
    def source(self) -> Source:
        """The configured source (its settings checked against the table's columns)."""
        from lakecluster.stream.source import open_source

        return open_source(self.config)

    def check(self) -> None:
        """What loading the configuration cannot check alone: the source against the table's
        columns (a :class:`~lakecluster.errors.ConfigError` naming the key and where it was set)."""
        from lakecluster.config import config_origins, locate, parse_overrides

        try:
            self.source  # noqa: B018 - opening the source checks it
        except ConfigError as e:
            origins = config_origins(self.args.config, overrides=parse_overrides(self.args.set))
            raise locate(e, origins) from None

    def follow_table_clustering(self) -> None:
        """Cluster by the columns Delta's own clustering gives the table (``CLUSTER BY``) when
        ``table.clustering_columns`` is set nowhere (file, environment, ``--set``); a table not
        clustered by Delta, or not there yet, leaves the configuration as it is. The compactor
        refuses a configured set that contradicts the table's."""
        from lakecluster.config import config_origins, parse_overrides, validate
        from lakecluster.table import LogGap
        from lakecluster.table.snapshot import Unsupported

        origins = config_origins(self.args.config, overrides=parse_overrides(self.args.set))
        if "table.clustering_columns" in origins:
            return
        location = LakeTable(self.config).delta
        try:
            if not location.exists():
                return
            found = location.metadata().clustering_columns()
        except (Unsupported, LogGap, OSError):
            return  # the command's own reads say what is wrong
        t = self.config.table
        if found and tuple(found) != tuple(t.clustering_columns):
            config = replace(self.config, table=replace(t, clustering_columns=tuple(found)))
            validate(config)
            self.config = config

    @property
    def output(self) -> str:
        return str(self.args.output)
