"""When files lakecluster writes itself may be appended to a table as they are."""

from __future__ import annotations

from lakecluster.delta_txn import TableFacts, append_blocker

FIELDS = (
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "city", "type": "string", "nullable": True, "metadata": {}},
)


def _facts(fields=FIELDS, partitions=("city",), configuration=None, features=()) -> TableFacts:  # type: ignore[no-untyped-def]
    return TableFacts(tuple(fields), tuple(partitions), configuration or {}, frozenset(features))


def test_a_table_of_exactly_the_declared_columns_takes_the_files() -> None:
    facts = _facts(configuration={"delta.appendOnly": "true", "delta.enableChangeDataFeed": "true"},
                   features=("appendOnly", "changeDataFeed", "deletionVectors", "rowTracking", "domainMetadata"))
    assert append_blocker(facts, FIELDS, ("city",)) is None


def test_a_nullable_column_another_writer_added_still_takes_the_files() -> None:
    """The files lack it, which every reader reads as null: what the stream means to write."""
    added = {"name": "note", "type": "string", "nullable": True, "metadata": {}}
    assert append_blocker(_facts(fields=(added, *FIELDS)), FIELDS, ("city",)) is None


def test_anything_the_files_would_not_honour_sends_the_batch_to_deltas_writer() -> None:
    generated = ({**FIELDS[0], "metadata": {"delta.generationExpression": "1"}}, FIELDS[1])
    nullable = ({**FIELDS[0], "nullable": True}, FIELDS[1])
    cases = {
        "schema": _facts(fields=generated),
        "schema ": _facts(fields=nullable),
        "schema  ": _facts(fields=FIELDS[:1]),
        "not plain nullable": _facts(fields=(*FIELDS, {"name": "n", "type": "long", "nullable": False,
                                                       "metadata": {}})),
        "not plain nullable ": _facts(fields=(*FIELDS, {"name": "d", "type": "long", "nullable": True,
                                                        "metadata": {"CURRENT_DEFAULT": "1"}})),
        "partition": _facts(partitions=()),
        "CHECK constraints": _facts(configuration={"delta.constraints.positive": "id > 0"}),
        "column mapping": _facts(configuration={"delta.columnMapping.mode": "name"}),
        "icebergCompatV2": _facts(features=("icebergCompatV2",)),
        "identityColumns": _facts(features=("identityColumns", "appendOnly")),
    }
    for expected, facts in cases.items():
        reason = append_blocker(facts, FIELDS, ("city",))
        assert reason is not None and expected.strip() in reason, (expected, reason)
