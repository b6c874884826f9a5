"""Where a stream starts: exactly after what the table recorded, whatever became of the checkpoint.

A stream has a stable identity (``stream.id``, derived from the source and the table by default).
Every micro-batch commits to the table (and, when it quarantines records, to the quarantine table)
with a Delta app transaction ``(stream id, txn version)`` and records the source offsets it read up
to in the commit's ``userMetadata``. The txn version is ``txn_base + Spark batch id``; the base is
kept in a marker file inside the checkpoint, and chosen above every version the stream ever
committed when a checkpoint is created. So:

* checkpoint intact: Spark replays a batch after a crash with the same offsets and the same txn
  version; Delta skips whatever that version already committed (exactly once);
* checkpoint lost or deleted: the new checkpoint starts at the offsets the table recorded last,
  with txn versions above every earlier one, so nothing is skipped and nothing is read twice.
  Quarantine entries the old checkpoint committed past that point are not written again
  (``quarantine_floor``, the offsets the quarantine table recorded);
* a stream the table has never seen starts at ``source.kafka.starting_offsets``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs
from deltalake import DeltaTable

from lakecluster.errors import CheckpointError
from lakecluster.table import LakeTable

log = logging.getLogger(__name__)
MARKER = "lakecluster-stream.json"


@dataclass(frozen=True)
class StreamStart:
    stream_id: str
    txn_base: int
    # Source offsets to start a fresh checkpoint from (Spark's JSON); None: the checkpoint decides.
    starting_offsets: str | None
    quarantine_floor: dict[tuple[str, int], int] = field(default_factory=dict)
    resumed_from: str = "checkpoint"  # checkpoint | table | new

    def txn_version(self, batch_id: int) -> int:
        return self.txn_base + batch_id


def _read(fs: pafs.FileSystem, path: str) -> bytes | None:
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def checkpoint_has_batches(table: LakeTable) -> bool:
    """Whether Spark has planned any micro-batch in the stream's checkpoint (its offset log is not empty)."""
    fs, root = table.filesystem(table.paths.checkpoint)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/offsets", allow_not_found=True))
    return any(i.type == pafs.FileType.File and i.base_name.isdigit() for i in infos)


def batch_offsets(table: LakeTable, batch_id: int) -> str | None:
    """The source's end offsets of a micro-batch, from Spark's offset log (written before the batch runs)."""
    fs, root = table.filesystem(table.paths.checkpoint)
    data = _read(fs, f"{root}/offsets/{batch_id}")
    if data is None:
        return None
    # v1 / batch metadata JSON / one line per source
    lines = [ln for ln in data.decode().splitlines() if ln.strip()]
    return lines[2] if len(lines) >= 3 else None


def txn_version(table: DeltaTable | None, stream_id: str) -> int | None:
    if table is None:
        return None
    table.update_incremental()
    return table.transaction_version(stream_id)


def batch_commit_of(stream_id: str) -> Callable[[dict], bool]:
    """Whether a commit's lakecluster metadata is one of the stream's micro-batches (it records
    the offsets read), for ``DeltaLocation.last_commit_of``."""

    def mine(meta: dict) -> bool:
        return meta.get("stream") == stream_id and "offsets" in meta

    return mine


def prepare(
    table: LakeTable,
    *,
    quarantine: bool,
    configured_offsets: str,
    complete_offsets: Any = None,
) -> StreamStart:
    """Decide how the table's stream starts and write the checkpoint's marker (before Spark starts it).

    ``quarantine``: whether the stream writes the quarantine table (its offsets there count too);
    ``complete_offsets(recorded_json) -> startingOffsets`` turns offsets the table recorded into
    what the source needs (Kafka must be told every current partition).
    """
    stream_id, checkpoint = table.stream_id, table.paths.checkpoint
    fs, root = table.filesystem(checkpoint)
    marker_path = f"{root}/{MARKER}"
    raw = _read(fs, marker_path)
    if checkpoint_has_batches(table):
        if raw is None:
            raise CheckpointError(
                f"the checkpoint {checkpoint} was not written by this version of lakecluster (no {MARKER}); "
                "delete it: the stream then resumes from the offsets recorded in the table"
            )
        marker = json.loads(raw)
        if marker.get("stream_id") != stream_id:
            raise CheckpointError(
                f"the checkpoint {checkpoint} belongs to stream {marker.get('stream_id')!r}, the configuration "
                f"names stream {stream_id!r}; use the stream's own checkpoint (stream.checkpoint_location) or "
                "set stream.id"
            )
        kept = {(t, int(p)): int(o) for t, p, o in marker.get("quarantine_floor", [])}
        return StreamStart(stream_id, int(marker["txn_base"]), None, kept, "checkpoint")

    snapshot = table.delta.open_if_exists()
    q_snapshot = table.quarantine.open_if_exists() if quarantine else None
    versions = [v for v in (txn_version(snapshot, stream_id), txn_version(q_snapshot, stream_id)) if v is not None]
    base = max(versions) + 1 if versions else 0

    mine = batch_commit_of(stream_id)
    last = table.delta.last_commit_of(mine, table=snapshot) if snapshot is not None else None
    floor: dict[tuple[str, int], int] = {}
    if last is None:
        start = StreamStart(stream_id, base, configured_offsets, floor, "new")
    else:
        recorded = last["offsets"]
        last_q = table.quarantine.last_commit_of(mine, table=q_snapshot) if q_snapshot is not None else None
        if last_q is not None and isinstance(last_q.get("offsets"), dict):
            floor = {(t, int(p)): int(o) for t, parts in last_q["offsets"].items() if isinstance(parts, dict)
                     for p, o in parts.items()}  # fmt: skip
        offsets_json = json.dumps(recorded, sort_keys=True) if not isinstance(recorded, str) else recorded
        starting = complete_offsets(offsets_json) if complete_offsets is not None else offsets_json
        start = StreamStart(stream_id, base, starting, floor, "table")
        log.warning(
            "stream %s: no usable checkpoint at %s; resuming from the offsets the table recorded at version %s "
            "(txn versions from %d)", stream_id, checkpoint, last["version"], base,
        )  # fmt: skip
    fs.create_dir(root, recursive=True)
    body = json.dumps({
        "stream_id": stream_id, "txn_base": start.txn_base, "created_at": time.time(),
        "resumed_from": start.resumed_from, "starting_offsets": start.starting_offsets,
        "quarantine_floor": [[t, p, o] for (t, p), o in sorted(floor.items())],
    }, indent=1).encode()  # fmt: skip
    with fs.open_output_stream(marker_path) as out:  # one PUT on object stores, a small write locally
        out.write(body)
    return start
