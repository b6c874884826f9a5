"""The table's columns following the fields of its records (``stream.schema_evolution``).

A record may carry a field that is no column of the table: a JSON record a top-level key, an Avro
record a field of its writer schema. Every such field is counted (the records that carry a value
in it), exported per field, and logged once per process. With ``add_columns``, a field becomes a
nullable column of the table once it is typed and seen often enough: a JSON key in
``stream.schema_evolution_min_records`` records (counted over the stream's life: each batch's
commit keeps the counts, and a restarted stream counts on from them), typed by its JSON values (docs/records.md,
"Schema evolution"), an Avro field at its schema's first record, typed by the Avro mapping. The
stream then reads and writes the table's columns, not only the declared ones: the declared
columns, then every other column of the table the stream can type (added by it or by anyone).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from lakecluster import metrics
from lakecluster.schema import ColumnSpec

log = logging.getLogger(__name__)

# Names a column may be given without column mapping, and that every reader quotes the same way;
# the stream's own working columns start with one of RESERVED_PREFIXES.
ADDABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_PREFIXES = ("_lc_", "__lakecluster")
# The fields exported under their own name; further ones are counted under OTHER_FIELDS (a
# producer writing ids as keys must not make a series per id).
MAX_FIELDS_EXPORTED = 50
OTHER_FIELDS = "_other"
# The kinds a field that no column can take has: nested JSON values, Avro types with no column type.
UNTYPED_KINDS = frozenset({"object", "array", "unsupported"})
_DELTA_TYPES = {"string": "string", "integer": "int", "long": "long", "float": "float", "double": "double",
                "boolean": "boolean", "date": "date", "timestamp": "timestamp"}  # fmt: skip
_DELTA_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_NUMBER_ORDER = ("int", "long", "float", "double")


def column_of_field(field: Mapping[str, object]) -> ColumnSpec | None:
    """The nullable column the stream writes for a Delta schema field; None for a type it does not
    write (nested types, binary, short, byte, timestamp without time zone)."""
    kind = field.get("type")
    if not isinstance(kind, str):
        return None
    name = str(field["name"])
    if kind in _DELTA_TYPES:
        return ColumnSpec(name, _DELTA_TYPES[kind])
    m = _DELTA_DECIMAL.match(kind)
    return ColumnSpec(name, f"decimal({m.group(1)},{m.group(2)})") if m else None


def one_type(kinds: Sequence[str]) -> str | None:
    """The column type that holds every kind a field was met with (numbers widen: int, long,
    float, double), or None when there is none (a string and a number, a nested value)."""
    found = set(kinds)
    if len(found) == 1:
        (only,) = found
        return None if only in UNTYPED_KINDS else only
    if found <= set(_NUMBER_ORDER):
        if found & {"float", "double"}:
            return "double"
        return "long"
    return None


class SchemaFollower:
    """The columns a stream reads and writes, and the fields of its records that are none of them."""

    def __init__(self, declared: Sequence[ColumnSpec], mode: str, min_records: int) -> None:
        self.declared = tuple(declared)
        self.mode = mode
        self.min_records = min_records
        self.columns = self.declared
        self.records: Counter[str] = Counter()  # field -> records that carried it, this process
        self.kinds: dict[str, Counter[str]] = {}  # field -> kind -> records
        self._exported: set[str] = set()
        self._told: set[tuple[str, str]] = set()  # (field, what was logged) pairs
        self._counted_batch: int | None = None

    @property
    def adds_columns(self) -> bool:
        return self.mode == "add_columns"

    def follow_table(self, fields: Sequence[Mapping[str, object]]) -> bool:
        """Take the table's schema: with ``add_columns`` the columns are the declared ones, then
        the table's others the stream can type. Returns whether the columns changed."""
        if not self.adds_columns:
            return False
        declared = {c.name for c in self.declared}
        extra = [column_of_field(f) for f in fields if f.get("name") not in declared]
        columns = self.declared + tuple(c for c in extra if c is not None)
        changed = columns != self.columns
        self.columns = columns
        return changed

    def met(self, unseen: Mapping[tuple[str, str], int], batch_id: int, *, min_records: int | None = None
            ) -> list[ColumnSpec]:  # fmt: skip
        """Counts a micro-batch's fields that are no column, ``(field, kind) -> records`` (once per
        batch however often it is read), and returns the columns to add now (``add_columns``: a
        field seen in ``min_records`` records, default ``stream.schema_evolution_min_records``,
        with a name and a type a column can have)."""
        names = {c.name for c in self.columns}
        fresh = [(key, n) for key, n in unseen.items() if key[0] not in names and n > 0]
        if batch_id != self._counted_batch:
            self._counted_batch = batch_id
            for (name, kind), n in fresh:
                self.records[name] += n
                self.kinds.setdefault(name, Counter())[kind] += n
                self._export(name, n)
        threshold = self.min_records if min_records is None else min_records
        folded = {c.name.lower(): c.name for c in self.columns}
        add = []
        for name in sorted({name for (name, _), _ in fresh}):
            column_type = one_type(list(self.kinds[name]))
            why: str
            if not self.adds_columns:
                why = ("is no column of the table: its values are not kept (stream.schema_evolution = "
                       '"add_columns" adds such fields)')  # fmt: skip
            elif name.lower() in folded:
                why = f"differs from the column {folded[name.lower()]} only in case: its values are not kept"
            elif not ADDABLE_NAME.match(name):
                why = "is not a name a column can have (letters, digits and _): its values are not kept"
            elif name.lower().startswith(RESERVED_PREFIXES):
                why = "starts as lakecluster's working columns do (_lc_): its values are not kept"
            elif column_type is None:
                kinds = ", ".join(sorted(self.kinds[name]))
                why = f"holds values no one column type takes ({kinds}): its values are not kept"
            elif self.records[name] >= threshold:
                add.append(ColumnSpec(name, column_type))
                continue
            else:
                why = f"becomes a column once {threshold} records carry it"
            self._tell(name, why)
        return add

    def _tell(self, name: str, why: str) -> None:
        if (name, why) not in self._told:
            self._told.add((name, why))
            log.warning("records carry the field %r (%d so far, %s), which %s", name, self.records[name],
                        ", ".join(sorted(self.kinds[name])), why)  # fmt: skip

    def _export(self, name: str, records: int) -> None:
        if name not in self._exported and len(self._exported) < MAX_FIELDS_EXPORTED:
            self._exported.add(name)
        label = name if name in self._exported else OTHER_FIELDS
        metrics.STREAM_UNSEEN_FIELD_RECORDS.labels(label).inc(records)

    def carried(self) -> dict[str, dict[str, int]]:
        """The counts of the fields that are no column yet (``field -> kind -> records``, the 50
        most carried), which a batch's commit keeps so that a restarted stream counts on."""
        names = {c.name for c in self.columns}
        counted = sorted(((n, name) for name, n in self.records.items() if name not in names), reverse=True)
        return {name: dict(self.kinds[name]) for _, name in counted[:MAX_FIELDS_EXPORTED]}

    def resume(self, carried: Mapping[str, Mapping[str, int]]) -> None:
        """Counts on from what the stream's last commit kept (:meth:`carried`)."""
        for name, kinds in carried.items():
            for kind, n in kinds.items():
                if isinstance(n, int) and n > 0:
                    self.records[name] += n
                    self.kinds.setdefault(name, Counter())[kind] += n

    def seen(self) -> dict[str, dict[str, object]]:
        """The fields met this process that are still no column: records and kinds (``status``)."""
        names = {c.name for c in self.columns}
        return {name: {"records": n, "kinds": sorted(self.kinds[name])}
                for name, n in sorted(self.records.items()) if name not in names}  # fmt: skip
