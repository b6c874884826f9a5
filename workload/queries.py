"""A workload file: one WHERE clause per line, reduced to the predicates data skipping can use.

Clauses are parsed by the where-clause language of ``lakecluster explain`` (``lakecluster.predicate``),
so literals are typed by their column. A predicate skipping can use compares one column with
constants: ``=``, ``IN``, ``BETWEEN``, ``<``/``<=``/``>``/``>=`` and ``LIKE 'prefix%'``. ``AND`` is
split into its terms; an ``OR`` of equalities on one column becomes one ``IN``; anything else
(``OR`` across columns, ``NOT``, ``!=``, ``IS NULL``) restricts no range of a column and is dropped
from the query's predicates, so the prediction for such a query is conservative. Blank lines and
lines starting with ``--`` or ``#`` are ignored; a leading ``WHERE`` is optional.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lakecluster import predicate as P
from lakecluster.errors import InputError, PredicateError
from lakecluster.schema import ColumnSpec


class WorkloadError(InputError):
    """A workload file that cannot be read, or a line of it that is not a WHERE clause on the table
    (``line``: its number; the command names the file as the :attr:`source`)."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)

    def in_file(self, path: str) -> WorkloadError:
        """The error with its source: the file, and the line when one is to blame."""
        self.source = path if self.line is None else f"{path} line {self.line}"
        return self


@dataclass(frozen=True)
class Predicate:
    """``column`` equal to one of ``values`` (kind ``eq``), or within ``[low, high]`` (kind ``range``;
    ``None`` for an open end)."""

    column: str
    kind: str
    values: tuple[Any, ...] = ()
    low: Any = None
    high: Any = None


@dataclass(frozen=True)
class Query:
    """One query of a workload; ``weight``: how many times it counts in the workload's mean (1 for a
    line of a workload file, whose repeats count as separate queries; the number of scans of one
    predicate set for a captured workload, ``workload.captured``)."""

    line: int
    text: str
    predicates: tuple[Predicate, ...]
    weight: float = 1.0

    @property
    def columns(self) -> set[str]:
        return {p.column for p in self.predicates}


def parse_workload(lines: Iterable[str], columns: Sequence[ColumnSpec]) -> list[Query]:
    queries = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith(("--", "#")):
            continue
        clause = text.rstrip(";").strip()
        if clause[:5].upper() == "WHERE" and (clause[5:6].isspace() or clause[5:6] == "("):
            clause = clause[5:].strip()
        try:
            tree = P.parse(clause, columns)
        except PredicateError as e:
            at = f" at character {e.position + 1}" if e.position is not None else ""
            raise WorkloadError(f"{e.message}{at}: {text}", line=number) from None
        queries.append(Query(number, text, predicates_of(tree)))
    if not queries:
        raise WorkloadError("the workload file holds no WHERE clause (one per line)")
    return queries


def predicates_of(expression: P.Expr | None) -> tuple[Predicate, ...]:
    """What data skipping can use of an expression of the where-clause language: one predicate
    per column (see the module's docstring); none for None."""
    return () if expression is None else normalized(_predicates(expression))


def _predicates(node: P.Expr) -> list[Predicate]:
    if isinstance(node, P.And):
        return [p for item in node.items for p in _predicates(item)]
    if isinstance(node, P.Or):
        # Only an OR of equalities on one column keeps a skippable shape (an IN); any other OR can
        # match rows outside each branch's predicate, so it restricts nothing.
        branches = [_predicates(item) for item in node.items]
        if all(len(b) == 1 and b[0].kind == "eq" for b in branches) and len({b[0].column for b in branches}) == 1:
            return [Predicate(branches[0][0].column, "eq", tuple(v for b in branches for v in b[0].values))]
        return []
    if isinstance(node, P.Compare):
        if node.op == "=":
            return [Predicate(node.column.name, "eq", (node.value,))]
        if node.op in ("<", "<="):
            return [Predicate(node.column.name, "range", high=node.value)]
        if node.op in (">", ">="):
            return [Predicate(node.column.name, "range", low=node.value)]
    if isinstance(node, P.InList) and not node.negated:
        return [Predicate(node.column.name, "eq", node.values)]
    if isinstance(node, P.Between) and not node.negated:
        return [Predicate(node.column.name, "range", low=node.low, high=node.high)]
    if isinstance(node, P.Like) and not node.negated:
        prefix, wildcard = P.like_prefix(node.pattern)
        if wildcard is None:
            return [Predicate(node.column.name, "eq", (prefix,))]
        if prefix:  # every string starting with the prefix sorts between these two
            return [Predicate(node.column.name, "range", low=prefix, high=prefix + "\U0010ffff")]
    return []


def normalized(predicates: Iterable[Predicate]) -> tuple[Predicate, ...]:
    """One predicate per column (merged as :func:`_merge` says), an equality's values once each."""
    return tuple(_distinct(p) for p in _merge(list(predicates)))


def _distinct(p: Predicate) -> Predicate:
    """An equality's values once each (``IN ('a', 'a')`` selects what ``= 'a'`` does)."""
    return dataclasses.replace(p, values=tuple(dict.fromkeys(p.values))) if p.kind == "eq" else p


def _merge(predicates: list[Predicate]) -> list[Predicate]:
    """One predicate per column: ranges intersected, equalities intersected, an equality over a range."""
    by_column: dict[str, Predicate] = {}
    for p in predicates:
        seen = by_column.get(p.column)
        if seen is None or (p.kind == "eq" and seen.kind == "range"):
            by_column[p.column] = p
        elif p.kind == "range" and seen.kind == "range":
            low = seen.low if p.low is None else p.low if seen.low is None else max(seen.low, p.low)
            high = seen.high if p.high is None else p.high if seen.high is None else min(seen.high, p.high)
            by_column[p.column] = Predicate(p.column, "range", low=low, high=high)
        elif p.kind == "eq" and seen.kind == "eq":
            by_column[p.column] = Predicate(p.column, "eq", tuple(v for v in seen.values if v in p.values))
    return list(by_column.values())
