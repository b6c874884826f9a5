"""Per-column boundary sketches: mergeable quantile summaries and the boundaries derived from them.

Numbers, dates, timestamps, decimals and booleans go into an Apache DataSketches KLL doubles
sketch (updated with whole numpy arrays). Strings go into a deterministic *compacting summary*
(:class:`StringSummary`): a sorted table of (value, count, above) built and merged with Arrow and
numpy, never value by value. It is exact (value -> count) while the column has at most
``exact_limit`` distinct values; past that, adjacent entries are merged so it never holds more than
``exact_limit`` entries, and every entry carries the bound of the rank error that merging caused.
Both forms are mergeable, so executors sketch their part of each micro-batch and the driver merges.

String values are cut to their first ``max_string_chars`` characters before they are counted, so
an entry is bounded however long the value; :meth:`Boundaries.ranks` cuts the values it ranks the
same way. Nulls and NaN are not values of the distribution: they are counted (``nulls``, ``nans``)
and left out of the sketch. When ranks are assigned, null ranks first (0) and NaN last (K-1), the
order Spark sorts them in. Empty strings are ordinary values (the smallest string).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import datasketches as ds
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.cuts import Unit, mass_below
from lakecluster.errors import SketchStoreError
from lakecluster.schema import ColumnSpec

Kind = Literal["numeric", "string"]
DEFAULT_EXACT_LIMIT = 16_384
MAX_STRING_CHARS_DEFAULT = 64
_MAGIC = b"LCSK1"
# 1: string columns as an exact table or a KLL items sketch, never truncated (read, converted).
# 2: string columns as a StringSummary table, values cut to max_string_chars.
_FORMAT = 2
_PENDING_LIMIT = 8
_TABLE_SCHEMA = pa.schema([("value", pa.string()), ("count", pa.int64()), ("above", pa.int64())])


def sketch_kind(col: ColumnSpec) -> Kind:
    """The sketch form a column gets: ``string`` for strings, ``numeric`` for everything else."""
    return "string" if col.type == "string" else "numeric"


def numeric_values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Column values as float64 in the column's order (dates as days, timestamps as µs).

    Nulls become NaN; callers that need them apart check the validity themselves.
    """
    t = array.type
    if pa.types.is_timestamp(t):
        array = array.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_date32(t):
        array = array.cast(pa.int32())
    elif pa.types.is_boolean(t):
        array = array.cast(pa.int8())
    return np.asarray(pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def truncate_strings(array: pa.Array | pa.ChunkedArray, max_chars: int) -> pa.Array | pa.ChunkedArray:
    """``array`` as strings cut to their first ``max_chars`` characters (code points, never mid-character).

    Cutting is monotone: ``a <= b`` implies ``cut(a) <= cut(b)``, so sorted order is kept (with ties).
    """
    strings = array.cast(pa.string())
    if len(strings) == 0 or (pc.max(pc.binary_length(strings)).as_py() or 0) <= max_chars:
        return strings  # no value has more bytes, so none has more characters: skip the copy
    return pc.utf8_slice_codeunits(strings, 0, max_chars)


def _not_equal_to_previous(values: pa.Array) -> np.ndarray:
    """``out[i]`` is whether ``values[i]`` differs from ``values[i-1]`` (true at 0)."""
    out = np.ones(len(values), dtype=bool)
    if len(values) > 1:
        out[1:] = pc.not_equal(values.slice(1), values.slice(0, len(values) - 1)).to_numpy(zero_copy_only=False)
    return out


@dataclass(frozen=True)
class StringSummary:
    """Deterministic mergeable quantile summary of strings: sorted (value, count, above) entries.

    Every value summarised is counted at exactly one entry, one whose value is less than or equal
    to it. ``above[i]`` is an upper bound on how many of the values counted at entries ``0..i``
    are greater than ``values[i]``; all zero means the summary is exact (each entry counts only
    its own value). With ``P[i] = counts[:i].sum()`` and ``E[i] = P[i] + counts[i]`` this gives,
    for every entry, ``#{x < values[i]} <= P[i]`` and ``#{x <= values[i]} >= E[i] - above[i]``;
    :meth:`rank_error` turns that into the bound of a quantile query. ``inherited`` is an absolute
    rank error carried over from a converted KLL items sketch (0 otherwise); ``maximum`` is the
    largest value summarised.

    Merging concatenates the entries and sums the counts of equal values; a value of one summary
    that falls inside an entry of the other inherits that entry's ``above`` (those values may lie
    above it). :meth:`compact` merges runs of adjacent entries into their first one (count summed,
    ``above`` grown by the counts merged in), choosing the runs so that at most ``capacity``
    entries remain and the largest ``above`` is as small as it can make it.
    """

    values: pa.Array
    counts: np.ndarray
    above: np.ndarray
    maximum: str | None = None
    inherited: int = 0

    @classmethod
    def empty(cls) -> StringSummary:
        """A summary of no values."""
        return cls(pa.array([], pa.string()), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def of(cls, strings: pa.Array | pa.ChunkedArray) -> StringSummary:
        """The exact summary of non-null ``strings`` (hash counts, then one sort of the distinct values)."""
        counted = pc.value_counts(strings)
        if len(counted) == 0:
            return cls.empty()
        order = pc.sort_indices(counted.field("values"))
        values = counted.field("values").take(order)
        counts = counted.field("counts").take(order).to_numpy().astype(np.int64)
        return cls(values, counts, np.zeros(len(counts), np.int64), values[-1].as_py())

    @classmethod
    def of_weighted(cls, values: pa.Array, weights: np.ndarray, inherited: int = 0) -> StringSummary:
        """The exact summary of ``values`` each counted ``weights`` times (equal values summed)."""
        if len(values) == 0:
            return cls.empty()
        table = pa.table({"value": values.cast(pa.string()), "count": pa.array(weights, pa.int64())})
        grouped = table.group_by("value").aggregate([("count", "sum")]).sort_by("value")
        counts = grouped["count_sum"].to_numpy().astype(np.int64)
        sorted_values = grouped["value"].combine_chunks()
        return cls(sorted_values, counts, np.zeros(len(counts), np.int64), sorted_values[-1].as_py(), inherited)

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def n(self) -> int:
        """Number of values summarised."""
        return int(self.counts.sum())

    @property
    def is_exact(self) -> bool:
        """Whether every entry counts only its own value (true until the first compaction)."""
        return self.inherited == 0 and not self.above.any()

    # -- combining ------------------------------------------------------------------------

    def merge(self, other: StringSummary) -> StringSummary:
        """The summary of both summaries' values (see :meth:`merge_all`)."""
        return StringSummary.merge_all([self, other])

    @staticmethod
    def merge_all(parts: Sequence[StringSummary]) -> StringSummary:
        """The summary of all parts' values: one sort of all their entries, however many parts.

        Counts of equal values add up. The values of a part above a merged value v were counted
        at or before the part's last entry at or below v, so there are at most that entry's
        ``above`` of them, and none once v reaches the part's maximum; a merged entry's ``above``
        is the sum of that over the parts. Cost O(entries log entries), whatever the rows.
        """
        inherited = sum(p.inherited for p in parts)
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return replace(parts[0] if parts else StringSummary.empty(), inherited=inherited)
        maxima = [p.maximum for p in parts if p.maximum is not None]
        if len(maxima) != len(parts):
            raise ValueError("a non-empty string summary has no maximum")
        # One row per entry, plus one closing row per part at its maximum. A row carries the change
        # of its part's contribution to ``above``: an entry's above minus the previous entry's, the
        # closing row minus the last one (nothing of a part lies above its maximum, so later,
        # larger values, e.g. time-ordered keys, inherit no error from it). The running sum of
        # the changes in sorted order is then the sum over the parts at every row.
        values = pa.concat_arrays([p.values for p in parts] + [pa.array(maxima, pa.string())])
        counts = np.concatenate([p.counts for p in parts] + [np.zeros(len(parts), np.int64)])
        change = np.concatenate(
            [np.diff(p.above, prepend=0) for p in parts] + [np.asarray([-p.above[-1] for p in parts], np.int64)]
        )
        closing = np.concatenate([np.zeros(len(counts) - len(parts), np.int8), np.ones(len(parts), np.int8)])
        # closing rows sort after the entries of equal value, so a run of equal values ends past them
        keys = [("v", "ascending"), ("c", "ascending")]
        order = pc.sort_indices(pa.table({"v": values, "c": closing}), sort_keys=keys).to_numpy()
        sorted_values = values.take(pa.array(order))
        starts = np.flatnonzero(_not_equal_to_previous(sorted_values))
        ends = np.append(starts[1:], len(order)) - 1
        merged_counts = np.add.reduceat(counts[order], starts)
        above = np.cumsum(change[order])[ends]
        keep = np.flatnonzero(merged_counts > 0)  # a maximum inside an entry's run is no entry
        return StringSummary(sorted_values.take(pa.array(starts[keep])), merged_counts[keep], above[keep],
                             max(maxima), inherited)  # fmt: skip

    def compact(self, capacity: int) -> StringSummary:
        """At most ``capacity`` entries, merging runs of adjacent entries into their first one.

        An exact summary (a batch's own counts) is cut into equal-depth runs in one pass: run starts
        are the entries holding the ranks 0, W, 2W, ... (W = n / capacity), so a run takes in fewer
        than W values and every ``above`` stays below W. Otherwise runs are chosen greedily for a
        budget B (an entry takes in the next entries while its ``above`` plus their counts stays
        within B), B being the smallest, within 3%, that leaves at most ``capacity`` runs.
        """
        if len(self) <= capacity:
            return self
        if self.is_exact:
            end = np.cumsum(self.counts)
            cut = np.arange(capacity, dtype=np.float64) * (end[-1] / capacity)
            leaders = np.zeros(len(self), dtype=bool)
            leaders[np.searchsorted(end, cut, side="right")] = True
        else:
            leaders = _leaders_within_capacity(self.counts, self.above, capacity)
        idx = np.flatnonzero(leaders)
        counts = np.add.reduceat(self.counts, idx)
        above = self.above[idx] + (counts - self.counts[idx])
        return StringSummary(self.values.take(pa.array(idx)), counts, above, self.maximum, self.inherited)

    def truncate(self, max_chars: int) -> StringSummary:
        """The summary of the values cut to ``max_chars`` characters (entries whose cuts are equal merge)."""
        if len(self) == 0 or (pc.max(pc.utf8_length(self.values)).as_py() or 0) <= max_chars:
            return self
        cut = truncate_strings(self.values, max_chars)
        starts = np.flatnonzero(_not_equal_to_previous(cut))
        ends = np.append(starts[1:], len(cut)) - 1
        # values above the cut of the run are above every entry of the run: the last entry's bound holds
        maximum = None if self.maximum is None else self.maximum[:max_chars]
        return StringSummary(cut.take(pa.array(starts)), np.add.reduceat(self.counts, starts),
                             self.above[ends], maximum, self.inherited)  # fmt: skip

    # -- reading --------------------------------------------------------------------------

    def _query(self, fractions: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """For each fraction, the entry to answer with (``len(self)`` means ``maximum``) and its error bound."""
        counts, above = self.counts, self.above
        end = np.cumsum(counts)
        total = end[-1]
        r = np.clip(np.asarray(fractions, dtype=np.float64), 0.0, 1.0) * total
        i = np.clip(np.searchsorted(end, r, side="left"), 0, len(counts) - 1)
        # entry i: #{x < v_i} <= P_i <= r, #{x <= v_i} >= E_i - above_i
        bound_i = np.maximum(0.0, r - (end[i] - above[i]))
        # the next entry (or the maximum after the last): #{x < v_j} <= E_i, #{x <= v_j} >= E_j - above_j
        j = i + 1
        has_next = j < len(counts)
        jc = np.minimum(j, len(counts) - 1)
        bound_next = np.where(
            has_next,
            np.maximum.reduce([np.zeros_like(r), end[i] - r, r - (end[jc] - above[jc])]),
            np.maximum(0.0, total - 1 - r),
        )
        use_next = bound_next < bound_i
        return np.where(use_next, j, i), np.where(use_next, bound_next, bound_i)

    def quantiles(self, fractions: Sequence[float]) -> list[str]:
        """Values at the given normalized ranks (exact while :attr:`is_exact`); empty when empty."""
        if len(self) == 0:
            return []
        entry, _bound = self._query(fractions)
        out = self.values.take(pa.array(np.minimum(entry, len(self) - 1))).to_pylist()
        for position in np.flatnonzero(entry == len(self)).tolist():
            out[position] = self.maximum
        return out

    def rank_error(self) -> float:
        """Absolute bound on the rank error of any quantile query (0 when exact).

        For a target rank r inside entry i (P_i < r <= E_i) the query answers v_i or the next value,
        whichever has the smaller bound: v_i is off by at most ``r - (E_i - above_i)``, the next by at
        most ``max(E_i - r, r - (E_j - above_j))``. Whichever r is, the smaller is at most
        ``max(above_i / 2, min(above_i, above_j - counts_j))`` (below the midpoint of the window take
        v_i, above it the next), and ``above_last / 2`` after the last entry, where the next value
        is the maximum. Plus the error inherited from a converted KLL sketch.
        """
        if len(self) == 0:
            return 0.0
        above = self.above.astype(np.float64)
        bound = above / 2
        follow = np.minimum(above[:-1], above[1:] - self.counts[1:])
        bound[:-1] = np.maximum(bound[:-1], follow)
        return float(bound.max()) + self.inherited


def _leaders(counts: np.ndarray, above: np.ndarray, budget: float) -> np.ndarray:
    """Greedy runs for ``budget``: mask of the entries that start a run (entry 0 always does).

    An entry i starting a run takes in the following entries while ``above[i]`` plus their counts
    stays within the budget; the next run starts at the first entry that does not fit. The chain
    0 -> next(0) -> ... is followed by pointer doubling, so the work is vectorised (log steps).
    """
    n = len(counts)
    end = np.cumsum(counts)
    nxt = np.searchsorted(end, end + (budget - above), side="right")
    nxt = np.clip(nxt, np.arange(1, n + 1), n)
    on = np.zeros(n + 1, dtype=bool)
    on[0] = True
    jump = np.append(nxt, n)  # n is the end of the chain and jumps to itself
    # after step k, ``on`` holds the chain's first 2^(k+1) entries and ``jump`` is next^(2^(k+1))
    while True:
        on[jump[on]] = True
        if jump[0] == n:
            return on[:n]
        jump = jump[jump]


def _leaders_within_capacity(counts: np.ndarray, above: np.ndarray, capacity: int) -> np.ndarray:
    """Run starts for the smallest budget (within 3%) that leaves at most ``capacity`` runs.

    The search spans budgets below the largest ``above`` too: entries with large bounds are then
    taken into runs (their bound no longer matters) instead of staying, so the bound can shrink.
    """
    total = float(counts.sum())
    best = _leaders(counts, above, total)  # one run: always fits
    lo, hi = 0.0, math.log(max(total, 1.0))  # bisect log(budget) between 1 row and all of them
    while hi - lo > 0.03:
        mid = (lo + hi) / 2
        leaders = _leaders(counts, above, math.exp(mid))
        if int(leaders.sum()) <= capacity:
            hi, best = mid, leaders
        else:
            lo = mid
    return best


class ColumnSketch:
    """Mergeable quantile sketch of one column: KLL doubles for numbers, :class:`StringSummary` for strings."""

    def __init__(
        self,
        kind: Kind,
        *,
        k: int = 200,
        exact_limit: int = DEFAULT_EXACT_LIMIT,
        max_string_chars: int = MAX_STRING_CHARS_DEFAULT,
    ) -> None:
        if exact_limit < 1:
            # it is the summary's capacity: a summary of 0 entries could hold nothing
            raise ValueError(f"exact_limit must be at least 1, got {exact_limit}")
        if max_string_chars < 1:
            raise ValueError(f"max_string_chars must be at least 1, got {max_string_chars}")
        self.kind: Kind = kind
        self.k = k
        self.exact_limit = exact_limit
        self.max_string_chars = max_string_chars
        self.nulls = 0
        self.nans = 0
        self._kll: ds.kll_doubles_sketch | None = ds.kll_doubles_sketch(k) if kind == "numeric" else None
        self._merged = StringSummary.empty()
        # Summaries added but not merged yet: merged all at once (one sort, one compaction) when
        # read or when they hold more than _PENDING_LIMIT times exact_limit entries, so a task
        # updating batch by batch and a driver merging task after task compact once per several.
        self._pending: list[StringSummary] = []

    @property
    def _strings(self) -> StringSummary:
        """The string summary, pending parts merged in."""
        self._flush()
        return self._merged

    def _flush(self) -> None:
        """Merge the pending parts (cut to the current limit) into the summary and compact it."""
        if not self._pending:
            return
        parts = [p.truncate(self.max_string_chars) for p in [self._merged, *self._pending]]
        # exact parts (a task's batches) merge exactly and are cut in one pass, so the budget
        # search runs on a few times exact_limit entries at most
        exact = StringSummary.merge_all([p for p in parts if p.is_exact]).compact(self.exact_limit)
        rest = [p for p in parts if not p.is_exact]
        self._merged = StringSummary.merge_all([exact, *rest]).compact(self.exact_limit)
        self._pending = []

    def _add(self, summary: StringSummary) -> None:
        self._pending.append(summary)
        if sum(len(p) for p in self._pending) > _PENDING_LIMIT * self.exact_limit:
            self._flush()

    # -- updating -------------------------------------------------------------------------

    @property
    def is_exact(self) -> bool:
        """Whether quantiles are exact: a string summary that never had to compact (numbers: never)."""
        return self.kind == "string" and self._strings.is_exact

    @property
    def n(self) -> int:
        """Number of non-null, non-NaN values summarised."""
        if self._kll is not None:
            return int(self._kll.n)
        return self._strings.n

    @property
    def entries(self) -> int:
        """Entries a string summary holds (at most ``exact_limit``); 0 for numbers."""
        return len(self._strings)

    def update(self, array: pa.Array | pa.ChunkedArray) -> None:
        """Add a batch of values (vectorised; strings are cut to ``max_string_chars`` first)."""
        self.nulls += array.null_count
        if self._kll is not None:
            values = numeric_values(array)
            finite = values[~np.isnan(values)]
            self.nans += len(values) - len(finite) - array.null_count
            if len(finite):
                self._kll.update(finite)
            return
        strings = truncate_strings(pc.drop_null(array), self.max_string_chars)
        # a batch with more distinct values than the capacity is cut on its own first (one pass)
        self._add(StringSummary.of(strings).compact(self.exact_limit))

    def merge(self, other: ColumnSketch) -> None:
        """Add ``other``'s values; strings keep the smaller ``max_string_chars`` of the two."""
        if other.kind != self.kind:
            raise ValueError(f"cannot merge a {other.kind} sketch into a {self.kind} sketch")
        self.nulls += other.nulls
        self.nans += other.nans
        if self._kll is not None:
            assert other._kll is not None
            self._kll.merge(other._kll)
            return
        # pending parts are cut to the (possibly smaller) limit when they are merged
        self.max_string_chars = min(self.max_string_chars, other.max_string_chars)
        self._add(other._strings)

    # -- reading --------------------------------------------------------------------------

    def normalized_rank_error(self) -> float:
        """Bound on the rank error of a single quantile query, as a fraction of ``n``.

        Numbers: the KLL bound (99% confidence). Strings: the summary's tracked bound, 0 while exact
        (plus the KLL bound inherited from a converted format-1 sketch).
        """
        if self._kll is not None:
            return float(self._kll.normalized_rank_error(False))
        n = self._strings.n
        return self._strings.rank_error() / n if n else 0.0

    def exact_values(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(values sorted, rows of each) of an exact string summary; None for any other sketch."""
        if not self.is_exact:
            return None
        summary = self._strings
        return np.asarray(summary.values.to_pylist(), dtype=object), np.asarray(summary.counts, dtype=np.int64)

    def distinct_bound(self, integral: bool = False) -> int:
        """At most how many distinct values the column holds (nulls and NaN aside).

        Strings: the entries of an exact summary, else the values seen. Numbers: the values seen,
        and for an ``integral`` column (integers, dates) no more than the integers between its
        smallest and largest value.
        """
        if self.n == 0:
            return 0
        if self._kll is None:
            return self.entries if self.is_exact else self.n
        if integral:
            span = self._kll.get_max_value() - self._kll.get_min_value() + 1
            return int(min(self.n, span))
        return self.n

    def quantiles(self, fractions: Sequence[float]) -> list[float] | list[str]:
        """Values at the given normalized ranks (empty list when the sketch is empty)."""
        if self.n == 0:
            return []
        if self._kll is not None:
            return list(self._kll.get_quantiles(list(fractions)))
        return self._strings.quantiles(fractions)

    # -- bytes ----------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Magic, a JSON header, then the KLL bytes or the summary as an Arrow IPC stream."""
        header: dict[str, object] = {
            "format": _FORMAT, "kind": self.kind, "k": self.k, "exact_limit": self.exact_limit,
            "max_string_chars": self.max_string_chars, "nulls": self.nulls, "nans": self.nans,
        }  # fmt: skip
        if self._kll is not None:
            payload = self._kll.serialize()
        else:
            s = self._strings
            header["maximum"], header["inherited"] = s.maximum, s.inherited
            table = pa.table([s.values, pa.array(s.counts), pa.array(s.above)], schema=_TABLE_SCHEMA)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, _TABLE_SCHEMA) as writer:
                writer.write_table(table)
            payload = sink.getvalue().to_pybytes()
        head = json.dumps(header).encode()
        return _MAGIC + struct.pack("<I", len(head)) + head + payload

    @classmethod
    def from_bytes(cls, data: bytes) -> ColumnSketch:
        """Read :meth:`to_bytes` output, format 2 or the format-1 bytes written before it."""
        if not data.startswith(_MAGIC):
            raise SketchStoreError("not a lakecluster column sketch (bad magic)")
        (size,) = struct.unpack_from("<I", data, len(_MAGIC))
        start = len(_MAGIC) + 4
        header = json.loads(data[start : start + size])
        payload = data[start + size :]
        fmt = header.get("format", 1)
        if fmt not in (1, _FORMAT):
            raise SketchStoreError(f"column sketch format {fmt} is newer than this version reads ({_FORMAT})")
        # format 1 task sketches could say exact_limit 0 ("KLL from the first value"): default capacity
        limit = header["exact_limit"] or DEFAULT_EXACT_LIMIT
        chars = header.get("max_string_chars", MAX_STRING_CHARS_DEFAULT)
        sketch = cls(header["kind"], k=header["k"], exact_limit=limit, max_string_chars=chars)
        sketch.nulls, sketch.nans = header["nulls"], header["nans"]
        if header["kind"] == "numeric":
            sketch._kll = ds.kll_doubles_sketch.deserialize(payload)
        elif fmt == 1:
            sketch._merged = _format1_strings(header, payload).truncate(sketch.max_string_chars)
            sketch._merged = sketch._merged.compact(sketch.exact_limit)
        else:
            table = pa.ipc.open_stream(payload).read_all()
            if table.num_rows and header["maximum"] is None:
                raise SketchStoreError("string sketch without its maximum")
            sketch._merged = StringSummary(
                table["value"].combine_chunks(),
                table["count"].to_numpy().astype(np.int64),
                table["above"].to_numpy().astype(np.int64),
                header["maximum"],
                header["inherited"],
            )
        return sketch


def _format1_strings(header: Mapping[str, object], payload: bytes) -> StringSummary:
    """A format-1 string payload as a summary.

    Exact payload (value, count): converted exactly. KLL items payload: the sketch's retained items
    with their weights (they sum to n) become an exact summary of that weighted sample, and the
    KLL's own rank error bound (single rank, 99% confidence) times n is carried in ``inherited``:
    every rank the sample answers is within that of the rank in the data it stands for.
    """
    if header["exact"]:
        table = pa.ipc.open_stream(payload).read_all()
        return StringSummary.of_weighted(table["value"].combine_chunks(), table["count"].to_numpy())
    kll = ds.kll_items_sketch.deserialize(payload, ds.PyStringsSerDe())
    if kll.is_empty():
        return StringSummary.empty()
    # one Python step per retained item (about 3k for k = 200), once per sketch read, never per row
    items, weights = zip(*kll, strict=True)
    inherited = math.ceil(kll.normalized_rank_error(False) * kll.n)
    # the maximum stays the largest retained item: the bounds hold for the weighted sample
    return StringSummary.of_weighted(pa.array(items, pa.string()), np.asarray(weights, np.int64), inherited)


@dataclass(frozen=True)
class Boundaries:
    """Sorted, distinct lower edges of a column's ranges; maps values to dense ranks 0..K-1.

    Range i holds the values v with ``edges[i] <= v < edges[i+1]``; values below the first edge
    fall in range 0. Low-cardinality or skewed columns yield fewer than the K asked for, because
    equal quantiles collapse into one edge (so ranks stay dense). String values are cut to
    ``max_string_chars`` characters before they are ranked, as the sketch cut them (with edges of
    at most that length the ranks are the same either way; cutting bounds the memory of ranking).
    """

    column: str
    kind: Kind
    edges: np.ndarray
    # Where each range starts in the column's distribution (fraction of rows below it, 0..1).
    # Equal-depth levels (``level_of``) come from it, so a column's coarse splits cut its rows,
    # not its distinct values, into equal parts.
    starts: np.ndarray | None = None
    max_string_chars: int | None = None

    def fractions(self) -> np.ndarray:
        """Fraction of the column's rows below each edge."""
        n = len(self.edges)
        return self.starts if self.starts is not None else np.arange(n, dtype=np.float64) / max(n, 1)

    def including(self, values: np.ndarray) -> Boundaries:
        """These boundaries with ``values`` added as edges, so that ranks also split at them.

        The rows below an added edge are estimated from its neighbours (``cuts.mass_below``).
        """
        values = np.asarray(values, dtype=self.edges.dtype)
        new = np.setdiff1d(values, self.edges)
        if len(new) == 0:
            return self
        unit: Unit = "string" if self.kind == "string" else "number"
        edges = np.concatenate([self.edges, new])
        fractions = np.concatenate([self.fractions(), mass_below(self.edges, self.fractions(), new, unit)])
        order = np.argsort(edges, kind="stable")
        return replace(self, edges=edges[order], starts=np.maximum.accumulate(fractions[order]))

    def mass(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Fraction of the column's rows with ranks ``lo..hi`` (inclusive)."""
        ends = np.append(self.fractions(), 1.0)
        return ends[np.asarray(hi) + 1] - ends[np.asarray(lo)]

    def __len__(self) -> int:
        return len(self.edges)

    def ranks(self, array: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Rank of every value, vectorised; null -> 0, NaN -> K-1."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        k = max(len(self.edges), 1)
        if len(self.edges) == 0:
            return np.zeros(len(array), dtype=np.int32)
        if self.kind == "numeric":
            values = numeric_values(array)
            ranks = np.searchsorted(self.edges, values, side="right") - 1
            ranks = np.where(np.isnan(values), k - 1, ranks)
        else:
            strings = array.cast(pa.string())
            if self.max_string_chars is not None:
                strings = truncate_strings(strings, self.max_string_chars)
            # Rank the distinct values once, then spread by dictionary index.
            encoded = pc.dictionary_encode(strings)
            dictionary = np.asarray(encoded.dictionary.to_pylist(), dtype=str)
            dict_ranks = np.searchsorted(self.edges, dictionary, side="right") - 1
            indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
            ranks = dict_ranks[indices] if len(dictionary) else np.zeros(len(array), dtype=np.int64)
        ranks = np.clip(ranks, 0, k - 1)
        if array.null_count:
            ranks = np.where(array.is_null().to_numpy(zero_copy_only=False), 0, ranks)
        return ranks.astype(np.int32)

    def level_of(self, ranks: np.ndarray, levels: int) -> np.ndarray:
        """Equal-depth level ``0..levels-1`` of each rank."""
        if len(self.edges) == 0:
            return np.zeros(len(ranks), dtype=np.int64)
        bounds = np.append(self.fractions(), 1.0)
        middle = (bounds[:-1] + bounds[1:]) / 2
        return np.clip((middle[ranks] * levels).astype(np.int64), 0, levels - 1)


class BoundarySketches:
    """The sketches of all clustering columns of a table, with the versions they cover.

    ``from_table`` names the columns whose sketch began as a sample of the table's rows (a column
    the stream had not sketched, built by the compactor) and the table version it read.
    ``erased_at``: the table version of the newest rebuild from the table's live rows these
    sketches descend from (compaction/erasure.py: after another writer deleted rows; -1: none).
    ``physical``: each sketched column's physical name when it was written (column mapping), so
    the sketch follows a rename (:meth:`follow`).
    """

    def __init__(
        self,
        sketches: Mapping[str, ColumnSketch],
        *,
        delta_version: int = -1,
        stream_batch_id: int = -1,
        from_table: Mapping[str, int] | None = None,
        erased_at: int = -1,
        physical: Mapping[str, str] | None = None,
    ) -> None:
        self.sketches = dict(sketches)
        self.delta_version = delta_version
        self.stream_batch_id = stream_batch_id
        self.from_table = dict(from_table or {})
        self.erased_at = erased_at
        self.physical = dict(physical or {})

    def follow(self, physical: Mapping[str, str]) -> list[tuple[str, str]]:
        """Rename the sketches of columns the table renamed since they were written: ``physical``
        maps the table's columns now to their physical names, which a rename keeps (column
        mapping). Returns the (old, new) names moved; records the physical names from now on."""
        now = {p: name for name, p in physical.items()}
        moved = []
        for name in list(self.sketches):
            renamed = now.get(self.physical.get(name, ""))
            if name not in physical and renamed is not None and renamed not in self.sketches:
                self.sketches[renamed] = self.sketches.pop(name)
                if name in self.from_table:
                    self.from_table[renamed] = self.from_table.pop(name)
                moved.append((name, renamed))
        self.physical = {name: physical[name] for name in self.sketches if name in physical}
        return moved

    def rows(self, column: str) -> int:
        """The values ``column``'s sketch has seen: nulls and NaN included (0 without a sketch)."""
        sketch = self.sketches.get(column)
        return 0 if sketch is None else sketch.n + sketch.nulls + sketch.nans

    @classmethod
    def empty(
        cls, columns: Sequence[ColumnSpec], *, k: int = 200, max_string_chars: int = MAX_STRING_CHARS_DEFAULT
    ) -> BoundarySketches:
        """Empty sketches of ``columns``."""
        return cls({c.name: ColumnSketch(sketch_kind(c), k=k, max_string_chars=max_string_chars) for c in columns})

    def merge(self, other: Mapping[str, ColumnSketch]) -> None:
        """Merge per-column sketches (of a micro-batch) into these."""
        for name, sketch in other.items():
            self.sketches[name].merge(sketch)

    def boundaries(self, column: str, k: int = 1024) -> Boundaries:
        """Up to ``k`` equal-depth boundaries of ``column`` (fewer if values repeat)."""
        if column not in self.sketches:
            raise KeyError(f"no sketch for column '{column}'; sketched: {', '.join(self.sketches)}")
        sketch = self.sketches[column]
        limit = sketch.max_string_chars if sketch.kind == "string" else None
        quantiles = sketch.quantiles([i / k for i in range(k)])
        if not quantiles:
            empty = np.asarray([], dtype=np.float64 if sketch.kind == "numeric" else str)
            return Boundaries(column, sketch.kind, empty, np.asarray([], dtype=np.float64), limit)
        values = np.asarray(quantiles, dtype=np.float64 if sketch.kind == "numeric" else str)
        edges, first = np.unique(values, return_index=True)
        # quantiles are sorted: range i spans fractions first[i]/k .. first[i+1]/k
        return Boundaries(column, sketch.kind, edges, first / float(k), limit)

    def ranks(self, column: str, values: pa.Array | pa.ChunkedArray, k: int = 1024) -> np.ndarray:
        """Ranks of ``values`` among ``k`` boundaries of ``column``."""
        return self.boundaries(column, k).ranks(values)
