"""Curve keys: Hilbert is a bijection whose consecutive keys are grid neighbours and agrees with an
independent implementation; Z keys are bit-by-bit interleavings; keys sort like their integers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hilbertcurve.hilbertcurve import HilbertCurve

from lakecluster.curves import GRID_MAX, argsort_keys, curve_key, hilbert, interleave, key_array


def key_to_int(key: np.ndarray) -> list[int]:
    """Curve keys (rows of big-endian bytes) as Python integers."""
    return [int.from_bytes(row.tobytes(), "big") for row in key]


def _grid(d: int, bits: int) -> list[np.ndarray]:
    points = np.array(list(itertools.product(range(1 << bits), repeat=d)), dtype=np.int64)
    return [points[:, i] for i in range(d)]


@pytest.mark.parametrize(("d", "bits"), [(1, 4), (2, 1), (2, 3), (3, 2), (3, 3), (4, 2), (5, 1)])
def test_hilbert_is_a_bijection_and_consecutive_keys_are_neighbours(d: int, bits: int) -> None:
    coords = _grid(d, bits)
    keys = np.array(key_to_int(hilbert(coords, [bits] * d)))
    assert sorted(keys.tolist()) == list(range(1 << (d * bits)))
    points = np.stack(coords, axis=1)[np.argsort(keys)]
    steps = np.abs(np.diff(points, axis=0)).sum(axis=1)
    assert (steps == 1).all()


@pytest.mark.parametrize(("d", "bits"), [(2, 10), (3, 10), (5, 6), (8, 8)])
def test_hilbert_matches_reference_implementation(d: int, bits: int) -> None:
    rng = np.random.default_rng(d * 100 + bits)
    coords = [rng.integers(0, 1 << bits, 500) for _ in range(d)]
    reference = HilbertCurve(bits, d).distances_from_points(np.stack(coords, axis=1).tolist())
    assert key_to_int(hilbert(coords, [bits] * d)) == [int(x) for x in reference]


@pytest.mark.parametrize("bits", [[4, 4, 4], [2, 5, 3], [7, 1]])
def test_hilbert_of_many_rows_on_a_small_grid_matches_reference_implementation(bits: list[int]) -> None:
    """More rows than GRID_MAX on a grid of few points: keys looked up per point, as computed per row."""
    rng = np.random.default_rng(sum(bits))
    n = GRID_MAX + 1_000
    coords = [rng.integers(0, 1 << b, n) for b in bits]
    keys = key_to_int(hilbert(coords, bits))
    width = max(bits)
    rows = rng.choice(n, 400, replace=False)
    scaled = np.stack([c[rows] << (width - b) for c, b in zip(coords, bits, strict=True)], axis=1)
    reference = HilbertCurve(width, len(bits)).distances_from_points(scaled.tolist())
    assert [keys[r] for r in rows] == [int(x) for x in reference]


def test_zorder_is_bitwise_interleaving_msb_first_with_unequal_bits() -> None:
    rng = np.random.default_rng(7)
    bits = [3, 5, 1]
    coords = [rng.integers(0, 1 << b, 300) for b in bits]
    expected = []
    for row in range(300):
        out = 0
        for level in range(max(bits)):
            for c, b in zip(coords, bits, strict=True):
                if level < b:
                    out = (out << 1) | ((int(c[row]) >> (b - 1 - level)) & 1)
        expected.append(out)
    assert key_to_int(interleave(coords, bits)) == expected


def test_keys_longer_than_64_bits_keep_every_bit() -> None:
    bits = [20] * 5  # 100 bits
    top = (1 << 20) - 1
    coords = [np.array([0, top, 1]), *[np.array([0, top, 0])] * 4]
    z = key_to_int(interleave(coords, bits))
    assert z[0] == 0 and z[1] == (1 << 100) - 1
    assert z[2] == 1 << 4  # column 0's lowest bit: first of the last group of five bits
    h = key_to_int(hilbert(coords, bits))
    assert len(set(h)) == 3 and max(h) < 1 << 100


@pytest.mark.parametrize(("d", "bits"), [(6, 12), (3, 10), (8, 8), (1, 3)])  # 72, 30, 64 and 3-bit keys
def test_byte_keys_sort_like_integers_in_numpy_and_arrow(d: int, bits: int) -> None:
    rng = np.random.default_rng(3)
    coords = [rng.integers(0, 1 << bits, 2000) for _ in range(d)]
    key = curve_key("hilbert", coords, [bits] * d)
    ints = key_to_int(key)
    order = argsort_keys(key)
    # stable: equal keys keep the rows' order
    assert order.tolist() == sorted(range(len(ints)), key=lambda i: ints[i])
    arrow_sorted = key_array(key).to_pylist()
    assert sorted(arrow_sorted) == [int.to_bytes(v, key.shape[1], "big") for v in sorted(ints)]


def test_bad_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="1 to 8 columns"):
        interleave([np.zeros(1, dtype=int)] * 9, [1] * 9)
    with pytest.raises(ValueError, match=r"0\.\.3"):
        interleave([np.array([4])], [2])
    with pytest.raises(ValueError, match="unknown curve"):
        curve_key("peano", [np.array([1])], [1])  # type: ignore[arg-type]


@pytest.mark.parametrize("curve", ["hilbert", "zorder"])
def test_no_rows_give_no_keys(curve: str) -> None:
    key = curve_key(curve, [np.array([], np.int64)] * 2, [3, 4])  # type: ignore[arg-type]
    assert key.shape == (0, 1) and argsort_keys(key).tolist() == []
