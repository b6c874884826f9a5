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


def interleave(coords: Sequence[np.ndarray], bits: Sequence[int]) -> np.ndarray:
    """Z-order: bits interleaved from the most significant level down, as big-endian key bytes.

    Column ``i`` contributes its ``j``-th most significant bit at level ``j`` while ``j <
    bits[i]``: columns with fewer bits take part in the coarse levels and drop out of the fine
    ones, so the first splits alternate over every column. Returns an ``(n, nbytes)`` uint8 array.
    """
    cs = _check(coords, bits)
    n = len(cs[0])
    total = sum(bits)
    width = (total + 7) // 8
    key = np.zeros((n, width), dtype=np.uint8)
    position = width * 8 - total  # output bit index from the most significant; the pad stays 0
    for level in range(max(bits)):
        for c, b in zip(cs, bits, strict=True):
            if level < b:
                bit = ((c >> np.uint64(b - 1 - level)) & np.uint64(1)).astype(np.uint8)
                key[:, position // 8] |= bit << np.uint8(7 - position % 8)
                position += 1
    return key


def hilbert_transpose(coords: Sequence[np.ndarray], bits: int) -> list[np.ndarray]:
    """Skilling's AxesToTranspose ("Programming the Hilbert curve", AIP Conf. Proc. 707, 2004).

    All columns share ``bits``. Returns the transposed Hilbert index: interleaving its bits
    (column 0 most significant) gives the index along the curve.
    """
    x = [c.copy() for c in _check(coords, [bits] * len(coords))]
    d = len(x)
    m = np.uint64(1) << np.uint64(bits - 1)
    q = m
    while q > 1:  # inverse undo excess work
        p = q - np.uint64(1)
        for i in range(d):
            high = (x[i] & q) != 0
            # where bit q of x[i] is set: invert the low bits of x[0]; else swap them with x[i]'s
            t = np.where(high, np.uint64(0), (x[0] ^ x[i]) & p)
            x[0] = np.where(high, x[0] ^ p, x[0] ^ t)
            if i:
                x[i] = x[i] ^ t
        q >>= np.uint64(1)
    for i in range(1, d):  # Gray encode
        x[i] = x[i] ^ x[i - 1]
    t = np.zeros_like(x[0])
    q = m
    while q > 1:
        t = np.where((x[d - 1] & q) != 0, t ^ (q - np.uint64(1)), t)
        q >>= np.uint64(1)
    return [xi ^ t for xi in x]


def hilbert(coords: Sequence[np.ndarray], bits: Sequence[int]) -> np.ndarray:
    """Hilbert index as big-endian key bytes ``(n, nbytes)``.

    The curve needs one resolution for all columns: a column with fewer bits is scaled up
    (shifted left) so every column spans the whole cube and takes part in the coarse levels.
    """
    width = max(bits)
    scaled = [np.asarray(c, dtype=np.uint64) << np.uint64(width - b) for c, b in zip(coords, bits, strict=True)]
    return interleave(hilbert_transpose(scaled, width), [width] * len(coords))


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
    if key.shape[1] == 0:
        return np.arange(key.shape[0])
    as_bytes = np.ascontiguousarray(key).view(f"S{key.shape[1]}").ravel()
    return np.argsort(as_bytes, kind="stable")
