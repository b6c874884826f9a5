"""Rows of the built-in record source: the SSB-like wide table of ``lakecluster.ssb``.

Rows are a pure function of their offset: rows are generated in fixed blocks of
``BLOCK_ROWS`` with a generator seeded by (seed, block number), so any offset range, however it
is split across Spark tasks or replayed after a crash, yields exactly the same rows. Generation is
vectorised with numpy; the Spark source lives in ``generator_source``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lakecluster.schema import ColumnSpec, arrow_schema
from lakecluster.ssb import BRANDS, CATEGORIES, CITIES, NATIONS, REGIONS, SHIPMODES

BLOCK_ROWS = 4096
BATCH_ROWS = 65_536

_FIRST_DAY = np.datetime64("1992-01-01", "D")
_DAYS = int((np.datetime64("1999-01-01", "D") - _FIRST_DAY).astype(np.int64))


@dataclass(frozen=True)
class GeneratorSettings:
    seed: int = 42
    brand_skew: float = 0.0


def _brand_probabilities(skew: float) -> np.ndarray | None:
    if skew <= 0:
        return None
    weights = 1.0 / np.arange(1, len(BRANDS) + 1, dtype=np.float64) ** skew
    # A fixed permutation so the heavy brands are not simply the alphabetically first ones.
    weights = weights[np.random.default_rng(7).permutation(len(BRANDS))]
    return weights / weights.sum()


def _block(block: int, settings: GeneratorSettings) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([settings.seed, block])
    n = BLOCK_ROWS
    start = block * BLOCK_ROWS
    orderkey = np.arange(start, start + n, dtype=np.int64)
    day = rng.integers(0, _DAYS, n)
    orderdate = _FIRST_DAY + day.astype("timedelta64[D]")
    year = orderdate.astype("datetime64[Y]").astype(np.int64) + 1970
    seconds = rng.integers(0, 86_400, n)
    micros = rng.integers(0, 1_000_000, n)
    event_time = (
        orderdate.astype("datetime64[us]") + seconds.astype("timedelta64[s]") + micros.astype("timedelta64[us]")
    )
    c_city = rng.integers(0, len(CITIES), n)
    s_city = rng.integers(0, len(CITIES), n)
    probabilities = _brand_probabilities(settings.brand_skew)
    brand = rng.choice(len(BRANDS), n, p=probabilities)
    quantity = rng.integers(1, 51, n)
    discount = rng.integers(0, 11, n) / 100.0
    revenue_cents = rng.integers(90_000, 10_494_950, n)
    return {
        "lo_orderkey": orderkey,
        "lo_linenumber": (orderkey % 7 + 1).astype(np.int32),
        "lo_orderdate": orderdate,
        "d_year": year.astype(np.int32),
        "event_time": event_time,
        "c_city": CITIES[c_city],
        "c_nation": NATIONS[c_city // 10],
        "c_region": REGIONS[c_city // 10],
        "s_city": CITIES[s_city],
        "s_nation": NATIONS[s_city // 10],
        "s_region": REGIONS[s_city // 10],
        "p_brand": BRANDS[brand],
        "p_category": CATEGORIES[brand],
        "lo_shipmode": SHIPMODES[rng.integers(0, len(SHIPMODES), n)],
        "lo_quantity": quantity.astype(np.int32),
        "lo_discount": discount,
        "lo_revenue": revenue_cents,
        "is_returned": rng.random(n) < 0.05,
    }


def generate(start: int, end: int, settings: GeneratorSettings, columns: tuple[ColumnSpec, ...]) -> pa.RecordBatch:
    """Rows with offsets ``start <= offset < end`` as one Arrow record batch."""
    schema = arrow_schema(columns)
    if end <= start:
        return pa.RecordBatch.from_pylist([], schema)
    first, last = start // BLOCK_ROWS, (end - 1) // BLOCK_ROWS
    blocks = [_block(b, settings) for b in range(first, last + 1)]
    lo, hi = start - first * BLOCK_ROWS, end - first * BLOCK_ROWS
    arrays = []
    for col in columns:
        values = np.concatenate([b[col.name] for b in blocks])[lo:hi]
        if col.name == "lo_revenue":
            arrays.append(_cents_to_decimal(values, schema.field(col.name).type))
        else:
            arrays.append(pa.array(values).cast(schema.field(col.name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _cents_to_decimal(cents: np.ndarray, dtype: pa.DataType) -> pa.Array:
    """Decimal array whose unscaled values are ``cents`` (scale 2), built from raw 128-bit words.

    Going through Python ``Decimal`` objects would be a per-row loop.
    """
    words = np.empty((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    words[:, 1] = np.where(cents < 0, -1, 0)  # two's-complement sign extension
    unscaled = pa.Array.from_buffers(pa.decimal128(38, 2), len(cents), [None, pa.py_buffer(words)])
    return unscaled.cast(dtype)
