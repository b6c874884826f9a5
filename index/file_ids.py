"""File numbers: the index keys every per-column entry by a 64-bit number of its data file, not
by the file's path, so a path is stored (and decoded) once per file rather than once per column.

A number is a hash of the path under the index's seed (``Manifest.fid_seed``): a sync derives the
number of an added or removed file from its path alone, without reading the index. Two live files
must never share a number (their stats would mix), so every build checks: a rebuild picks the next
seed until the numbers of its files are distinct, and a sync that adds a file whose number a
different live file already has rebuilds. Correctness never rests on the hash, only the rate of
rebuilds does (about n² / 2⁶⁵ for n files: one in 37 million builds of a million-file table).

The hash is vectorised over Arrow's string buffers: a polynomial over the UTF-8 bytes (the base
derived from the seed), then the SplitMix64 finaliser. The paths of one length are hashed as a
matrix of bytes times the vector of the base's powers (a million 80-byte paths: 0.06 s).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_BLOCK_BYTES = 1 << 19  # path bytes hashed per block (its uint64 temporaries stay ~4 MB)
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
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.r_[np.uint64(1), np.full(max(longest - 1, 0), _base(seed), dtype=np.uint64)])
    out = lengths.astype(np.uint64) * _LENGTH_MIX
    # The paths of one length as a matrix of bytes: the polynomial is a product with the powers,
    # one row of bytes at a time, with no per-byte index or power looked up.
    if int(lengths.min()) == longest:  # one length (e.g. every path a UUID name): the bytes as they are
        groups, contiguous = [np.arange(n)], True
    else:
        by_length = np.argsort(lengths, kind="stable")
        groups = np.split(by_length, np.flatnonzero(np.diff(lengths[by_length])) + 1)
        contiguous = False
    jobs = []
    for rows in groups:
        length = int(lengths[rows[0]])
        if length == 0:
            continue
        weights = powers[:length][::-1].copy()  # byte j of ``length`` weighs base ** (length - 1 - j)
        with np.errstate(over="ignore"):
            ones = weights.sum(dtype=np.uint64)  # the polynomial takes each byte plus one
        step = max(1, _BLOCK_BYTES // length)
        jobs += [(rows[s : s + step], length, weights, ones) for s in range(0, len(rows), step)]

    def hash_rows(job: tuple[np.ndarray, int, np.ndarray, np.uint64]) -> None:
        rows, length, weights, ones = job
        if contiguous:
            first = int(offsets[rows[0]])
            block = data[first : first + length * len(rows)].reshape(len(rows), length)
        else:
            block = data[offsets[rows][:, None] + np.arange(length)]
        with np.errstate(over="ignore"):
            out[rows] += block.astype(np.uint64) @ weights + ones

    # numpy releases the GIL in these loops: blocks side by side use every core.
    if len(jobs) > 1:
        with ThreadPoolExecutor(min(len(jobs), os.cpu_count() or 1)) as pool:
            list(pool.map(hash_rows, jobs))
    else:
        for job in jobs:
            hash_rows(job)
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
