"""The SSB-like wide table lakecluster ships with: its columns and the values of its dimensions.

The Star Schema Benchmark's lineorder table joined with its dimensions (customer, supplier, part,
date), as one table. The built-in generator (``lakecluster.stream.generator``) produces it, it is
the default ``table.columns``, and the benchmarks query it.
"""

from __future__ import annotations

import numpy as np

from lakecluster.schema import ColumnSpec

SSB_COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("lo_orderkey", "long", required=True),
    ColumnSpec("lo_linenumber", "int"),
    ColumnSpec("lo_orderdate", "date"),
    ColumnSpec("d_year", "int"),
    ColumnSpec("event_time", "timestamp"),
    ColumnSpec("c_city", "string"),
    ColumnSpec("c_nation", "string"),
    ColumnSpec("c_region", "string"),
    ColumnSpec("s_city", "string"),
    ColumnSpec("s_nation", "string"),
    ColumnSpec("s_region", "string"),
    ColumnSpec("p_brand", "string"),
    ColumnSpec("p_category", "string"),
    ColumnSpec("lo_shipmode", "string"),
    ColumnSpec("lo_quantity", "int"),
    ColumnSpec("lo_discount", "double"),
    ColumnSpec("lo_revenue", "decimal(18,2)"),
    ColumnSpec("is_returned", "boolean"),
)

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
SHIPMODES = np.array(["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"], dtype=object)
