"""The SSB-like wide table lakecluster ships with: its columns and the values of its dimensions.

The Star Schema Benchmark's lineorder table joined with its dimensions (customer, supplier, part,
date), as one table. The built-in generator (``lakecluster.stream.generator``) produces it. Its
18 most used columns (``SSB_COLUMNS``) are the default ``table.columns``; every column of the
flattened SSB schema (``SSB_FULL_COLUMNS``, with dbgen's value distributions) can be declared, and
bench/ssb.py runs the benchmark's 13 queries on it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from lakecluster.config import DEFAULT_COLUMNS
from lakecluster.schema import ColumnSpec

# The default table.columns (the configuration's own default schema): the 18 columns of this
# table most used, which the generator produces as declared there.
SSB_COLUMNS: tuple[ColumnSpec, ...] = DEFAULT_COLUMNS

# The 25 TPC-H/SSB nations with their regions.
_NATIONS = {
    "ALGERIA": "AFRICA", "ARGENTINA": "AMERICA", "BRAZIL": "AMERICA", "CANADA": "AMERICA",
    "EGYPT": "MIDDLE EAST", "ETHIOPIA": "AFRICA", "FRANCE": "EUROPE", "GERMANY": "EUROPE",
    "INDIA": "ASIA", "INDONESIA": "ASIA", "IRAN": "MIDDLE EAST", "IRAQ": "MIDDLE EAST",
    "JAPAN": "ASIA", "JORDAN": "MIDDLE EAST", "KENYA": "AFRICA", "MOROCCO": "AFRICA",
    "MOZAMBIQUE": "AFRICA", "PERU": "AMERICA", "CHINA": "ASIA", "ROMANIA": "EUROPE",
    "SAUDI ARABIA": "MIDDLE EAST", "VIETNAM": "ASIA", "RUSSIA": "EUROPE",
    "UNITED KINGDOM": "EUROPE", "UNITED STATES": "AMERICA",
}  # fmt: skip
NATIONS = np.array(list(_NATIONS), dtype=object)
REGIONS = np.array(list(_NATIONS.values()), dtype=object)
# SSB city: the nation's name cut or padded to 9 characters plus a digit ("UNITED KI1").
CITIES = np.array([f"{n[:9]:<9}{d}" for n in _NATIONS for d in range(10)], dtype=object)
# SSB brand: MFGR#<manufacturer 1-5><category 1-5><brand 1-40>; 1000 brands sharing "MFGR#".
BRANDS = np.array([f"MFGR#{m}{c}{b}" for m in range(1, 6) for c in range(1, 6) for b in range(1, 41)], dtype=object)
CATEGORIES = np.array([b[:7] for b in BRANDS], dtype=object)
MANUFACTURERS = np.array([b[:6] for b in BRANDS], dtype=object)
SHIPMODES = np.array(["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"], dtype=object)

# ---------------------------------------------------------------------------------------------
# The full flattened SSB schema: every lineorder column joined with its four dimensions.
#
# The columns queries filter on come first: Delta collects file statistics for the first 32
# columns only (delta.dataSkippingNumIndexedCols), so they must be among them.

SSB_FULL_COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("lo_orderdate", "date"),
    ColumnSpec("d_year", "int"),
    ColumnSpec("d_yearmonthnum", "int"),
    ColumnSpec("d_yearmonth", "string"),
    ColumnSpec("d_weeknuminyear", "int"),
    ColumnSpec("lo_discount", "int"),  # percent, 0-10 (dbgen); the default table's is a fraction
    ColumnSpec("lo_quantity", "int"),
    ColumnSpec("lo_extendedprice", "decimal(18,2)"),
    ColumnSpec("lo_revenue", "decimal(18,2)"),
    ColumnSpec("lo_supplycost", "decimal(18,2)"),
    ColumnSpec("c_region", "string"),
    ColumnSpec("c_nation", "string"),
    ColumnSpec("c_city", "string"),
    ColumnSpec("s_region", "string"),
    ColumnSpec("s_nation", "string"),
    ColumnSpec("s_city", "string"),
    ColumnSpec("p_mfgr", "string"),
    ColumnSpec("p_category", "string"),
    ColumnSpec("p_brand1", "string"),
    ColumnSpec("lo_orderkey", "long", required=True),
    ColumnSpec("lo_linenumber", "int"),
    ColumnSpec("lo_custkey", "long"),
    ColumnSpec("lo_partkey", "long"),
    ColumnSpec("lo_suppkey", "long"),
    ColumnSpec("lo_orderpriority", "string"),
    ColumnSpec("lo_shippriority", "string"),
    ColumnSpec("lo_ordtotalprice", "decimal(18,2)"),
    ColumnSpec("lo_tax", "int"),
    ColumnSpec("lo_commitdate", "date"),
    ColumnSpec("lo_shipmode", "string"),
    ColumnSpec("c_name", "string"),
    ColumnSpec("c_address", "string"),
    ColumnSpec("c_phone", "string"),
    ColumnSpec("c_mktsegment", "string"),
    ColumnSpec("s_name", "string"),
    ColumnSpec("s_address", "string"),
    ColumnSpec("s_phone", "string"),
    ColumnSpec("p_name", "string"),
    ColumnSpec("p_color", "string"),
    ColumnSpec("p_type", "string"),
    ColumnSpec("p_size", "int"),
    ColumnSpec("p_container", "string"),
    ColumnSpec("d_date", "string"),
    ColumnSpec("d_dayofweek", "string"),
    ColumnSpec("d_month", "string"),
    ColumnSpec("d_daynuminweek", "int"),
    ColumnSpec("d_daynuminmonth", "int"),
    ColumnSpec("d_daynuminyear", "int"),
    ColumnSpec("d_monthnuminyear", "int"),
    ColumnSpec("d_sellingseason", "string"),
    ColumnSpec("d_lastdayinweekfl", "boolean"),
    ColumnSpec("d_lastdayinmonthfl", "boolean"),
    ColumnSpec("d_holidayfl", "boolean"),
    ColumnSpec("d_weekdayfl", "boolean"),
)

# dbgen's word lists (TPC-H 4.2.2.13 and SSB): colours (part names and p_color), types, containers.
COLORS = np.array("""almond antique aquamarine azure beige bisque black blanched blue blush brown burlywood
burnished chartreuse chiffon chocolate coral cornflower cornsilk cream cyan dark deep dim dodger drab
firebrick floral forest frosted gainsboro ghost goldenrod green grey honeydew hot indian ivory khaki
lace lavender lawn lemon light lime linen magenta maroon medium metallic midnight mint misty moccasin
navajo navy olive orange orchid pale papaya peach peru pink plum powder puff purple red rose rosy
royal saddle salmon sandy seashell sienna sky slate smoke snow spring steel tan thistle tomato
turquoise violet wheat white yellow""".split(), dtype=object)
TYPES = np.array([f"{a} {b} {c}" for a in ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO")
                  for b in ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED")
                  for c in ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER")], dtype=object)  # fmt: skip
CONTAINERS = np.array([f"{a} {b}" for a in ("SM", "LG", "MED", "JUMBO", "WRAP")
                       for b in ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM")], dtype=object)  # fmt: skip
SEGMENTS = np.array(["AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD"], dtype=object)
PRIORITIES = np.array(["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECI", "5-LOW"], dtype=object)
MONTHS = np.array(["January", "February", "March", "April", "May", "June", "July", "August", "September",
                   "October", "November", "December"], dtype=object)  # fmt: skip
WEEKDAYS = np.array(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"], dtype=object)
_ALNUM = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,", dtype="S1")


def dimension_sizes(scale_factor: float) -> dict[str, int]:
    """Rows of customer, supplier and part at a scale factor (SSB: 30,000, 2,000 and
    200,000 x floor(1 + log2 SF)), never fewer than one row per city or brand."""
    parts = 200_000 * int(1 + math.log2(scale_factor)) if scale_factor >= 1 else int(200_000 * scale_factor)
    return {"customer": max(len(CITIES), int(30_000 * scale_factor)),
            "supplier": max(len(CITIES), int(2_000 * scale_factor)), "part": max(len(BRANDS), parts)}  # fmt: skip


@dataclass(frozen=True)
class Dimension:
    """The rows of customer, supplier or part by city (brand): for each group the keys of its
    rows, so a fact row of a given city gets one of them."""

    group_of: np.ndarray  # city (brand) index of each row, by key - 1
    members: np.ndarray  # keys - 1, ordered by group
    starts: np.ndarray  # members[starts[g]:starts[g + 1]] belong to group g

    @classmethod
    def grouped(cls, group_of: np.ndarray, groups: int) -> Dimension:
        members = np.argsort(group_of, kind="stable")
        return cls(group_of, members, np.searchsorted(group_of[members], np.arange(groups + 1)))

    def keys_for(self, groups: np.ndarray, u: np.ndarray) -> np.ndarray:
        """A key (1-based) of a row of each group, chosen by ``u`` in [0, 1)."""
        first, count = self.starts[groups], self.starts[groups + 1] - self.starts[groups]
        return self.members[first + (u * count).astype(np.int64)] + 1


_DIMENSION_SALT = {"customer": 101, "supplier": 102, "part": 103}


@functools.lru_cache(maxsize=12)
def dimension(seed: int, scale_factor: float, name: str) -> Dimension:
    """Which city (brand) each customer, supplier or part has, at a seed and scale factor
    (built once per process, and only when a column needs it)."""
    groups = len(BRANDS) if name == "part" else len(CITIES)
    group_of = np.random.default_rng([seed, _DIMENSION_SALT[name]]).integers(0, groups,
                                                                              dimension_sizes(scale_factor)[name])
    group_of[:groups] = np.arange(groups)  # every city (brand) has a row
    return Dimension.grouped(group_of, groups)


def _text(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    return _ALNUM[rng.integers(0, len(_ALNUM), (n, length))].view(f"S{length}").ravel().astype(str).astype(object)


def _phones(rng: np.random.Generator, nation: np.ndarray) -> np.ndarray:
    digits = rng.integers(0, 10, (len(nation), 10)).astype(np.uint8) + ord("0")
    country = np.stack([(nation + 10) // 10, (nation + 10) % 10], axis=1).astype(np.uint8) + ord("0")
    dash = np.full((len(nation), 1), ord("-"), np.uint8)
    chars = np.hstack([country, dash, digits[:, :3], dash, digits[:, 3:6], dash, digits[:, 6:]])
    return chars.view("S15").ravel().astype(str).astype(object)


@functools.lru_cache(maxsize=4)
def dimension_columns(seed: int, scale_factor: float) -> dict[str, np.ndarray]:
    """The descriptive columns of customer, supplier and part, by key - 1 (built once per process)."""
    out: dict[str, np.ndarray] = {}
    for name, prefix, title in (("customer", "c", "Customer"), ("supplier", "s", "Supplier")):
        rng = np.random.default_rng([seed, 201 if name == "customer" else 202])
        group_of = dimension(seed, scale_factor, name).group_of
        n = len(group_of)
        keys = np.char.zfill(np.arange(1, n + 1).astype(str), 9)
        out[f"{prefix}_name"] = np.char.add(f"{title}#", keys).astype(object)
        out[f"{prefix}_address"] = _text(rng, n, 15)
        out[f"{prefix}_phone"] = _phones(rng, group_of // 10)
        if name == "customer":
            out["c_mktsegment"] = SEGMENTS[rng.integers(0, len(SEGMENTS), n)]
    rng = np.random.default_rng([seed, 203])
    n = len(dimension(seed, scale_factor, "part").group_of)
    first, second = COLORS[rng.integers(0, len(COLORS), n)], COLORS[rng.integers(0, len(COLORS), n)]
    out["p_name"] = np.char.add(np.char.add(first.astype(str), " "), second.astype(str)).astype(object)
    out["p_color"] = first
    out["p_type"] = TYPES[rng.integers(0, len(TYPES), n)]
    out["p_size"] = rng.integers(1, 51, n).astype(np.int32)
    out["p_container"] = CONTAINERS[rng.integers(0, len(CONTAINERS), n)]
    return out


def retail_price_cents(partkey: np.ndarray) -> np.ndarray:
    """TPC-H's P_RETAILPRICE of a part key, in cents."""
    return 90_000 + (partkey // 10) % 20_001 + 100 * (partkey % 1_000)


FIRST_DAY = np.datetime64("1992-01-01", "D")
DAYS = int((np.datetime64("1999-01-01", "D") - FIRST_DAY).astype(np.int64))  # the date dimension's 7 years


DATE_COLUMNS = frozenset({"d_year", "d_yearmonthnum", "d_yearmonth", "d_weeknuminyear", "d_date", "d_dayofweek",
                          "d_month", "d_daynuminweek", "d_daynuminmonth", "d_daynuminyear", "d_monthnuminyear",
                          "d_sellingseason", "d_lastdayinweekfl", "d_lastdayinmonthfl", "d_holidayfl",
                          "d_weekdayfl"})  # fmt: skip


def date_attributes(dates: np.ndarray) -> dict[str, np.ndarray]:
    """The SSB date dimension's columns for ``dates`` (datetime64[D] within its seven years)."""
    day = (dates - FIRST_DAY).astype(np.int64)
    return {name: values[day] for name, values in _date_dimension().items()}


@functools.lru_cache(maxsize=1)
def _date_dimension() -> dict[str, np.ndarray]:
    """One row per day of the seven years, as dbgen's DATE table."""
    dates = FIRST_DAY + np.arange(DAYS).astype("timedelta64[D]")
    year = dates.astype("datetime64[Y]").astype(np.int64) + 1970
    month0 = dates.astype("datetime64[M]").astype(np.int64) % 12
    day = (dates - dates.astype("datetime64[M]")).astype(np.int64) + 1
    day_of_year = (dates - dates.astype("datetime64[Y]")).astype(np.int64) + 1
    weekday0 = (dates.astype(np.int64) + 3) % 7  # 0 = Monday (1970-01-01 was a Thursday)
    last_of_month = (dates + np.timedelta64(1, "D")).astype("datetime64[M]") != dates.astype("datetime64[M]")
    month_names = MONTHS[month0]
    season = np.select([(month0 == 11) & (day <= 24), month0 <= 1, month0 <= 4, month0 <= 7, month0 <= 10],
                       ["Christmas", "Winter", "Spring", "Summer", "Fall"], "Winter")  # fmt: skip
    holiday = ((month0 == 0) & (day == 1)) | ((month0 == 6) & (day == 4)) | ((month0 == 11) & (day == 25))
    names, years, days = month_names.tolist(), year.tolist(), day.tolist()
    return {
        "d_year": year.astype(np.int32),
        "d_yearmonthnum": (year * 100 + month0 + 1).astype(np.int32),
        "d_yearmonth": np.array([f"{m[:3]}{y}" for m, y in zip(names, years, strict=True)], dtype=object),
        "d_weeknuminyear": ((day_of_year - 1) // 7 + 1).astype(np.int32),
        "d_date": np.array([f"{m} {d}, {y}" for m, d, y in zip(names, days, years, strict=True)], dtype=object),
        "d_dayofweek": WEEKDAYS[weekday0],
        "d_month": month_names,
        "d_daynuminweek": ((weekday0 + 1) % 7 + 1).astype(np.int32),  # Sunday = 1
        "d_daynuminmonth": day.astype(np.int32),
        "d_daynuminyear": day_of_year.astype(np.int32),
        "d_monthnuminyear": (month0 + 1).astype(np.int32),
        "d_sellingseason": season.astype(object),
        "d_lastdayinweekfl": weekday0 == 6,
        "d_lastdayinmonthfl": last_of_month,
        "d_holidayfl": holiday,
        "d_weekdayfl": weekday0 < 5,
    }
