"""Data skipping: which files can hold a row matching a predicate, from per-file stats alone.

A file is dropped only when its stats prove that no row of it satisfies the predicate. The
predicate is first put in negation normal form: NOT is pushed down by De Morgan and absorbed by
its operand (``NOT x < 5`` is ``x >= 5``, ``NOT x IN (..)`` is a conjunction of ``!=``,
``NOT BETWEEN`` an ``OR``); in SQL's three-valued logic both sides are NULL for a NULL ``x``, so
null rows never match either way. Each remaining atom gives, per file, "may some row satisfy
it"; AND and OR combine these masks (sound: a row satisfying A AND B satisfies A and B).

Per file and column the index has ``[lo, hi]`` (encoded, ``encoding.py``), null count, value
count and NaN count. Unknown stats (no stats, a column not indexed) keep the file. Floats: NaN
orders above every value and equals itself (Spark, DuckDB), so a file that may hold NaN has
``hi = NaN``; the NaN count is unknown (NaN possible) unless the sync counted it. Literals that are
not on an integer/decimal column's grid are snapped (``x < 2.5`` on an int is ``x <= 2``;
``x = 2.5`` matches nothing).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import metrics
from lakecluster import predicate as P
from lakecluster.errors import PredicateError, StatsIndexError
from lakecluster.index.encoding import NAN_KEY, PREFIX_END, encode_value, exact_value, family, scale
from lakecluster.index.file_ids import find
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import store_for, stored_unusable, sync
from lakecluster.index.view import IndexView
from lakecluster.schema import ColumnSpec
from lakecluster.table import LakeTable

INVERSE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


# ---------------------------------------------------------------------------------------------
# Atoms of the negation normal form


@dataclass(frozen=True)
class Cmp:
    column: str
    op: str
    key: bytes


@dataclass(frozen=True)
class Nulls:
    column: str
    present: bool  # True: "x IS NULL" may hold; False: "x IS NOT NULL" may hold


@dataclass(frozen=True)
class Prefix:
    column: str
    prefix: bytes
    negated: bool  # NOT LIKE 'prefix%'


@dataclass(frozen=True)
class Const:
    value: bool  # False: no row matches


@dataclass(frozen=True)
class AllOf:
    items: tuple[Any, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Any, ...]


def _compare(col: ColumnSpec, op: str, value: Any) -> Any:
    """One comparison as an atom; literals off an integer/decimal column's grid are snapped."""
    exact: Any
    if family(col) == "integer" and isinstance(value, Decimal):
        unscaled = value.scaleb(scale(col))
        lo, hi = int(unscaled.to_integral_value(ROUND_FLOOR)), int(unscaled.to_integral_value(ROUND_CEILING))
        if lo != hi:  # between two representable values
            if op == "=":
                return Const(False)
            if op == "!=":
                return Nulls(col.name, present=False)
            op, exact = ("<=", lo) if op in ("<", "<=") else (">=", hi)
        else:
            exact = lo
    elif family(col) == "float":
        exact = float(value)
    else:
        exact = exact_value(col, value)
    try:
        key = encode_value(col, exact)
    except OverflowError:
        raise PredicateError(f"{value} is out of range for column {col.name} ({col.type})") from None
    return Cmp(col.name, op, key)


def _like(expr: P.Like, negate: bool) -> Any:
    """LIKE by its literal prefix (the text before the first wildcard)."""
    prefix, wildcard_at = P.like_prefix(expr.pattern)
    pattern = expr.pattern
    name = expr.column.name
    if wildcard_at is None:  # no wildcard: plain (in)equality
        return _compare(expr.column, "!=" if negate else "=", prefix)
    if not negate:
        return Prefix(name, prefix.encode(), negated=False) if prefix else Nulls(name, present=False)
    if prefix and set(pattern[wildcard_at:]) == {"%"}:
        return Prefix(name, prefix.encode(), negated=True)
    return Nulls(name, present=False)  # NOT LIKE with inner wildcards: any non-null file may match


