"""The where-clause language of ``prune`` and ``lakecluster explain``: tokenizer, parser, typed AST.

    expr      := or
    or        := and ( OR and )*
    and       := unary ( AND unary )*
    unary     := NOT unary | '(' expr ')' | predicate
    predicate := column op literal | literal op column
               | column [NOT] IN '(' literal ( ',' literal )* ')'
               | column [NOT] BETWEEN literal AND literal
               | column IS [NOT] NULL
               | column [NOT] LIKE 'pattern'            (% and _ wildcards, \\ escapes)
    op        := = | == | != | <> | < | <= | > | >=
    literal   := 'string' | number | TRUE | FALSE | NaN | Infinity | DATE 'yyyy-mm-dd'
               | TIMESTAMP 'yyyy-mm-dd hh:mm:ss[.ffffff][+hh:mm]'

Keywords are case-insensitive; a column is matched exactly, else case-insensitively, and may be
back-quoted. Functions (``upper(s_city)``) are refused: file statistics cannot answer them. Every
literal is typed by its column while parsing (a date column takes '1995-01-01',
a decimal column 12.345, a double column NaN), so errors point at the offending literal. Every
error is a ``PredicateError`` carrying the character position.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lakecluster import literals
from lakecluster.errors import PredicateError, UnknownColumnError
from lakecluster.schema import ColumnSpec

KEYWORDS = {"AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "LIKE", "TRUE", "FALSE", "DATE", "TIMESTAMP", "NAN",
            "INFINITY"}  # fmt: skip
OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<string>'(?:[^']|'')*')
      | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<punct>[(),+-])""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # string number ident keyword op punct end
    text: str
    pos: int
    value: Any = None


def tokenize(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] == "'":
                raise PredicateError("unterminated string literal (close it with ')", text, pos)
            raise PredicateError(f"unexpected character {text[pos]!r}; {quote_hint(text, _word_start(text, pos))}",
                                 text, pos)  # fmt: skip
        kind = m.lastgroup or ""
        raw = m.group()
        if kind == "string":
            tokens.append(Token("string", raw, pos, raw[1:-1].replace("''", "'")))
        elif kind == "ident":
            if raw.startswith("`"):
                tokens.append(Token("ident", raw, pos, raw[1:-1]))
            elif raw.upper() in KEYWORDS:
                tokens.append(Token("keyword", raw, pos, raw.upper()))
            else:
                tokens.append(Token("ident", raw, pos, raw))
        elif kind != "ws":
            tokens.append(Token(kind, raw, pos, raw))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


# ---------------------------------------------------------------------------------------------
# AST. ``span`` is (start, end) in the source text; literal values are exact Python values of the
# column's type: str, bool, float, Decimal (integers and decimals), date, datetime (UTC).


@dataclass(frozen=True)
class Compare:
    column: ColumnSpec
    op: str
    value: Any
    span: tuple[int, int]


@dataclass(frozen=True)
class InList:
    column: ColumnSpec
    values: tuple[Any, ...]
    negated: bool
    span: tuple[int, int]


@dataclass(frozen=True)
class Between:
    column: ColumnSpec
    low: Any
    high: Any
    negated: bool
    span: tuple[int, int]


@dataclass(frozen=True)
class IsNull:
    column: ColumnSpec
    negated: bool
    span: tuple[int, int]


@dataclass(frozen=True)
class Like:
    column: ColumnSpec
    pattern: str
    negated: bool
    span: tuple[int, int]


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]
    span: tuple[int, int]


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]
    span: tuple[int, int]


@dataclass(frozen=True)
class Not:
    item: Expr
    span: tuple[int, int]


Expr = Compare | InList | Between | IsNull | Like | And | Or | Not


def columns_of(expr: Expr) -> list[str]:
    """Names of the columns an expression reads, in order of appearance."""
    if isinstance(expr, And | Or):
        return list(dict.fromkeys(n for item in expr.items for n in columns_of(item)))
    if isinstance(expr, Not):
        return columns_of(expr.item)
    return [expr.column.name]


def conjuncts(expr: Expr) -> tuple[Expr, ...]:
    """The top-level AND terms (one when the expression is not an AND)."""
    return expr.items if isinstance(expr, And) else (expr,)


def like_prefix(pattern: str) -> tuple[str, int | None]:
    """A LIKE pattern's literal text before its first wildcard (escapes resolved), and the position
    of that wildcard in the pattern (None when it has none)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch in "%_":
            return "".join(out), i
        out.append(ch)
        i += 1
    return "".join(out), None


