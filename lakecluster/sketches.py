"""Per-column boundary sketches: mergeable quantile summaries and the boundaries derived from them.

Numbers, dates, timestamps, decimals and booleans go into an Apache DataSketches KLL doubles
sketch (updated with whole numpy arrays). Strings are compared in full, never truncated: they go
into an *exact* frequency summary (value -> count, built and merged with Arrow, vectorised) while
the column has at most ``exact_limit`` distinct values, and into a KLL items sketch after that.
Both forms are mergeable, so executors sketch their part of each micro-batch and the driver merges.

Nulls and NaN are not values of the distribution: they are counted (``nulls``, ``nans``) and left
out of the sketch. When ranks are assigned, null ranks first (0) and NaN last (K-1), the order
Spark sorts them in. Empty strings are ordinary values (the smallest string).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import datasketches as ds
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.errors import SketchStoreError
from lakecluster.schema import ColumnSpec

Kind = Literal["numeric", "string"]
DEFAULT_EXACT_LIMIT = 16_384
_MAGIC = b"LCSK1"


def sketch_kind(col: ColumnSpec) -> Kind:
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


class ColumnSketch:
    """Mergeable quantile sketch of one column (see the module docstring for the two forms)."""

    def __init__(self, kind: Kind, *, k: int = 200, exact_limit: int = DEFAULT_EXACT_LIMIT) -> None:
        self.kind: Kind = kind
        self.k = k
        self.exact_limit = exact_limit
        self.nulls = 0
        self.nans = 0
        self._kll: ds.kll_doubles_sketch | ds.kll_items_sketch | None = None
        # Exact form (strings only): sorted distinct values and their counts.
        self._exact: pa.Table | None = None
        if kind == "numeric":
            self._kll = ds.kll_doubles_sketch(k)
        else:
            self._exact = pa.table({"value": pa.array([], pa.string()), "count": pa.array([], pa.int64())})

    # -- updating -------------------------------------------------------------------------

    @property
    def is_exact(self) -> bool:
        return self._exact is not None

    @property
    def n(self) -> int:
        """Number of non-null, non-NaN values summarised."""
        if self._exact is not None:
            return int(pc.sum(self._exact["count"]).as_py() or 0)
        assert self._kll is not None
        return int(self._kll.n)

    def update(self, array: pa.Array | pa.ChunkedArray) -> None:
        self.nulls += array.null_count
        if self.kind == "numeric":
            values = numeric_values(array)
            finite = values[~np.isnan(values)]
            self.nans += len(values) - len(finite) - array.null_count
            assert isinstance(self._kll, ds.kll_doubles_sketch)
            if len(finite):
                self._kll.update(finite)
            return
        strings = pc.drop_null(array.cast(pa.string()))
        if self._exact is not None:
            counts = pc.value_counts(strings)
            batch = pa.table({"value": counts.field("values"), "count": counts.field("counts").cast(pa.int64())})
            self._merge_exact(batch)
        else:
            assert self._kll is not None
            # KLL items takes one item per call; reached only by string columns with more than
            # exact_limit distinct values (see docs/sketches.md for the measured cost).
            for value in strings.to_pylist():
                self._kll.update(value)

    def _merge_exact(self, other: pa.Table) -> None:
        assert self._exact is not None
        merged = pa.concat_tables([self._exact, other]).group_by("value").aggregate([("count", "sum")])
        merged = merged.rename_columns(["value", "count"]).sort_by("value")
        if merged.num_rows > self.exact_limit:
            self._exact = None
            self._kll = ds.kll_items_sketch(self.k)
            self._feed_counts(merged)
        else:
            self._exact = merged

    def _feed_counts(self, table: pa.Table) -> None:
        # Runs once, when a string column outgrows the exact form, or when a partial exact
        # summary meets a KLL form; the cost is proportional to the rows it summarises.
        assert self._kll is not None
        for value, count in zip(table["value"].to_pylist(), table["count"].to_pylist(), strict=True):
            for _ in range(count):
                self._kll.update(value)

    def merge(self, other: ColumnSketch) -> None:
        if other.kind != self.kind:
            raise ValueError(f"cannot merge a {other.kind} sketch into a {self.kind} sketch")
        self.nulls += other.nulls
        self.nans += other.nans
        if other._exact is not None:
            if self._exact is not None:
                self._merge_exact(other._exact)
            else:
                self._feed_counts(other._exact)
            return
        assert other._kll is not None
        if self._exact is not None:
            exact = self._exact
            self._exact = None
            self._kll = ds.kll_items_sketch(self.k)
            self._kll.merge(other._kll)
            self._feed_counts(exact)
        else:
            assert self._kll is not None
            self._kll.merge(other._kll)

    # -- reading --------------------------------------------------------------------------

    def normalized_rank_error(self) -> float:
        """Bound on the rank error of a single quantile query (0 for the exact form)."""
        if self._exact is not None:
            return 0.0
        assert self._kll is not None
        return float(self._kll.normalized_rank_error(False))

    def quantiles(self, fractions: Sequence[float]) -> list[float] | list[str]:
        """Values at the given normalized ranks (empty list when the sketch is empty)."""
        if self.n == 0:
            return []
        if self._exact is not None:
            counts = np.cumsum(self._exact["count"].to_numpy())
            idx = np.searchsorted(counts, np.asarray(fractions, dtype=np.float64) * counts[-1], side="left")
            idx = np.clip(idx, 0, len(counts) - 1)
            return self._exact["value"].take(pa.array(idx)).to_pylist()
        assert self._kll is not None
        return list(self._kll.get_quantiles(list(fractions)))

    # -- bytes ----------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        header = {"kind": self.kind, "k": self.k, "exact_limit": self.exact_limit,
                  "nulls": self.nulls, "nans": self.nans, "exact": self._exact is not None}  # fmt: skip
        if self._exact is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self._exact.schema) as writer:
                writer.write_table(self._exact)
            payload = sink.getvalue().to_pybytes()
        elif isinstance(self._kll, ds.kll_items_sketch):
            payload = self._kll.serialize(ds.PyStringsSerDe())
        else:
            assert self._kll is not None
            payload = self._kll.serialize()
        head = json.dumps(header).encode()
        return _MAGIC + struct.pack("<I", len(head)) + head + payload

    @classmethod
    def from_bytes(cls, data: bytes) -> ColumnSketch:
        if not data.startswith(_MAGIC):
            raise SketchStoreError("not a lakecluster column sketch (bad magic)")
        (size,) = struct.unpack_from("<I", data, len(_MAGIC))
        start = len(_MAGIC) + 4
        header = json.loads(data[start : start + size])
        payload = data[start + size :]
        sketch = cls(header["kind"], k=header["k"], exact_limit=header["exact_limit"])
        sketch.nulls, sketch.nans = header["nulls"], header["nans"]
        if header["exact"]:
            sketch._exact = pa.ipc.open_stream(payload).read_all()
        elif header["kind"] == "string":
            sketch._exact = None
            sketch._kll = ds.kll_items_sketch.deserialize(payload, ds.PyStringsSerDe())
        else:
            sketch._kll = ds.kll_doubles_sketch.deserialize(payload)
        return sketch


@dataclass(frozen=True)
class Boundaries:
    """Sorted, distinct lower edges of a column's ranges; maps values to dense ranks 0..K-1.

    Range i holds the values v with ``edges[i] <= v < edges[i+1]``; values below the first edge
    fall in range 0. Low-cardinality or skewed columns yield fewer than the K asked for, because
    equal quantiles collapse into one edge (so ranks stay dense).
    """

    column: str
    kind: Kind
    edges: np.ndarray
    # Where each range starts in the column's distribution (fraction of rows below it, 0..1).
    # Equal-depth levels (``level_of``) come from it, so a column's coarse splits cut its rows,
    # not its distinct values, into equal parts.
    starts: np.ndarray | None = None

    def _starts(self) -> np.ndarray:
        n = len(self.edges)
        return self.starts if self.starts is not None else np.arange(n, dtype=np.float64) / max(n, 1)

    def mass(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Fraction of the column's rows with ranks ``lo..hi`` (inclusive)."""
        ends = np.append(self._starts(), 1.0)
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
            # Rank the distinct values once, then spread by dictionary index.
            encoded = pc.dictionary_encode(array.cast(pa.string()))
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
        bounds = np.append(self._starts(), 1.0)
        middle = (bounds[:-1] + bounds[1:]) / 2
        return np.clip((middle[ranks] * levels).astype(np.int64), 0, levels - 1)


