"""Layouts the compactor adopted from the captured workload, kept beside the table.

``<table>/_lakecluster/layout/adoption-<number>.json``: one immutable file per adopted layout
(clustering columns, weights, the fingerprint its files carry, the prediction it was adopted on),
numbered from 1; the highest number is the layout in effect. Every compactor, restarted or
second, and ``lakecluster status`` read the same files, so they agree on it.

Adopting is put-if-absent on the next number, so two compactors racing to adopt create one
layout, never two: the loser reads the winner's file and follows it. The create itself decides
(``lakecluster.storage.create_if_absent``), whatever the timing of the writers' other steps:

* Local disks: the file is written under a temporary name, then hard-linked to its final name;
  ``link(2)`` fails when the name exists, atomically.
* S3: one PUT with ``If-None-Match: *``; the store refuses it (412) when the key exists, so a
  writer that checked long before another one wrote still cannot replace that one's file.

A compactor first reads the number it means to take: one that scored on an old listing learns it
lost without a write. That read only saves a request; a file that appears after it is found by the
conditional create.

``recommendation.json`` holds the last scoring's result (replaced whole each time): what the
compactor would adopt and why it did or did not, for ``status``.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.fs as pafs

from lakecluster.storage import create_if_absent
from lakecluster.table import LakeTable
from lakecluster.uris import is_local

log = logging.getLogger(__name__)

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
    def from_dict(cls, d: dict[str, Any]) -> Adoption:
        return cls(int(d["number"]), str(d["id"]), tuple(d["clustering_columns"]),
                   tuple(float(w) for w in d["weights"]), str(d["fingerprint"]), str(d.get("replaced", "")),
                   float(d["time"]), dict(d.get("predicted") or {}), str(d.get("by", "")))  # fmt: skip

    @property
    def column_weights(self) -> dict[str, float]:
        return dict(zip(self.clustering_columns, self.weights, strict=True))


class AdoptionStore:
    """The adoption files of one table (see the module's docstring)."""

    def __init__(self, table: LakeTable) -> None:
        self.uri = table.paths.layout
        self.storage = table.storage
        self.fs, self.folder = table.filesystem(self.uri)
        self.local = is_local(table.uri)

    def _numbers(self) -> list[int]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.folder, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for i in infos if (m := _ADOPTION.match(i.base_name)))

    def _path(self, number: int) -> str:
        return f"{self.folder}/adoption-{number:08d}.json"

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(path) as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            return None
        return data if isinstance(data, dict) else None

    def latest(self) -> Adoption | None:
        """The layout in effect (the highest number), None when none was ever adopted."""
        numbers = self._numbers()
        if not numbers:
            return None
        data = self._read(self._path(numbers[-1]))
        return None if data is None else Adoption.from_dict(data)

    def all(self) -> list[Adoption]:
        """Every adoption, oldest first (``lakecluster history``)."""
        found = (self._read(self._path(n)) for n in self._numbers())
        return [Adoption.from_dict(d) for d in found if d is not None]

    def adopt(self, adoption: Adoption) -> tuple[Adoption, bool]:
        """Record ``adoption`` under its number unless another compactor took that number first.

        Returns:
            (the adoption under that number, whether it is this one).
        """
        path = self._path(adoption.number)
        found = self._read(path)  # taken already: no write needed to know it (see the module's docstring)
        if found is None:
            if self.create(adoption.number, json.dumps(adoption.as_dict(), sort_keys=True).encode()):
                return adoption, True
            found = self._read(path)
            if found is None:  # cannot happen on a consistent store: say so rather than guess
                raise OSError(f"{path} was refused as existing but cannot be read")
        winner = Adoption.from_dict(found)
        # Its own id too when a retried PUT found the file its first attempt had created.
        return winner, winner.id == adoption.id

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
            return self._read(f"{self.folder}/{RECOMMENDATION}")
        except (OSError, ValueError):
            return None