def normal_form(expr: P.Expr, negate: bool = False) -> Any:
    """The predicate with NOT pushed down to atoms (``negate``: the result stands for NOT expr)."""
    if isinstance(expr, P.Not):
        return normal_form(expr.item, not negate)
    if isinstance(expr, P.And | P.Or):
        items = tuple(normal_form(i, negate) for i in expr.items)
        return AllOf(items) if isinstance(expr, P.And) != negate else AnyOf(items)
    col = expr.column
    if isinstance(expr, P.Compare):
        return _compare(col, INVERSE[expr.op] if negate else expr.op, expr.value)
    if isinstance(expr, P.InList):
        if expr.negated != negate:
            return AllOf(tuple(_compare(col, "!=", v) for v in expr.values))
        return AnyOf(tuple(_compare(col, "=", v) for v in expr.values))
    if isinstance(expr, P.Between):
        if expr.negated != negate:
            return AnyOf((_compare(col, "<", expr.low), _compare(col, ">", expr.high)))
        return AllOf((_compare(col, ">=", expr.low), _compare(col, "<=", expr.high)))
    if isinstance(expr, P.IsNull):
        return Nulls(col.name, present=(expr.negated == negate))
    return _like(expr, negate != expr.negated)


# ---------------------------------------------------------------------------------------------
# Per-file stats of one column, aligned with the list of files


@dataclass
class FileStats:
    lo: pa.Array  # binary, null: unknown
    hi: pa.Array  # binary; NaN key when the file may hold NaN
    known: np.ndarray
    has_values: np.ndarray  # some non-null value (or unknown)
    has_nulls: np.ndarray  # some null (or unknown)

    @classmethod
    def unknown(cls, n: int) -> FileStats:
        nulls = pa.nulls(n, pa.binary())
        return cls(nulls, nulls, np.zeros(n, bool), np.ones(n, bool), np.ones(n, bool))

    @classmethod
    def aligned(cls, col: ColumnSpec, entries: pa.Table, files: pa.Table) -> FileStats:
        """Stats of ``col`` for ``files`` (fid, value_count), from the column's ``entries`` (fid,
        null_count, nan_count, min, max; any order, at most one per fid)."""
        n = files.num_rows
        if not entries.num_rows:
            return cls.unknown(n)
        fids, efids = files["fid"].to_numpy(), entries["fid"].to_numpy()
        if len(efids) == n and (efids == fids).all():
            t, present = entries, np.ones(n, bool)  # already aligned (the usual case: both sorted by fid)
        else:
            order = np.arange(len(efids)) if (efids[1:] >= efids[:-1]).all() else np.argsort(efids, kind="stable")
            pos, present = find(efids[order], fids)
            t = entries.take(pa.array(order[pos]))

        def ints(arr: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            return arr.fill_null(0).to_numpy(zero_copy_only=False), arr.is_valid().to_numpy(zero_copy_only=False)

        (vc, vc_ok), (nc, nc_ok) = ints(files["value_count"]), ints(t["null_count"])
        nan, nan_ok = ints(t["nan_count"])
        stats_ok = present & vc_ok & nc_ok
        non_null = vc - nc
        has_values = ~stats_ok | (non_null > 0)
        has_nulls = ~stats_ok | (nc > 0)
        lo, hi = t["min"].combine_chunks(), t["max"].combine_chunks()
        if not present.all():
            missing = pa.array(~present)
            lo = pc.if_else(missing, pa.scalar(None, pa.binary()), lo)
            hi = pc.if_else(missing, pa.scalar(None, pa.binary()), hi)
        if family(col) == "float":
            nan_key = pa.scalar(NAN_KEY, pa.binary())
            all_nan = pa.array(stats_ok & nan_ok & (non_null > 0) & (nan == non_null))
            lo = pc.if_else(all_nan, nan_key, lo)
            nan_possible = pa.array(~(nan_ok & present) | (nan > 0))
            hi = pc.if_else(nan_possible, nan_key, hi)
        known = pc.is_valid(lo).to_numpy(zero_copy_only=False) & pc.is_valid(hi).to_numpy(zero_copy_only=False)
        return cls(lo, hi, known, has_values, has_nulls)


def _cmp(arr: pa.Array, op: str, key: bytes) -> np.ndarray:
    fn = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal, "=": pc.equal}[op]
    return fn(arr, pa.scalar(key, pa.binary())).fill_null(False).to_numpy(zero_copy_only=False)


