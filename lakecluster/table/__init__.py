"""The table handle and everything it owns: locations, the log, live files, sketches, state.

Every component reaches a table through a :class:`LakeTable` built once from the configuration;
no other module opens a Delta table, builds a sketch store or reads ``table.path`` itself (a test
checks it from the source).
"""

from lakecluster.table.follower import TableLog
from lakecluster.table.handle import LakeTable
from lakecluster.table.layout_record import LAYOUT_DOMAIN, Adoption, AdoptionFiles, TableLayout
from lakecluster.table.live_files import LiveFiles
from lakecluster.table.location import DeltaLocation
from lakecluster.table.log import LogGap, NetChanges
from lakecluster.table.metadata import METADATA_KEY, parse_user_metadata, table_properties, user_metadata
from lakecluster.table.paths import TablePaths
from lakecluster.table.sketch_store import SketchStore, load_or_empty
from lakecluster.table.spec import TableSpec, check_schema, create_table
from lakecluster.table.state import Backlog, IndexState, Operation, StreamCommit, TableState

__all__ = [
    "LAYOUT_DOMAIN",
    "METADATA_KEY",
    "Adoption",
    "AdoptionFiles",
    "Backlog",
    "DeltaLocation",
    "IndexState",
    "LakeTable",
    "LiveFiles",
    "LogGap",
    "NetChanges",
    "Operation",
    "SketchStore",
    "StreamCommit",
    "TableLayout",
    "TableLog",
    "TablePaths",
    "TableSpec",
    "TableState",
    "check_schema",
    "create_table",
    "load_or_empty",
    "parse_user_metadata",
    "table_properties",
    "user_metadata",
]
