"""The layout in effect: which columns, weights, curve and partitioning the table is clustered by,
configured or adopted, as a versioned fact of the table.

* **Configured**: ``table.clustering_columns``, ``compaction.column_weights``, ``compaction.curve``,
  ``compaction.group_by_parents`` and ``table.partition_by``; in effect unless
  ``compaction.auto_layout = apply`` and a layout was adopted.
* **Adopted**: the record of domain ``lakecluster.layout`` in the table's log (Delta domain
  metadata), committed by the compactor that adopted it through the one commit protocol
  (``lakecluster/commit.py``; ``lakecluster.layout.adoptions``). It is read with the table's other
  metadata, so every process sees it at the version it reads, and a newer one at the next.

Before the record, an adoption was only a file, ``_lakecluster/layout/adoption-<n>.json`` created
put-if-absent (:class:`AdoptionFiles`). The files are still written first, and still decide which
of two compactors racing to adopt the same number wins; a compactor of an earlier version, which
reads only them, so follows the same layout during a rolling upgrade. A file numbered above the
record (adopted by an earlier version, or by a compactor that stopped between the file and the
commit) is the layout in effect, and the next compactor records it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from lakecluster.clustering import layout_fingerprint
from lakecluster.errors import UnsupportedTableError
from lakecluster.storage import create_if_absent
from lakecluster.uris import is_local

if TYPE_CHECKING:
    from lakecluster.config import Config, StorageConfig

LAYOUT_DOMAIN = "lakecluster.layout"  # the domain of the adopted layout's record (not "delta.": a user domain)
RECORD_FORMAT = 1  # the record's "format": a reader refuses a newer one rather than misread it
_ADOPTION = re.compile(r"^adoption-(\d{8})\.json$")
RECOMMENDATION = "recommendation.json"


@dataclass(frozen=True)
class Adoption:
    """One adopted layout: what the compactor clusters by from then on."""

    number: int
    id: str
    clustering_columns: tuple[str, ...]
    weights: tuple[float, ...]
    fingerprint: str
    replaced: str  # the fingerprint of the layout in effect before
    time: float
    predicted: dict[str, Any] = field(default_factory=dict)  # files read per scan: current, adopted, gain
    by: str = ""  # host and pid of the compactor that adopted it

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "clustering_columns": list(self.clustering_columns), "weights": list(self.weights)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Adoption:
        return cls(int(d["number"]), str(d["id"]), tuple(d["clustering_columns"]),
                   tuple(float(w) for w in d["weights"]), str(d["fingerprint"]), str(d.get("replaced", "")),
                   float(d["time"]), dict(d.get("predicted") or {}), str(d.get("by", "")))  # fmt: skip

    @property
    def column_weights(self) -> dict[str, float]:
        return dict(zip(self.clustering_columns, self.weights, strict=True))

    def record(self, curve: str, group_by_parents: bool, partition_by: tuple[str, ...]) -> str:
        """The domain record's configuration: the adoption and the rest of the layout it is."""
        return json.dumps({"format": RECORD_FORMAT, "adoption": self.as_dict(), "curve": curve,
                           "group_by_parents": group_by_parents, "partition_by": list(partition_by)},
                          sort_keys=True)  # fmt: skip