class BoundarySketches:
    """The sketches of all clustering columns of a table, with the versions they cover."""

    def __init__(
        self,
        sketches: Mapping[str, ColumnSketch],
        *,
        delta_version: int = -1,
        stream_batch_id: int = -1,
    ) -> None:
        self.sketches = dict(sketches)
        self.delta_version = delta_version
        self.stream_batch_id = stream_batch_id

    @classmethod
    def empty(cls, columns: Sequence[ColumnSpec], *, k: int = 200) -> BoundarySketches:
        return cls({c.name: ColumnSketch(sketch_kind(c), k=k) for c in columns})

    def merge(self, other: Mapping[str, ColumnSketch]) -> None:
        for name, sketch in other.items():
            self.sketches[name].merge(sketch)

    def boundaries(self, column: str, k: int = 1024) -> Boundaries:
        """Up to ``k`` equal-depth boundaries of ``column`` (fewer if values repeat)."""
        if column not in self.sketches:
            raise KeyError(f"no sketch for column '{column}'; sketched: {', '.join(self.sketches)}")
        sketch = self.sketches[column]
        quantiles = sketch.quantiles([i / k for i in range(k)])
        if not quantiles:
            empty = np.asarray([], dtype=np.float64 if sketch.kind == "numeric" else str)
            return Boundaries(column, sketch.kind, empty, np.asarray([], dtype=np.float64))
        values = np.asarray(quantiles, dtype=np.float64 if sketch.kind == "numeric" else str)
        edges, first = np.unique(values, return_index=True)
        # quantiles are sorted: range i spans fractions first[i]/k .. first[i+1]/k
        return Boundaries(column, sketch.kind, edges, first / float(k))

    def ranks(self, column: str, values: pa.Array | pa.ChunkedArray, k: int = 1024) -> np.ndarray:
        return self.boundaries(column, k).ranks(values)
