"""Space-filling curve keys (Z-order and Hilbert) over per-column integer coordinates, vectorised.

Coordinates are small non-negative integers per row and column (ranks or levels taken from the
boundary sketches, never raw values, so skewed and string columns fill their coordinates evenly).
Everything here works on numpy arrays of a whole Arrow batch at once: the loops run over bits and
columns, never over rows.

Keys keep every bit: a key of ``sum(bits)`` bits is returned as big-endian bytes (one
``fixed_size_binary`` value per row), which sort the same way as the integer they spell, in numpy
(``np.sort`` on ``S`` dtype), Arrow and Spark (binary order is unsigned lexicographic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa

Curve = Literal["hilbert", "zorder"]
CURVES: tuple[Curve, ...] = ("hilbert", "zorder")
MAX_COLUMNS = 8
MAX_BITS = 32


def bits_for(levels: int) -> int:
    """Bits needed to hold coordinates ``0..levels-1`` (at least 1)."""
    return max(1, int(levels - 1).bit_length())


def _check(coords: Sequence[np.ndarray], bits: Sequence[int]) -> list[np.ndarray]:
    if not 1 <= len(coords) <= MAX_COLUMNS:
        raise ValueError(f"curves take 1 to {MAX_COLUMNS} columns, got {len(coords)}")
    if len(bits) != len(coords):
        raise ValueError("one bit count per column")
    out = []
    for c, b in zip(coords, bits, strict=True):
        if not 1 <= b <= MAX_BITS:
            raise ValueError(f"bits per column must be 1..{MAX_BITS}, got {b}")
        c = np.asarray(c, dtype=np.int64)
        if len(c) and (c.min() < 0 or c.max() >= 1 << b):
            raise ValueError(f"coordinates must be in 0..{(1 << b) - 1} for {b} bits")
        out.append(c.astype(np.uint64))
    if len({len(c) for c in out}) > 1:
        raise ValueError("all coordinate arrays must have the same length")
    return out


CHUNK_ROWS = 1 << 15  # rows per pass: every array of a chunk stays in the CPU cache across its passes
GRID_MAX = 1 << 16  # keys of coordinate grids up to this size are computed once per point and looked up


def interleave(coords: Sequence[np.ndarray], bits: Sequence[int]) -> np.ndarray:
    """Z-order: bits interleaved from the most significant level down, as big-endian key bytes.

    Column ``i`` contributes its ``j``-th most significant bit at level ``j`` while ``j <
    bits[i]``: columns with fewer bits take part in the coarse levels and drop out of the fine
    ones, so the first splits alternate over every column. Returns an ``(n, nbytes)`` uint8 array.
    """
    return _interleave(_check(coords, bits), bits)


def _interleave(cs: Sequence[np.ndarray], bits: Sequence[int]) -> np.ndarray:
    n = len(cs[0])
    total = sum(bits)
    width = (total + 7) // 8
    # (column, source bit) of each output bit, most significant first, padded with zeros at the top
    order = [(c, b - 1 - level) for level in range(max(bits)) for c, b in enumerate(bits) if level < b]
    order = [(-1, 0)] * (width * 8 - total) + order
    # Output words of 64 bits: each built with integer shifts, then written as 8 big-endian bytes.
    words = np.zeros((n, -(-width // 8)), dtype=">u8")
    for w in range(words.shape[1]):
        part = order[w * 64 : (w + 1) * 64]
        for start in range(0, n, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, n)
            acc = np.zeros(stop - start, dtype=np.uint64)
            bit = np.empty(stop - start, dtype=np.uint64)
            for position, (c, source) in enumerate(part):
                if c < 0:
                    continue
                np.right_shift(cs[c][start:stop], np.uint64(source), out=bit)
                bit &= np.uint64(1)
                bit <<= np.uint64(63 - position)
                acc |= bit
            words[start:stop, w] = acc
    return words.view(np.uint8).reshape(n, words.shape[1] * 8)[:, :width]


def _hilbert_transpose(cs: Sequence[np.ndarray], bits: int) -> list[np.ndarray]:
    """The transform, branch-free, in place, a cache-sized chunk of rows at a time (uint32: at
    most 32 bits per column); ``cs`` is left unchanged."""
    d, n = len(cs), len(cs[0])
    out = [np.empty(n, dtype=np.uint64) for _ in range(d)]
    for start in range(0, n, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n)
        x = [c[start:stop].astype(np.uint32) for c in cs]
        high = np.empty(stop - start, dtype=np.uint32)
        t = np.empty(stop - start, dtype=np.uint32)
        for level in range(bits - 1, 0, -1):  # inverse undo excess work, q = 1 << level
            p = np.uint32((1 << level) - 1)
            for i in range(d):
                # all ones where bit q of x[i] is set (invert the low bits of x[0]), else 0 (swap
                # the low bits of x[0] and x[i])
                _ones_where_bit(x[i], level, high)
                if i == 0:
                    x[0] ^= high & p
                    continue
                np.bitwise_xor(x[0], x[i], out=t)
                t &= p
                t &= ~high
                x[0] ^= (high & p) | t
                x[i] ^= t
        for i in range(1, d):  # Gray encode
            x[i] ^= x[i - 1]
        t[:] = 0
        for level in range(bits - 1, 0, -1):
            _ones_where_bit(x[d - 1], level, high)
            t ^= high & np.uint32((1 << level) - 1)
        for i in range(d):
            out[i][start:stop] = x[i] ^ t
    return out


def _ones_where_bit(x: np.ndarray, level: int, out: np.ndarray) -> None:
    """``out`` = all ones (uint32) where bit ``level`` of ``x`` is set, else 0: a branch-free mask."""
    np.right_shift(x, np.uint32(level), out=out)
    out &= np.uint32(1)
    np.negative(out, out=out)


def hilbert(coords: Sequence[np.ndarray], bits: Sequence[int]) -> np.ndarray:
    """Hilbert index as big-endian key bytes ``(n, nbytes)``.

    The curve needs one resolution for all columns: a column with fewer bits is scaled up
    (shifted left) so every column spans the whole cube and takes part in the coarse levels.
    A small grid (at most ``GRID_MAX`` points, as the coarse cells are) is keyed once per point
    and the rows look their key up.
    """
    cs = _check(coords, bits)
    width = max(bits)
    if len(cs[0]) > GRID_MAX and sum(bits) <= GRID_MAX.bit_length() - 1:
        points = np.arange(1 << sum(bits), dtype=np.uint64)
        shifts = np.cumsum([0, *bits[::-1]])[::-1][1:]  # the last column in the lowest bits
        grid = [(points >> np.uint64(s)) & np.uint64((1 << b) - 1) for s, b in zip(shifts, bits, strict=True)]
        keys = hilbert(grid, bits)
        code = np.zeros(len(cs[0]), dtype=np.int64)
        for c, s in zip(cs, shifts, strict=True):
            code |= c.astype(np.int64) << int(s)
        flat = np.ascontiguousarray(keys).view(f"S{keys.shape[1]}").ravel()
        return flat[code].view(np.uint8).reshape(len(code), keys.shape[1])
    scaled = [c << np.uint64(width - b) for c, b in zip(cs, bits, strict=True)]
    return _interleave(_hilbert_transpose(scaled, width), [width] * len(cs))


def curve_key(curve: Curve, coords: Sequence[np.ndarray], bits: Sequence[int]) -> np.ndarray:
    if curve == "hilbert":
        return hilbert(coords, bits)
    if curve == "zorder":
        return interleave(coords, bits)
    raise ValueError(f"unknown curve {curve!r}; known: {', '.join(CURVES)}")


def key_array(key: np.ndarray) -> pa.FixedSizeBinaryArray:
    """Key bytes as an Arrow column (sortable in Arrow and Spark)."""
    n, width = key.shape
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(key).tobytes())]
    )


def argsort_keys(key: np.ndarray) -> np.ndarray:
    """Stable order of rows by key bytes."""
    n, width = key.shape
    if width == 0:
        return np.arange(n)
    if width <= 8:  # as unsigned integers: sorts several times faster than byte strings
        padded = np.zeros((n, 8), dtype=np.uint8)
        padded[:, 8 - width :] = key
        return np.argsort(padded.view(">u8").ravel().astype(np.uint64), kind="stable")
    as_bytes = np.ascontiguousarray(key).view(f"S{width}").ravel()
    return np.argsort(as_bytes, kind="stable")
