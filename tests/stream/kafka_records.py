"""Records for the Kafka tests: valid ones of every declared type, and malformed ones of every kind."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

CONFIG_TEMPLATE = """
[source]
kind = "kafka"
[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
max_offsets_per_trigger = {max_offsets}
connect_timeout_s = 10.0
{kafka_extra}

[table]
path = "{table}"
partition_by = ["day"]
clustering_columns = ["city", "brand", "qty"]
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "city", type = "string", required = true }},
  {{ name = "brand", type = "string" }},
  {{ name = "qty", type = "int" }},
  {{ name = "price", type = "double" }},
  {{ name = "amount", type = "decimal(10,2)" }},
  {{ name = "flag", type = "boolean" }},
  {{ name = "day", type = "date" }},
  {{ name = "ts", type = "timestamp" }},
]

[stream]
trigger_interval_s = 0.5
progress = false
"""

# (bad record, words its quarantine reason must contain)
MALFORMED: list[tuple[bytes | None, str]] = [
    (b"not json {", "not valid JSON"),
    (b"[1, 2, 3]", "not an object"),
    (json.dumps({"city": "X"}).encode(), "missing required field id"),
    (json.dumps({"id": None, "city": "X"}).encode(), "required field id is null"),
    (json.dumps({"id": "12", "city": "X"}).encode(), "field id: expected long"),
    (json.dumps({"id": 1.5, "city": "X"}).encode(), "field id: expected long"),
    (json.dumps({"id": 7, "city": 42}).encode(), "field city: expected string"),
    (json.dumps({"id": 7, "city": "X", "amount": 1.234}).encode(), "field amount: expected decimal(10,2)"),
    (json.dumps({"id": 7, "city": "X", "qty": 3_000_000_000}).encode(), "field qty: expected int"),
    (json.dumps({"id": 7, "city": "X", "day": "2024-13-45"}).encode(), "field day: expected date"),
    (json.dumps({"id": 7, "city": "X", "flag": "yes"}).encode(), "field flag: expected boolean"),
    (json.dumps({"id": 7, "city": "X", "ts": "yesterday"}).encode(), "field ts: expected timestamp"),
    (None, "record has no value"),
]


@dataclass
class Produced:
    partition: int
    value: bytes | None
    row: tuple[Any, ...] | None  # expected table row, for valid records
    reason: str | None  # expected words of the quarantine reason, for malformed ones


def valid_record(i: int, rng: random.Random) -> tuple[bytes, tuple[Any, ...]]:
    city = rng.choice(["", "UNITED KI1", "UNITED KI2", "UNITED ST0", "PERU     3", "ÉIRE  9"])
    brand = rng.choice([None, *[f"MFGR#{m}{c}{b}" for m in (1, 2) for c in (1, 2) for b in (1, 17, 40)]])
    qty = rng.choice([None, rng.randint(-5, 50), 2**31 - 1, -(2**31)])
    price = rng.choice([None, "NaN", rng.uniform(-1e6, 1e6), 0.0])
    amount = Decimal(rng.randint(-(10**9), 10**9)) / 100
    flag = rng.choice([None, True, False])
    day = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 3))
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rng.randint(0, 10**12))
    payload: dict[str, Any] = {"id": i, "city": city, "qty": qty, "price": price, "amount": float(amount),
                               "flag": flag, "day": day.isoformat(), "extra_field": "ignored",
                               "ts": ts.isoformat().replace("+00:00", "Z")}  # fmt: skip
    if brand is not None or rng.random() < 0.5:
        payload["brand"] = brand  # absent and null both mean null for optional fields
    price_value = float("nan") if price == "NaN" else price
    row = (i, city, brand, qty, price_value, amount, flag, day, ts)
    return json.dumps(payload).encode(), row


def build(first_id: int, n_valid: int, partitions: int, seed: int, with_malformed: bool = True) -> list[Produced]:
    rng = random.Random(seed)
    out = []
    for i in range(first_id, first_id + n_valid):
        value, row = valid_record(i, rng)
        out.append(Produced(rng.randrange(partitions), value, row, None))
    if with_malformed:
        for value, reason in MALFORMED:
            out.insert(rng.randrange(len(out) + 1), Produced(rng.randrange(partitions), value, None, reason))
    return out


def with_offsets(records: list[Produced], start: dict[int, int] | None = None) -> list[tuple[int, int, Produced]]:
    """(partition, offset, record) in production order for a topic written only by these records."""
    next_offset = dict(start or {})
    out = []
    for r in records:
        o = next_offset.get(r.partition, 0)
        next_offset[r.partition] = o + 1
        out.append((r.partition, o, r))
    return out


def normalize(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Rows compare equal with NaN == NaN."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def table_rows(table: Any) -> list[tuple[Any, ...]]:
    columns = ["id", "city", "brand", "qty", "price", "amount", "flag", "day", "ts"]
    data = table.select(columns).to_pylist()
    return sorted((normalize(tuple(r[c] for c in columns)) for r in data), key=lambda r: r[0])


def expected_rows(records: list[Produced]) -> list[tuple[Any, ...]]:
    return sorted((normalize(r.row) for r in records if r.row is not None), key=lambda r: r[0])


def write_config(
    path: Path, *, bootstrap: str, topic: str, table: Path, max_offsets: int = 200, kafka_extra: str = ""
) -> Path:
    """The test configuration; ``kafka_extra`` is TOML appended to ``[source.kafka]`` (keys, then sub-tables)."""
    path.write_text(CONFIG_TEMPLATE.format(bootstrap=bootstrap, topic=topic, table=table, max_offsets=max_offsets,
                                           kafka_extra=kafka_extra))  # fmt: skip
    return path