def recorded_adoption(domains: Mapping[str, str]) -> Adoption | None:
    """The adoption the table's log records (its ``lakecluster.layout`` domain), None for none.

    Raises:
        UnsupportedTableError: the record is of a newer format, or cannot be read.
    """
    text = domains.get(LAYOUT_DOMAIN)
    if not text:
        return None
    try:
        data = json.loads(text)
        found = int(data.get("format", 0))
        adoption = Adoption.from_dict(data["adoption"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UnsupportedTableError(f"the table's layout record (domain {LAYOUT_DOMAIN}) cannot be read: "
                                    f"{type(e).__name__}: {e}") from e  # fmt: skip
    if found > RECORD_FORMAT:
        raise UnsupportedTableError(f"the table's layout record (domain {LAYOUT_DOMAIN}) is of format {found}, "
                                    f"newer than this version of lakecluster reads ({RECORD_FORMAT}): upgrade it")
    return adoption


@dataclass(frozen=True)
class TableLayout:
    """The layout in effect (see the module's docstring)."""

    clustering_columns: tuple[str, ...]
    column_weights: Mapping[str, float]
    curve: str
    group_by_parents: bool
    partition_by: tuple[str, ...]
    adoption: Adoption | None = None  # None: the configured layout
    recorded: bool = True  # an adoption's record is in the log (False: only its file, recorded next)

    @classmethod
    def configured(cls, config: Config) -> TableLayout:
        c = config.compaction
        return cls(tuple(config.table.clustering_columns), c.weights(), c.curve, c.group_by_parents,
                   tuple(config.table.partition_by))  # fmt: skip

    @classmethod
    def adopted(cls, config: Config, adoption: Adoption, *, recorded: bool) -> TableLayout:
        """The adopted layout: its columns and weights, the table's curve, parents and partitioning."""
        c = config.compaction
        return cls(adoption.clustering_columns, adoption.column_weights, c.curve, c.group_by_parents,
                   tuple(config.table.partition_by), adoption, recorded)  # fmt: skip

    @property
    def is_adopted(self) -> bool:
        return self.adoption is not None

    @property
    def fingerprint(self) -> str:
        """The id its files carry in their names (``clustering.layout_fingerprint``)."""
        return layout_fingerprint(self.clustering_columns, self.column_weights, self.curve, self.group_by_parents)

    def applied_to(self, config: Config) -> Config:
        """``config`` with this layout's clustering columns and weights (itself when configured)."""
        if self.adoption is None:
            return config
        weights = {c: f"{w:g}" for c, w in self.column_weights.items()}
        return dataclasses.replace(
            config, table=dataclasses.replace(config.table, clustering_columns=self.clustering_columns),
            compaction=dataclasses.replace(config.compaction, column_weights=weights),
        )  # fmt: skip


def clusters_data_columns(config: Config, adoption: Adoption) -> bool:
    """Whether the adopted layout clusters by data columns of the table as configured (not, say,
    after the configuration dropped a column or partitions by it): such a layout is not taken,
    and the configured layout stays in effect."""
    t = config.table
    return set(adoption.clustering_columns) <= {c.name for c in t.columns} - set(t.partition_by)


def newest(recorded: Adoption | None, filed: Adoption | None) -> tuple[Adoption | None, bool]:
    """The adoption in effect of the one the log records and the newest adoption file, and whether
    it is recorded: a file numbered above the record is newer (not yet recorded)."""
    if filed is not None and (recorded is None or filed.number > recorded.number):
        return filed, False
    return recorded, recorded is not None


class AdoptionFiles:
    """The adoption files of one table, ``_lakecluster/layout/adoption-<n>.json`` (see the
    module's docstring), and the layout loop's last recommendation beside them.

    Creating a file is put-if-absent on its number (``lakecluster.storage.create_if_absent``: a
    hard link on local disks, one ``If-None-Match: *`` PUT on S3), so of two compactors adopting
    the same number one wins, whatever the timing of their other steps.
    """

    def __init__(self, uri: str, storage: StorageConfig, fs: pafs.FileSystem, folder: str) -> None:
        """The folder at ``uri`` (``fs`` and ``folder``: it as a pyarrow filesystem and path)."""
        self.uri = uri
        self.storage = storage
        self.fs, self.folder = fs, folder
        self.local = is_local(uri)

    def _numbers(self) -> list[int]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.folder, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for i in infos if (m := _ADOPTION.match(i.base_name)))

    def path(self, number: int) -> str:
        return f"{self.folder}/adoption-{number:08d}.json"

    def read(self, path: str) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(path) as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            return None
        return data if isinstance(data, dict) else None

    def latest(self) -> Adoption | None:
        """The adoption file of the highest number, None when there is none."""
        numbers = self._numbers()
        if not numbers:
            return None
        data = self.read(self.path(numbers[-1]))
        return None if data is None else Adoption.from_dict(data)

    def all(self) -> list[Adoption]:
        """Every adoption, oldest first (``lakecluster history``)."""
        found = (self.read(self.path(n)) for n in self._numbers())
        return [Adoption.from_dict(d) for d in found if d is not None]

    def create(self, number: int, body: bytes) -> bool:
        """Create ``adoption-<number>.json`` with ``body`` unless it exists: True if this call did."""
        return create_if_absent(f"{self.uri}/adoption-{number:08d}.json", body, self.storage)

    def write_recommendation(self, data: dict[str, Any]) -> None:
        """Replace the last scoring's result (a reader sees a whole file or the previous one)."""
        self.fs.create_dir(self.folder, recursive=True)
        body = json.dumps(data, sort_keys=True, default=str).encode()
        final = f"{self.folder}/{RECOMMENDATION}"
        if self.local:
            tmp = f"{self.folder}/.{RECOMMENDATION}.{uuid.uuid4().hex}.tmp"
            with self.fs.open_output_stream(tmp) as out:
                out.write(body)
            self.fs.move(tmp, final)  # rename(2): atomic
        else:
            with self.fs.open_output_stream(final) as out:  # one PUT: the whole object or the old one
                out.write(body)

    def recommendation(self) -> dict[str, Any] | None:
        """The last scoring's result, None before the first."""
        try:
            return self.read(f"{self.folder}/{RECOMMENDATION}")
        except (OSError, ValueError):
            return None
