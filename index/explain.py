"""``lakecluster explain --where``: how much of the table a predicate lets a reader skip."""

from __future__ import annotations

from typing import Any

from lakecluster.index.prune import PruneResult, prune
from lakecluster.index.spec import IndexSpec
from lakecluster.sizes import human_bytes


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def explain(spec: IndexSpec, where: str, *, sync: bool = False) -> dict[str, Any]:
    """The report of ``prune`` at the table's latest version; the index is written only with ``sync``
    (otherwise the commits it lacks are read from the Delta log, in memory)."""
    return report(prune(spec, where, index="sync" if sync else "latest"), spec.table_uri)


def report(r: PruneResult, table: str) -> dict[str, Any]:
    to_read, read_bytes = r.files.num_rows, r.bytes_candidate
    return {
        "table": table, "version": r.version, "where": r.predicate,
        "files_total": r.files_total, "files_to_read": to_read, "files_skipped": r.files_total - to_read,
        "skipped_pct": _pct(r.files_total - to_read, r.files_total),
        "bytes_total": r.bytes_total, "bytes_to_read": read_bytes, "bytes_skipped": r.bytes_total - read_bytes,
        "bytes_skipped_pct": _pct(r.bytes_total - read_bytes, r.bytes_total),
        "index_columns_read": r.columns_read, "index_bytes_read": r.index_bytes_read,
        "index": {"delta_version": r.index_version, "commits_from_log": r.commits_from_log,
                  "built_in_memory": r.built_in_memory or None},
        "conjuncts": [
            {"conjunct": c.text, "files_to_read": c.files, "files_skipped": r.files_total - c.files,
             "skipped_pct": _pct(r.files_total - c.files, r.files_total),
             "bytes_skipped": r.bytes_total - c.bytes, "indexed": c.indexed}
            for c in r.conjuncts
        ],
    }  # fmt: skip


def _mb(n: int) -> str:
    return human_bytes(n)


def _freshness(idx: dict[str, Any]) -> str:
    """Where the answer's file stats came from, and that nothing was written."""
    if idx["built_in_memory"]:
        return (f"index: built from the Delta log in memory ({idx['built_in_memory']}); not written: "
                "`lakecluster index sync` or `explain --sync` stores it")
    if idx["commits_from_log"]:
        return (f"index: at version {idx['delta_version']}, {idx['commits_from_log']} newer commit(s) read from the "
                "Delta log in memory; not written: `lakecluster index sync` or `explain --sync` stores them")
    return f"index: at version {idx['delta_version']}, up to date"


def format_text(rep: dict[str, Any]) -> str:
    lines = [
        f"table {rep['table']} at version {rep['version']}",
        f"where {rep['where']}",
        f"files: {rep['files_total']:,} total, {rep['files_to_read']:,} must be read, "
        f"{rep['files_skipped']:,} skipped ({rep['skipped_pct']:.1f}%)",
        f"bytes: {_mb(rep['bytes_total'])} total, {_mb(rep['bytes_skipped'])} skipped "
        f"({rep['bytes_skipped_pct']:.1f}%)",
        *([] if rep["index"]["built_in_memory"] else
          [f"index: read {_mb(rep['index_bytes_read'])} for column(s) {', '.join(rep['index_columns_read'])}"]),
        _freshness(rep["index"]),
        "per conjunct (alone):",
    ]
    width = max((len(c["conjunct"]) for c in rep["conjuncts"]), default=10)
    for c in rep["conjuncts"]:
        note = "" if c["indexed"] else "  (column not indexed: skips nothing)"
        lines.append(f"  {c['conjunct']:<{width}}  files {c['files_to_read']:>8,}  skipped {c['skipped_pct']:5.1f}%  "
                     f"bytes skipped {_mb(c['bytes_skipped'])}{note}")  # fmt: skip
    return "\n".join(lines)
