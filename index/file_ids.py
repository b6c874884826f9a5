"""File numbers: the index keys every per-column entry by a 64-bit number of its data file, not
by the file's path, so a path is stored (and decoded) once per file rather than once per column.

A number is a hash of the path under the index's seed (``Manifest.fid_seed``): a sync derives the
number of an added or removed file from its path alone, without reading the index. Two live files
must never share a number (their stats would mix), so every build checks: a rebuild picks the next
seed until the numbers of its files are distinct, and a sync that adds a file whose number a
different live file already has rebuilds. Correctness never rests on the hash, only the rate of
rebuilds does (about n² / 2⁶⁵ for n files: one in 37 million builds of a million-file table).

The hash is vectorised over Arrow's string buffers: a polynomial over the UTF-8 bytes (the base
derived from the seed), then the SplitMix64 finaliser.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_CHUNK_BYTES = 1 << 23  # bytes hashed per pass (its uint64 temporaries stay ~64 MB)
_LENGTH_MIX = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _base(seed: int) -> np.uint64:
    """The polynomial's odd base for ``seed`` (another seed: another polynomial, other collisions)."""
    return np.uint64(int(_splitmix64(np.array([seed], dtype=np.uint64))[0]) | 1)


def file_ids(paths: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
    """The number (int64) of each path under ``seed``; equal paths get equal numbers."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
    n = len(paths)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if paths.null_count:
        raise ValueError("a file path is null")
    arr = pc.cast(paths, pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    longest = int(lengths.max())
    base = _base(seed)
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.r_[np.uint64(1), np.full(max(longest - 1, 0), base, dtype=np.uint64)])
    out = np.empty(n, dtype=np.uint64)
    bounds = []
    first = 0
    while first < n:
        # as many strings as fit in the chunk (at least one)
        last = int(np.searchsorted(offsets, offsets[first] + _CHUNK_BYTES, side="right")) - 1
        last = min(max(last, first + 1), n)
        bounds.append((first, last))
        first = last

    def hash_chunk(chunk: tuple[int, int]) -> None:
        first, last = chunk
        lo, hi = int(offsets[first]), int(offsets[last])
        starts = offsets[first:last] - lo
        ends = offsets[first + 1 : last + 1] - lo
        from_end = np.repeat(ends - 1, lengths[first:last]) - np.arange(hi - lo)  # the byte's place from the end
        with np.errstate(over="ignore"):
            terms = (data[lo:hi].astype(np.uint64) + np.uint64(1)) * powers[from_end]
            sums = np.add.reduceat(terms, starts) if hi > lo else np.zeros(last - first, dtype=np.uint64)
            sums[lengths[first:last] == 0] = 0  # reduceat gives the next byte for an empty string
            out[first:last] = sums + lengths[first:last].astype(np.uint64) * _LENGTH_MIX

    # numpy releases the GIL in these loops: chunks side by side use every core.
    if len(bounds) > 1:
        with ThreadPoolExecutor(min(len(bounds), os.cpu_count() or 1)) as pool:
            list(pool.map(hash_chunk, bounds))
    else:
        for chunk in bounds:
            hash_chunk(chunk)
    return _splitmix64(out ^ np.uint64(seed)).view(np.int64)


def distinct(ids: np.ndarray) -> bool:
    """Whether no two of ``ids`` are equal (sorted and compared with the next: a tenth of
    ``np.unique``'s time on a million numbers)."""
    ordered = np.sort(ids)
    return not bool((ordered[1:] == ordered[:-1]).any())


def find(sorted_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``ids``: its position in ``sorted_ids`` (ascending) and whether it is there
    (where it is not, the position is only a valid index, or 0 when ``sorted_ids`` is empty)."""
    if not len(sorted_ids):
        return np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return pos, sorted_ids[pos] == ids
