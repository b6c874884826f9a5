"""Rows of the built-in record source: the SSB-like wide table of ``lakecluster.stream.ssb``.

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
from lakecluster.stream.ssb import (
    BRANDS,
    CATEGORIES,
    CITIES,
    DATE_COLUMNS,
    DAYS,
    FIRST_DAY,
    MANUFACTURERS,
    NATIONS,
    PRIORITIES,
    REGIONS,
    SHIPMODES,
    date_attributes,
    dimension,
    dimension_columns,
    retail_price_cents,
)

BLOCK_ROWS = 4096
BATCH_ROWS = 65_536



@dataclass(frozen=True)
class GeneratorSettings:
    seed: int = 42
    brand_skew: float = 0.0
    scale_factor: float = 1.0  # sizes of the customer, supplier and part tables (SSB scale factor)


def _brand_probabilities(skew: float) -> np.ndarray | None:
    if skew <= 0:
        return None
    weights = 1.0 / np.arange(1, len(BRANDS) + 1, dtype=np.float64) ** skew
    # A fixed permutation so the heavy brands are not simply the alphabetically first ones.
    weights = weights[np.random.default_rng(7).permutation(len(BRANDS))]
    return weights / weights.sum()


# Money columns: generated as cents, written as decimal(18,2).
_CENTS = frozenset({"lo_revenue", "lo_extendedprice", "lo_ordtotalprice", "lo_supplycost"})
_DIMENSION_COLUMNS = frozenset({"c_name", "c_address", "c_phone", "c_mktsegment", "s_name", "s_address", "s_phone",
                                "p_name", "p_color", "p_type", "p_size", "p_container"})  # fmt: skip


def _block(block: int, settings: GeneratorSettings, names: frozenset[str]) -> dict[str, np.ndarray]:
    """The block's values of the columns in ``names`` (extra columns may come along).

    Every draw happens whatever columns are asked for, in a fixed order, so a row's values never
    depend on the table's columns.
    """
    rng = np.random.default_rng([settings.seed, block])
    n = BLOCK_ROWS
    start = block * BLOCK_ROWS
    orderkey = np.arange(start, start + n, dtype=np.int64)
    day = rng.integers(0, DAYS, n)
    orderdate = FIRST_DAY + day.astype("timedelta64[D]")
    seconds = rng.integers(0, 86_400, n)
    micros = rng.integers(0, 1_000_000, n)
    event_time = (
        orderdate.astype("datetime64[us]") + seconds.astype("timedelta64[s]") + micros.astype("timedelta64[us]")
    )
    c_city = rng.integers(0, len(CITIES), n)
    s_city = rng.integers(0, len(CITIES), n)
    brand = rng.choice(len(BRANDS), n, p=_brand_probabilities(settings.brand_skew))
    quantity = rng.integers(1, 51, n)
    discount = rng.integers(0, 11, n)  # percent
    rng.integers(90_000, 10_494_950, n)  # an earlier revenue draw: kept so later draws stay the same
    shipmode = SHIPMODES[rng.integers(0, len(SHIPMODES), n)]
    returned = rng.random(n) < 0.05
    # The keys of a row's customer, supplier and part: one of those in its city (brand).
    u_customer, u_supplier, u_part = rng.random(n), rng.random(n), rng.random(n)
    priority = PRIORITIES[rng.integers(0, len(PRIORITIES), n)]
    tax = rng.integers(0, 9, n)
    commit_days = rng.integers(30, 91, n)
    partkey = dimension(settings.seed, settings.scale_factor, "part").keys_for(brand, u_part)
    extended = quantity * retail_price_cents(partkey)
    revenue = extended * (100 - discount) // 100
    out = {
        "lo_orderkey": orderkey,
        "lo_linenumber": (orderkey % 7 + 1).astype(np.int32),
        "lo_orderdate": orderdate,
        "event_time": event_time,
        "c_city": CITIES[c_city],
        "c_nation": NATIONS[c_city // 10],
        "c_region": REGIONS[c_city // 10],
        "s_city": CITIES[s_city],
        "s_nation": NATIONS[s_city // 10],
        "s_region": REGIONS[s_city // 10],
        "p_brand": BRANDS[brand],
        "p_brand1": BRANDS[brand],
        "p_category": CATEGORIES[brand],
        "p_mfgr": MANUFACTURERS[brand],
        "lo_shipmode": shipmode,
        "lo_quantity": quantity.astype(np.int32),
        "lo_discount": discount,
        "lo_tax": tax.astype(np.int32),
        "lo_extendedprice": extended,
        "lo_revenue": revenue,
        "lo_supplycost": retail_price_cents(partkey) * 6 // 10,
        "lo_ordtotalprice": extended * (100 + tax) // 100 * (100 - discount) // 100,
        "is_returned": returned,
        "lo_orderpriority": priority,
        "lo_shippriority": np.full(n, "0", dtype=object),
        "lo_commitdate": orderdate + commit_days.astype("timedelta64[D]"),
        "lo_partkey": partkey,
    }
    customers = suppliers = None
    if names & {"lo_custkey", "c_name", "c_address", "c_phone", "c_mktsegment"}:
        customers = dimension(settings.seed, settings.scale_factor, "customer").keys_for(c_city, u_customer)
        out["lo_custkey"] = customers
    if names & {"lo_suppkey", "s_name", "s_address", "s_phone"}:
        suppliers = dimension(settings.seed, settings.scale_factor, "supplier").keys_for(s_city, u_supplier)
        out["lo_suppkey"] = suppliers
    if names & _DIMENSION_COLUMNS:
        columns = dimension_columns(settings.seed, settings.scale_factor)
        for name in names & _DIMENSION_COLUMNS:
            key = {"c": customers, "s": suppliers, "p": partkey}[name[0]]
            assert key is not None
            out[name] = columns[name][key - 1]
    if names & DATE_COLUMNS:
        out.update(date_attributes(orderdate))
    return out


def generate(start: int, end: int, settings: GeneratorSettings, columns: tuple[ColumnSpec, ...]) -> pa.RecordBatch:
    """Rows with offsets ``start <= offset < end`` as one Arrow record batch."""
    schema = arrow_schema(columns)
    if end <= start:
        return pa.RecordBatch.from_pylist([], schema)
    first, last = start // BLOCK_ROWS, (end - 1) // BLOCK_ROWS
    names = frozenset(c.name for c in columns)
    blocks = [_block(b, settings, names) for b in range(first, last + 1)]
    lo, hi = start - first * BLOCK_ROWS, end - first * BLOCK_ROWS
    arrays = []
    for col in columns:
        values = np.concatenate([b[col.name] for b in blocks])[lo:hi]
        tp = schema.field(col.name).type
        if col.name in _CENTS and pa.types.is_decimal(tp):
            arrays.append(_cents_to_decimal(values, tp))
        elif col.name == "lo_discount" and pa.types.is_floating(tp):
            arrays.append(pa.array(values / 100.0).cast(tp))  # the default table's: a fraction
        else:
            arrays.append(pa.array(values).cast(tp))
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