def may_match(atom: Any, stats: dict[str, FileStats], n: int) -> np.ndarray:
    """Per file: may some row satisfy ``atom``? (False only when the stats prove it cannot)."""
    if isinstance(atom, AllOf | AnyOf):
        masks = [may_match(a, stats, n) for a in atom.items]
        combine = np.logical_and if isinstance(atom, AllOf) else np.logical_or
        return combine.reduce(masks) if masks else np.full(n, isinstance(atom, AllOf))
    if isinstance(atom, Const):
        return np.full(n, atom.value)
    s = stats[atom.column]
    if isinstance(atom, Nulls):
        return s.has_nulls.copy() if atom.present else s.has_values.copy()
    if isinstance(atom, Prefix):
        end = atom.prefix + PREFIX_END
        if atom.negated:  # every value starts with the prefix iff both bounds do
            inside = _cmp(s.lo, ">=", atom.prefix) & _cmp(s.hi, "<", end)
            return s.has_values & (~s.known | ~inside)
        return s.has_values & (~s.known | (_cmp(s.hi, ">=", atom.prefix) & _cmp(s.lo, "<", end)))
    op, key = atom.op, atom.key
    if op == "=":
        cond = _cmp(s.lo, "<=", key) & _cmp(s.hi, ">=", key)
    elif op == "!=":
        cond = ~(_cmp(s.lo, "=", key) & _cmp(s.hi, "=", key))
    elif op in ("<", "<="):
        cond = _cmp(s.lo, op, key)
    else:
        cond = _cmp(s.hi, op, key)
    return s.has_values & (~s.known | cond)


# ---------------------------------------------------------------------------------------------
# The API


@dataclass
class ConjunctResult:
    text: str
    files: int  # files this conjunct alone keeps
    bytes: int
    indexed: bool  # False: names a column the index does not cover (keeps every file)


@dataclass
class PruneResult:
    predicate: str
    version: int  # Delta version the answer reflects
    files: pa.Table  # candidates: file, partition, size_bytes, value_count
    files_total: int
    bytes_total: int
    rows_total: int
    conjuncts: list[ConjunctResult] = field(default_factory=list)
    index_bytes_read: int = 0
    columns_read: list[str] = field(default_factory=list)
    index_version: int | None = None  # the stored index's version (None: none was read)
    commits_from_log: int = 0  # commits after it, read from the Delta log and applied in memory
    built_in_memory: str = ""  # why the whole index was built from the log in memory ("": it was not)

    @property
    def paths(self) -> list[str]:
        return self.files["file"].to_pylist()

    @property
    def bytes_candidate(self) -> int:
        return int(pc.sum(self.files["size_bytes"]).as_py() or 0)


def evaluate(expr: P.Expr, indexed: Sequence[ColumnSpec], entries_by_column: dict[str, pa.Table],
             files: pa.Table) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
    """(mask over ``files``, one mask per top-level conjunct): ``files`` has fid and value_count,
    ``entries_by_column`` each column's entries (fid, null_count, nan_count, min, max)."""
    by_name = {c.name: c for c in indexed}
    n = files.num_rows
    stats = {name: FileStats.aligned(by_name[name], rows, files) for name, rows in entries_by_column.items()}
    for name in P.columns_of(expr):
        stats.setdefault(name, FileStats.unknown(n))  # not indexed: nothing can be dropped on it
    masks = [may_match(normal_form(c), stats, n) for c in P.conjuncts(expr)]
    return np.logical_and.reduce(masks) if masks else np.ones(n, bool), masks


INDEX_READS = ("latest", "sync", "stored")