# ---------------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, columns: Sequence[ColumnSpec]) -> None:
        self.text = text
        self.columns = {c.name: c for c in columns}
        self.tokens = tokenize(text)
        self.i = 0

    # helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def error(self, message: str, token: Token | None = None) -> PredicateError:
        token = token or self.tok
        return PredicateError(message, self.text, token.pos)

    def found(self, token: Token | None = None) -> str:
        token = token or self.tok
        return "the end of the clause" if token.kind == "end" else f"'{token.text}'"

    def keyword(self, *words: str) -> bool:
        if self.tok.kind == "keyword" and self.tok.value in words:
            self.i += 1
            return True
        return False

    def expect_keyword(self, word: str, after: str) -> None:
        if not self.keyword(word):
            raise self.error(f"expected {word} after {after}, found {self.found()}")

    def expect_punct(self, p: str, what: str) -> Token:
        if self.tok.kind == "punct" and self.tok.text == p:
            self.i += 1
            return self.tokens[self.i - 1]
        raise self.error(f"expected '{p}' {what}, found {self.found()}")

    def end_of(self, index: int) -> int:
        t = self.tokens[index]
        return t.pos + len(t.text)

    # grammar
    def parse(self) -> Expr:
        if self.tok.kind == "end":
            raise self.error("empty where-clause: expected a condition such as s_city = 'UNITED KI1'")
        expr = self.parse_or()
        if self.tok.kind != "end":
            raise self.error(f"expected AND, OR or the end of the clause, found {self.found()}")
        return expr

    def parse_or(self) -> Expr:
        start = self.tok.pos
        items = [self.parse_and()]
        while self.keyword("OR"):
            items.append(self.parse_and())
        return items[0] if len(items) == 1 else Or(tuple(items), (start, self.end_of(self.i - 1)))

    def parse_and(self) -> Expr:
        start = self.tok.pos
        items = [self.parse_unary()]
        while self.keyword("AND"):
            items.append(self.parse_unary())
        return items[0] if len(items) == 1 else And(tuple(items), (start, self.end_of(self.i - 1)))

    def parse_unary(self) -> Expr:
        start = self.tok.pos
        if self.keyword("NOT"):
            item = self.parse_unary()
            return Not(item, (start, self.end_of(self.i - 1)))
        if self.tok.kind == "punct" and self.tok.text == "(":
            self.i += 1
            if self.tok.kind == "end" or (self.tok.kind == "punct" and self.tok.text == ")"):
                raise self.error(f"expected a condition after '(', found {self.found()}")
            expr = self.parse_or()
            self.expect_punct(")", "to close the parenthesis")
            return expr
        return self.parse_predicate()

    def column(self) -> ColumnSpec:
        t = self.tok
        if t.kind != "ident":
            if t.kind == "keyword" and t.value not in ("TRUE", "FALSE", "NAN", "INFINITY", "DATE", "TIMESTAMP"):
                raise self.error(f"expected a column name, found the keyword {t.text.upper()}")
            raise self.error(f"expected a column name, found {self.found()}")
        self.i += 1
        name = t.value
        self.refuse_function(t)
        if name in self.columns:
            return self.columns[name]
        folded = [c for n, c in self.columns.items() if n.lower() == name.lower()]
        if len(folded) == 1:
            return folded[0]
        raise UnknownColumnError(name, list(self.columns), self.text, t.pos)

    def refuse_function(self, name: Token) -> None:
        """A name followed by '(' is a function call, which no file statistics can answer."""
        if self.tok.kind == "punct" and self.tok.text == "(":
            raise PredicateError(f"functions are not supported: {name.text}(...); compare a column with a value, "
                                 "e.g. s_city = 'UNITED KI1'", self.text, name.pos)  # fmt: skip

    def starts_literal(self) -> bool:
        t = self.tok
        if t.kind in ("string", "number") or (t.kind == "punct" and t.text in "+-"):
            return True
        return t.kind == "keyword" and t.value in ("TRUE", "FALSE", "NAN", "INFINITY", "DATE", "TIMESTAMP", "NULL")

    def parse_predicate(self) -> Expr:
        start_index = self.i
        start = self.tok.pos
        if self.starts_literal():  # literal op column
            lit = self.literal_tokens()
            op_tok = self.tok
            if op_tok.kind != "op":
                raise self.error(f"expected a comparison operator after the value, found {self.found()}")
            self.i += 1
            col = self.column()
            value = self.typed(col, lit)
            return Compare(col, FLIPPED[OPS[op_tok.text]], value, (start, self.end_of(self.i - 1)))
        col = self.column()
        if self.tok.kind == "op":
            op = OPS[self.tok.text]
            op_tok = self.tok
            self.i += 1
            if self.tok.kind == "ident":
                self.i += 1
                self.refuse_function(self.tokens[self.i - 1])
                self.i -= 1
                if self.tok.text.lower() not in {c.lower() for c in self.columns}:
                    raise self.error(f"expected a value after '{op_tok.text}', found {self.found()}; "
                                     f"{quote_hint(self.text, self.tok.pos)}")  # fmt: skip
                raise self.error("comparing two columns cannot prune files; compare a column with a value")
            if not self.starts_literal():
                raise self.error(f"expected a value after '{op_tok.text}', found {self.found()}")
            value = self.typed(col, self.literal_tokens())
            return Compare(col, op, value, (start, self.end_of(self.i - 1)))
        if self.keyword("IS"):
            negated = self.keyword("NOT")
            self.expect_keyword("NULL", "IS NOT" if negated else "IS")
            return IsNull(col, negated, (start, self.end_of(self.i - 1)))
        negated = self.keyword("NOT")
        if self.keyword("IN"):
            self.expect_punct("(", "after IN")
            values = [self.typed(col, self.literal_tokens())]
            while self.tok.kind == "punct" and self.tok.text == ",":
                self.i += 1
                values.append(self.typed(col, self.literal_tokens()))
            self.expect_punct(")", "to close the IN list")
            return InList(col, tuple(values), negated, (start, self.end_of(self.i - 1)))
        if self.keyword("BETWEEN"):
            low = self.typed(col, self.literal_tokens())
            self.expect_keyword("AND", "the BETWEEN lower bound")
            high = self.typed(col, self.literal_tokens())
            return Between(col, low, high, negated, (start, self.end_of(self.i - 1)))
        if self.keyword("LIKE"):
            t = self.tok
            if col.type != "string":
                raise PredicateError(f"LIKE needs a string column; {col.name} is {col.type}", self.text,
                                     self.tokens[start_index].pos)  # fmt: skip
            if t.kind != "string":
                raise self.error(f"expected a quoted pattern after LIKE, found {self.found()}")
            self.i += 1
            return Like(col, t.value, negated, (start, self.end_of(self.i - 1)))
        what = "IN, BETWEEN or LIKE after NOT" if negated else "a comparison (=, <, IN, BETWEEN, IS NULL, LIKE)"
        raise self.error(f"expected {what} after column {col.name}, found {self.found()}")

    # literals
    def literal_tokens(self) -> tuple[Token, ...]:
        """The tokens of one literal: [sign] number | string | keyword [string]."""
        t = self.tok
        if t.kind == "punct" and t.text in "+-":
            self.i += 1
            nxt = self.tok
            if nxt.kind == "number" or (nxt.kind == "keyword" and nxt.value in ("INFINITY", "NAN")):
                self.i += 1
                return (t, nxt)
            raise self.error(f"expected a number after '{t.text}', found {self.found()}")
        if t.kind in ("string", "number"):
            self.i += 1
            return (t,)
        if t.kind == "keyword" and t.value in ("DATE", "TIMESTAMP"):
            self.i += 1
            if self.tok.kind != "string":
                raise self.error(f"expected a quoted value after {t.value}, e.g. {t.value} '1995-01-01'")
            self.i += 1
            return (t, self.tokens[self.i - 1])
        if t.kind == "keyword" and t.value in ("TRUE", "FALSE", "NAN", "INFINITY", "NULL"):
            self.i += 1
            return (t,)
        hint = f"; {quote_hint(self.text, t.pos)}" if t.kind == "ident" else ""
        raise self.error(f"expected a value, found {self.found()}{hint}")

    def typed(self, col: ColumnSpec, toks: tuple[Token, ...]) -> Any:
        """The literal as an exact value of the column's type, or a PredicateError at the literal."""
        first, last = toks[0], toks[-1]
        sign = -1 if first.kind == "punct" and first.text == "-" else 1
        shown = self.text[first.pos : last.pos + len(last.text)]

        def bad(why: str) -> PredicateError:
            return PredicateError(f"{shown} is not a valid value for {col.name} ({col.type}): {why}", self.text,
                                  first.pos)  # fmt: skip

        if last.kind == "keyword" and last.value == "NULL":
            raise PredicateError("a comparison with NULL is never true; use IS NULL or IS NOT NULL", self.text,
                                 first.pos)  # fmt: skip
        prefix = first.value if first.kind == "keyword" and first.value in ("DATE", "TIMESTAMP") else None
        if col.type == "string":
            if last.kind != "string" or prefix:
                raise bad("quote string values, e.g. 'UNITED KI1'")
            return last.value
        if col.type == "boolean":
            if last.kind == "keyword" and last.value in ("TRUE", "FALSE"):
                return last.value == "TRUE"
            if last.kind == "string" and last.value.lower() in ("true", "false"):
                return last.value.lower() == "true"
            raise bad("expected TRUE or FALSE")
        if col.is_floating:
            if last.kind == "keyword" and last.value in ("NAN", "INFINITY"):
                return sign * float("inf") if last.value == "INFINITY" else float("nan")
            text = last.value if last.kind in ("number", "string") and not prefix else None
            try:
                value = float(text.strip()) if text is not None else None
            except ValueError:
                value = None
            if value is None:
                raise bad("expected a number, NaN or Infinity")
            return sign * value
        if col.is_numeric:  # int, long, decimal: exact
            if last.kind not in ("number", "string") or prefix:
                raise bad("expected a number")
            try:
                return sign * literals.exact_number(last.value)
            except literals.LiteralError as e:
                raise bad(str(e)) from None
        if last.kind != "string" or sign < 0:
            raise bad(f"expected a quoted {col.type}, e.g. '1995-01-01'")
        if col.type == "date" and prefix == "TIMESTAMP":
            raise bad("a date column takes DATE 'yyyy-mm-dd'")
        try:
            return (literals.parse_date if col.type == "date" else literals.parse_timestamp)(last.value)
        except literals.LiteralError as e:
            raise bad(str(e)) from None


def parse(text: str, columns: Sequence[ColumnSpec]) -> Expr:
    """Parse and type a where-clause against the table's columns."""
    return _Parser(text, columns).parse()


# ---------------------------------------------------------------------------------------------
# Back to SQL text (explain output, and the tests' DuckDB oracle).


_VALUE_END = re.compile(r"\s+(AND|OR)\b|[,)]|$", re.IGNORECASE)


def _word_start(text: str, pos: int) -> int:
    while pos > 0 and not text[pos - 1].isspace() and text[pos - 1] not in "=<>!(,":
        pos -= 1
    return pos


def quote_hint(text: str, pos: int) -> str:
    """A hint for an unquoted string value: the value as it should be written."""
    match = _VALUE_END.search(text, pos)
    end = match.start() if match else len(text)
    value = text[pos:end].strip().replace("'", "''")
    return f"string values need quotes: '{value}'" if value else "string values need quotes, e.g. 'UNITED KI1'"
