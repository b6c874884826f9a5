"""What a command runs with: its arguments, the configuration, and, built once when first asked
for, the table's handle and the stream's source."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass
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

    @property
    def output(self) -> str:
        return str(self.args.output)