def prune(target: IndexSpec | LakeTable | str, where: str, *, index: str = "latest") -> PruneResult:
    """The files of a table that may hold rows matching ``where``, and how many were skipped.

    A file the index has not seen yet must never be skipped, so the answer reflects the table's
    latest version unless ``index`` is ``"stored"``.

    Args:
        target: the index; a table handle (its configured index); or a table's location (its
            index with the default settings, under ``<table>/_lakecluster/index``).
        where: a SQL where-clause over the table's columns (``lakecluster.predicate``).
        index: ``"latest"`` (default): the stored index with the commits after its version read
            from the Delta log and applied in memory (built in memory when a sync would rebuild
            it); writes nothing. ``"sync"``: sync the stored index first (writes it), then read it.
            ``"stored"``: the stored index only; a stale or missing one is an error, and so is
            one that may be another table's (``sync.identity``: the table was created anew at
            its location, or the index records no table id).

    Returns:
        The files to read and, per top-level conjunct, the files it alone keeps.

    Raises:
        PredicateError: ``where`` does not parse or names an unknown column.
        StatsIndexError: with ``index="stored"``: there is no index, it is behind the table, it
            may be another table's, or it is in a format this code does not read (a sync rebuilds
            it).
    """
    if index not in INDEX_READS:
        raise ValueError(f"index must be one of {', '.join(INDEX_READS)}, got {index!r}")
    if isinstance(target, str):
        spec = IndexSpec.for_location(LakeTable.at(target))
    elif isinstance(target, LakeTable):
        spec = IndexSpec.of(target)
    else:
        spec = target
    if index == "sync":
        sync(spec)  # then read as "latest": commits that land meanwhile are still seen
    if index != "stored":
        view = IndexView.latest(spec)
    else:
        store = store_for(spec)
        manifest = store.manifest()
        if manifest is None:
            raise StatsIndexError(f"no index under {spec.index_path} (run `lakecluster index sync`)")
        if why := stored_unusable(spec, manifest):
            raise StatsIndexError(f"the stored index of {spec.table_uri} cannot answer: {why}; "
                                  "run `lakecluster index sync`")  # fmt: skip
        view = IndexView.stored(store, manifest)
    started = time.monotonic()
    result = _prune(view, where)
    metrics.INDEX_PRUNE_SECONDS.observe(time.monotonic() - started)
    return result


def _prune(view: IndexView, where: str) -> PruneResult:
    expr = P.parse(where, view.columns())
    indexed = view.indexed_columns()
    indexed_names = {c.name for c in indexed}
    wanted = [c for c in P.columns_of(expr) if c in indexed_names]
    # The live files' numbers and counts; paths and partitions only for the files kept.
    live = view.read_live(["size_bytes", "value_count"])
    files = live.rows
    reads = {name: view.read_entries(name) for name in wanted}
    mask, masks = evaluate(expr, indexed, {name: r.rows for name, r in reads.items()}, files)
    sizes = files["size_bytes"].to_numpy(zero_copy_only=False) if files.num_rows else np.zeros(0)
    kept = files.filter(pa.array(mask))
    named = view.files_of(kept["fid"].to_numpy())
    kept = pa.table({"file": named.rows["file"], "partition": named.rows["partition"],
                     "size_bytes": kept["size_bytes"], "value_count": kept["value_count"]})  # fmt: skip
    result = PruneResult(
        where, view.version, kept, files.num_rows, int(sizes.sum()),
        int(pc.sum(files["value_count"]).as_py() or 0),
        index_bytes_read=live.bytes_read + named.bytes_read + sum(r.bytes_read for r in reads.values()),
        columns_read=wanted, index_version=view.manifest.delta_version if view.store is not None else None,
        commits_from_log=view.commits_from_log, built_in_memory=view.rebuilt,
    )  # fmt: skip
    for conjunct, m in zip(P.conjuncts(expr), masks, strict=True):
        text = where[conjunct.span[0] : conjunct.span[1]]
        covered = set(P.columns_of(conjunct)) <= indexed_names
        result.conjuncts.append(ConjunctResult(text, int(m.sum()), int(sizes[m].sum()), covered))
    return result
