"""The built-in generator: rows a pure function of their offset, whatever the split or the columns;
the full flattened SSB schema consistent with its dimensions and with dbgen's rules."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakecluster.config import load_config
from lakecluster.errors import ConfigError
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.stream.source import open_source
from lakecluster.stream.ssb import BRANDS, CITIES, SSB_COLUMNS, SSB_FULL_COLUMNS, dimension_sizes, retail_price_cents

SETTINGS = GeneratorSettings(seed=5, scale_factor=0.1)


def full(start: int, end: int) -> pa.Table:
    return pa.Table.from_batches([generate(start, end, SETTINGS, SSB_FULL_COLUMNS)])


def test_rows_depend_on_their_offsets_only() -> None:
    whole = full(1_000, 11_000)
    parts = pa.concat_tables([full(1_000, 4_321), full(4_321, 9_000), full(9_000, 11_000)])
    assert whole.equals(parts)
    # The default table's columns hold the same values as the full schema's columns of those names.
    default = pa.Table.from_batches([generate(1_000, 11_000, SETTINGS, SSB_COLUMNS)])
    for name in set(default.column_names) & set(whole.column_names) - {"lo_discount"}:
        assert default[name].equals(whole[name]), name
    percent = pc.round(pc.multiply(default["lo_discount"], 100)).cast(pa.int32())
    assert pc.all(pc.equal(percent, whole["lo_discount"])).as_py()


def test_full_schema_follows_its_dimensions_and_dbgen() -> None:
    rows = full(0, 40_000).to_pydict()
    sizes = dimension_sizes(0.1)
    assert max(rows["lo_custkey"]) <= sizes["customer"] and max(rows["lo_partkey"]) <= sizes["part"]
    assert max(rows["lo_suppkey"]) <= sizes["supplier"] and min(rows["lo_custkey"]) >= 1
    # One customer (supplier, part) always has the same attributes: they come from the dimension.
    dims = {"lo_custkey": ("c_city", "c_name", "c_phone", "c_mktsegment", "c_address"),
            "lo_suppkey": ("s_city", "s_name", "s_phone"),
            "lo_partkey": ("p_brand1", "p_name", "p_color", "p_type", "p_size", "p_container")}  # fmt: skip
    for key, attrs in dims.items():
        seen: dict[int, tuple] = {}
        for i, k in enumerate(rows[key]):
            assert seen.setdefault(k, tuple(rows[a][i] for a in attrs)) == tuple(rows[a][i] for a in attrs)
    for i in range(0, 40_000, 997):
        brand, city = rows["p_brand1"][i], rows["c_city"][i]
        assert brand in BRANDS and rows["p_category"][i] == brand[:7] and rows["p_mfgr"][i] == brand[:6]
        assert city in CITIES and rows["c_nation"][i][:9].ljust(9) == city[:9]
        assert rows["c_phone"][i].startswith(str(list(CITIES).index(city) // 10 + 10) + "-")
        price = int(retail_price_cents(np.array([rows["lo_partkey"][i]]))[0])
        assert rows["lo_extendedprice"][i] * 100 == rows["lo_quantity"][i] * price
        assert rows["lo_revenue"][i] * 100 == (rows["lo_quantity"][i] * price * (100 - rows["lo_discount"][i])) // 100
        day: dt.date = rows["lo_orderdate"][i]
        assert rows["d_year"][i] == day.year and rows["d_yearmonthnum"][i] == day.year * 100 + day.month
        assert rows["d_yearmonth"][i] == day.strftime("%b%Y") and rows["d_daynuminmonth"][i] == day.day
        assert rows["d_date"][i] == f"{day.strftime('%B')} {day.day}, {day.year}"
        assert rows["d_dayofweek"][i] == day.strftime("%A")
        assert rows["d_weeknuminyear"][i] == (day.timetuple().tm_yday - 1) // 7 + 1
        assert 30 <= (rows["lo_commitdate"][i] - day).days <= 90
    assert set(rows["lo_discount"]) == set(range(11)) and set(rows["lo_tax"]) == set(range(9))
    assert set(rows["lo_quantity"]) == set(range(1, 51))


def test_a_column_the_generator_does_not_make_or_a_wrong_type_fails_at_load() -> None:
    base = {"source.kind": "generator", "table.partition_by": "[]", "table.clustering_columns": '["s_city"]'}
    city = '{ name = "s_city", type = "string" }'
    def load(columns: str) -> None:  # what every command checks before it runs
        open_source(load_config(overrides={**base, "table.columns": f"[{city}, {columns}]"}, environ={}))

    with pytest.raises(ConfigError, match="does not produce 'lo_nothing'"):
        load('{ name = "lo_nothing", type = "int" }')
    with pytest.raises(ConfigError, match="lo_discount as double or int"):
        load('{ name = "lo_discount", type = "string" }')
    full_table = "[" + ", ".join(f'{{ name = "{c.name}", type = "{c.type}" }}' for c in SSB_FULL_COLUMNS) + "]"
    declared = load_config(overrides={**base, "table.columns": full_table}, environ={}).table.columns
    assert len(declared) == len(SSB_FULL_COLUMNS)
    with pytest.raises(ConfigError, match=r"source\.generator\.scale_factor"):
        load_config(overrides={**base, "source.generator.scale_factor": "0"}, environ={})
