"""Per stream, its last micro-batch as Spark's ``StreamingQueryProgress`` describes one: batch id,
phase durations, start and end offsets per partition, input and processed rows per second.

Read from what every micro-batch already writes: the ``userMetadata`` of its commit to the table
(``stream/sink.py``) and the timestamp Delta gives that commit. Commits written before these
fields existed show only what they carry (the rest is ``None``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakecluster.table import StreamCommit


def _rate(rows: int | None, ms: int | None) -> float | None:
    return None if rows is None or not ms or ms <= 0 else round(rows * 1000 / ms, 1)


def _partitions(offsets: Any) -> dict[str, int]:
    """A source's offsets JSON as partition -> offset: Kafka's ``{"topic": {"0": 12}}`` as
    ``{"topic-0": 12}``, the generator's ``{"rows": 12}`` as it is."""
    if not isinstance(offsets, Mapping):
        return {}
    out = {}
    for key, value in offsets.items():
        if isinstance(value, Mapping):
            out.update({f"{key}-{p}": int(o) for p, o in value.items()})
        elif isinstance(value, int):
            out[key] = value
    return out


def batch_progress(commit: StreamCommit) -> dict[str, Any]:
    """The last micro-batch of the stream whose newest table commit is ``commit``, as plain data."""
    meta = commit.metadata
    committed_ms, started_ms = commit.timestamp_ms, meta.get("started_ms")
    commit_started_ms = meta.get("commit_started_ms")
    phases = meta.get("phases_ms") or {}
    batch_ms = committed_ms - started_ms if committed_ms is not None and started_ms is not None else None
    rows = meta.get("rows")
    start, end = _partitions(meta.get("start_offsets")), _partitions(meta.get("offsets"))
    return {
        "batch_id": meta.get("batch"),
        "txn_version": meta.get("txn"),
        "rows": rows,
        "quarantined": meta.get("quarantined"),
        "durations_ms": {
            # Summed over the batch's Spark tasks (on N cores the job takes about a 1/N of their sum).
            "read": phases.get("read"), "parse": phases.get("parse"), "write": phases.get("write"),
            "job": meta.get("job_ms"),  # the Spark job of those tasks, wall time
            "commit": (committed_ms - commit_started_ms
                       if committed_ms is not None and commit_started_ms is not None else None),
            "batch": batch_ms,  # from the batch's start to its commit's timestamp
        },
        "offsets": {p: {"start": start.get(p), "end": o} for p, o in sorted(end.items())},
        "input_rows_per_second": _rate(rows, meta.get("since_previous_ms")),
        "processed_rows_per_second": _rate(rows, batch_ms),
        # Avro records: the writer schemas the batch met, by id (None for JSON and the generator).
        "schemas": meta.get("schemas"),
        # Fields of its records that are no column ("unseen"), became one ("added"), or held values
        # of another type than their column's ("mismatched"); None when there were none.
        "fields": meta.get("fields"),
    }  # fmt: skip


def _ms(value: int | None) -> str:
    return "?" if value is None else f"{value / 1000:.2f}s"


def _per_second(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def format_progress(stream: str, p: dict[str, Any]) -> list[str]:
    """Text lines of one stream's last micro-batch (under ``status``'s stream line)."""
    if p["batch_id"] is None:
        return []
    d = p["durations_ms"]
    lines = [
        f"  last batch {p['batch_id']} (txn {p['txn_version']}): {p['rows'] or 0:,} rows, "
        f"{p['quarantined'] or 0:,} quarantined; input {_per_second(p['input_rows_per_second'])} rows/s, "
        f"processed {_per_second(p['processed_rows_per_second'])} rows/s",
        f"  durations  batch {_ms(d['batch'])}: Spark job {_ms(d['job'])}, commit {_ms(d['commit'])}; "
        f"task time read {_ms(d['read'])}, parse {_ms(d['parse'])}, write {_ms(d['write'])}",
    ]
    for partition, o in p["offsets"].items():
        start = "?" if o["start"] is None else f"{o['start']:,}"
        lines.append(f"  offsets    {partition}: {start} -> {o['end']:,}")
    for schema_id, seen in (p.get("schemas") or {}).items():
        names = ", ".join(seen.get("versions") or []) or "?"
        refused = f"{seen['refused']}: {seen['reason']}" if seen.get("reason") else seen.get("refused")
        fate = ("unknown to the registry: quarantined" if seen.get("unknown") else
                f"quarantined ({refused})" if seen.get("refused") else "read")  # fmt: skip
        lines.append(f"  schema     {schema_id} ({names}): {seen.get('records', 0):,} records, {fate}")
    fields = p.get("fields") or {}
    for name in fields.get("added") or []:
        lines.append(f"  field      {name}: added to the table as a column before this batch's rows")
    for name, records in (fields.get("unseen") or {}).items():
        lines.append(f"  field      {name}: in {records:,} records, no column of the table (its values not kept)")
    for name, records in (fields.get("mismatched") or {}).items():
        lines.append(f"  field      {name}: {records:,} records quarantined, the value of another type than the "
                     "column's (type_mismatch)")
    return lines
