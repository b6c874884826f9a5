"""The argument parser, and the one place that turns failures into a message and an exit status.

Exit status: 0 done, 1 a runtime failure (a one-line message says what and what to do; ``--debug``
shows the trace), 2 a usage or input mistake, 3 ``compact --once`` lost a group to a conflict,
130 interrupted, 141 the reader of the output went away.

A usage or input mistake (the configuration file, ``LAKECLUSTER_*`` variables, ``--set``, a flag's
value, ``--where``, a query file) is an :class:`~lakecluster.errors.InputError`: one line naming its
source (file and line, ``--set KEY``, the variable, the flag) and, for a mistyped key or column,
the nearest known one (docs/operations.md, "Command-line mistakes and exit status").
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from lakecluster import class_archive, failures, progress
from lakecluster.cli import commands
from lakecluster.cli.context import Context
from lakecluster.cli.output import quiet_broken_pipe
from lakecluster.config import load_config, parse_overrides
from lakecluster.errors import InputError, LakeclusterError

log = logging.getLogger("lakecluster")

_N = TypeVar("_N", int, float)
MAX_BOUNDARIES_SHOWN = 1000

COMMANDS: dict[str, Callable[[Context], int]] = {
    "stream": commands.stream,
    "compact": commands.compact,
    "run": commands.run,
    "vacuum": commands.vacuum,
    "config": commands.show_config,
    "boundaries": commands.boundaries,
    "index": commands.index,
    "explain": commands.explain,
    "status": commands.status,
    "produce": commands.produce,
    "report": commands.report,
    "tune": commands.tune,
    "history": commands.history,
    "workload": commands.workload,
}


def parser() -> argparse.ArgumentParser:
    """The ``lakecluster`` command line: global options, one subcommand per service or task."""
    p = OneLineParser(
        prog="lakecluster",
        description="Streaming ingestion into Delta tables, kept compact and clustered by Hilbert/Z keys.",
        epilog="Start with `lakecluster run` (built-in generator, local table). Docs: docs/ in the repository.",
    )
    p.add_argument("--config", "-c", help="TOML config file (defaults < file < LAKECLUSTER_* env < --set)")
    p.add_argument("--set", "-s", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set table.path=/data/t (repeatable)")  # fmt: skip
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="json: one JSON object per log line, for log shippers")  # fmt: skip
    p.add_argument("--debug", action="store_true", help="show the full trace of a failure")
    _output_options(p)
    p.set_defaults(output="text")
    sub = _with_output_options(p.add_subparsers(dest="command", metavar="COMMAND"))

    s = sub.add_parser("stream", help="ingest from the source into the Delta table (runs until stopped)")
    s.add_argument("--available-now", action="store_true", help="process everything available at start, then exit")
    s.add_argument("--max-batches", type=_positive_int, help="stop after this many micro-batches")

    c = sub.add_parser("compact", help="cluster and compact the table (runs until stopped)")
    c.add_argument("--once", action="store_true", help="one planning round, then exit")
    c.add_argument("--dry-run", action="store_true", help="print the plan (groups, files, bytes, why) and exit")
    c.add_argument("--where", metavar="PREDICATE",
                   help="rewrite only files whose partition values and column stats can match it, e.g. "
                   "\"d_year = 1995\" (the where-clause language of explain)")  # fmt: skip
    c.add_argument("--full", action="store_true",
                   help="re-cluster every file not clustered under the current layout (after a change of "
                   "table.clustering_columns, compaction.column_weights or compaction.curve), a bounded part per "
                   "round; without --once, exits when none is left")  # fmt: skip

    r = sub.add_parser("run", help="the stream and the compactor side by side in one process (local use)")
    r.add_argument("--max-batches", type=_positive_int, help="stop after this many micro-batches")

    v = sub.add_parser("vacuum", help="delete files no table version within the retention period references")
    v.add_argument("--retention", type=_whole_hours, metavar="HOURS",
                   help="retention in hours (default vacuum.retention_hours)")  # fmt: skip
    v.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    v.add_argument("--force", action="store_true", help="allow a retention below 168 hours")

    sub.add_parser("config", help="print the effective, validated configuration (secrets redacted)")

    b = sub.add_parser("boundaries", help="print the current boundaries of the clustering columns")
    b.add_argument("--k", type=_int_in(1, MAX_BOUNDARIES_SHOWN),
                   help=f"number of boundaries, 1..{MAX_BOUNDARIES_SHOWN} (default sketches.boundaries)")  # fmt: skip

    i = sub.add_parser("index", help="the column-stats index: sync, rebuild, show (docs/index.md)")
    isub = _with_output_options(i.add_subparsers(dest="index_command", metavar="ACTION", required=True))
    isub.add_parser("sync", help="apply the commits since the index's version (rebuilds when it must)")
    isub.add_parser("rebuild", help="build the index from the Delta log from scratch")
    show = isub.add_parser("show", help="the index's version, files, and one column's stats")
    show.add_argument("--column", help="print this column's per-file stats")
    show.add_argument("--limit", type=_positive_int, default=20, help="most rows printed with --column")

    e = sub.add_parser("explain", help="files a where-clause must read and how many it skips, per conjunct")
    e.add_argument("--where", required=True, help="e.g. \"s_city = 'UNITED KI1' AND d_year >= 1995\"")
    fresh = e.add_mutually_exclusive_group()
    fresh.add_argument("--sync", action="store_true",
                       help="write: bring the stored index up to date first (default: read the commits it lacks "
                       "from the Delta log, write nothing)")  # fmt: skip
    fresh.add_argument("--no-sync", action="store_true", help=argparse.SUPPRESS)  # the default now; still accepted

    h = sub.add_parser("history", help="the table's versions, newest first: operation, service, files, rows and "
                       "bytes added and removed, duration")  # fmt: skip
    h.add_argument("--limit", type=_int_in(1, 100_000), default=20, metavar="N",
                   help="the newest N versions (default 20)")  # fmt: skip

    st = sub.add_parser("status", help="one screen about the table: files, clustering, index, compaction, vacuum, lag")
    st.add_argument("--lag-timeout", type=_float_in(0.1, 300), default=5.0, metavar="SECONDS",
                    help="how long to wait for the brokers when measuring consumer lag (default 5)")  # fmt: skip

    rp = sub.add_parser("report", help="an HTML page with plots of the table's layout (file sizes, key ranges, ...)")
    rp.add_argument("--out", required=True, metavar="DIR", help="directory for index.html and report.json")
    rp.add_argument("--force", action="store_true", help="replace a report (or a file) already at --out")

    tu = sub.add_parser("tune", help="predict files read and bytes rewritten for a grid of compaction thresholds, "
                        "or the best layout for a workload of queries")
    tu.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="a threshold and its values, e.g. target_file_bytes=64MiB,128MiB (repeatable; "
                    "default: half/current/double target_file_bytes x merge_fanout)")  # fmt: skip
    source = tu.add_mutually_exclusive_group()
    source.add_argument("--queries", metavar="FILE", help="a file of the workload's WHERE clauses, one per line: "
                        "recommend clustering columns, weights and partitioning for it")  # fmt: skip
    source.add_argument("--from-workload", action="store_true",
                        help="recommend them for the workload the query listener captured (docs/workload.md), each "
                        "distinct query weighted by its scans")  # fmt: skip
    tu.add_argument("--since", type=_age, metavar="AGE",
                    help="with --from-workload: only queries of the last AGE, e.g. 7d, 12h (default "
                    "compaction.auto_layout_window_s, a week)")  # fmt: skip
    tu.add_argument("--keep-columns", action="store_true",
                    help="with --queries or --from-workload: keep the table's clustering columns and partitioning, "
                    "only choose the columns' weights (compaction.column_weights) for the workload")  # fmt: skip
    tu.add_argument("--min-gain", type=_float_in(0, 1), metavar="SHARE",
                    help="with --queries or --from-workload: recommend a layout only when it reads at least this "
                    "share fewer files per query than the current one (default 0.02: a re-cluster for less is not "
                    "worth it)")  # fmt: skip
    tu.add_argument("--objective", choices=("mean", "no-query-worse"), default="mean",  # advise.OBJECTIVES
                    help="with --queries or --from-workload: what the recommended layout minimises. mean (default): "
                    "the files a query reads on average; no-query-worse: first the queries that would read more "
                    "files than on the layout Delta's own clustering (a Z-order or Hilbert curve on equal bits) "
                    "gives the table's clustering columns, then the mean (docs/tuning.md)")  # fmt: skip
    tu.add_argument("--sample-rows", type=_positive_int, default=200_000, metavar="N",
                    help="rows of the table --queries scores layouts on (default 200000)")  # fmt: skip
    tu.add_argument("--out", metavar="DIR", help="also write DIR/tune.html with the plots")
    tu.add_argument("--force", action="store_true", help="replace DIR/tune.html (or a file at DIR) if there is one")

    wl = sub.add_parser("workload", help="the queries the listener captured on the table: top predicate shapes, files "
                        "read per query and per day (docs/workload.md)")  # fmt: skip
    wl.add_argument("--listener-conf", action="store_true",
                    help="print the Spark settings that make any application capture its queries of Delta tables "
                    "(spark.jars and spark.sql.queryExecutionListeners), and exit")  # fmt: skip
    wl.add_argument("--since", type=_age, metavar="AGE",
                    help="only queries of the last AGE, e.g. 7d, 12h, 30m (default workload.retention_days)")
    wl.add_argument("--top", type=_int_in(1, 1000), default=10, metavar="N", help="shapes shown (default 10)")
    wl.add_argument("--import-eventlog", nargs="+", metavar="PATH",
                    help="import the table's scans from Spark event logs (a log file, an eventlog_v2_ folder, or "
                    "a spark.eventLog.dir folder) of applications without the listener, then exit; importing a log "
                    "again adds nothing")  # fmt: skip
    wl.add_argument("--expire", action="store_true",
                    help="first delete capture files older than workload.retention_days or beyond workload.max_bytes "
                    "(the compactor does it on its vacuum schedule)")  # fmt: skip

    pr = sub.add_parser("produce", help="send the built-in generator's records as JSON or Avro to the Kafka topic "
                                        "(demos)")  # fmt: skip
    pr.add_argument("--format", choices=["json", "avro"], default=None,
                    help="json, or avro in the Confluent wire format with its schema registered in "
                         "[source.kafka.schema_registry] (default: source.kafka.format)")  # fmt: skip
    pr.add_argument("--rate", type=_positive_int, default=1000, help="records per second (default 1000)")
    pr.add_argument("--records", type=_int_in(0, 2**62), default=0,
                    help="stop after this many (default 0: until stopped)")  # fmt: skip
    pr.add_argument("--malformed-every", type=_int_in(0, 2**62), default=0, metavar="N",
                    help="make every N-th record malformed, to see the quarantine work (default 0: none)")  # fmt: skip
    return p


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr, naming the flag and pointing at ``--help``; exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _whole_hours(text: str) -> float:
    """``vacuum --retention``: whole hours >= 0 (Delta's VACUUM rounds fractions: 0.4 h would be 0)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number of hours >= 0, got {text!r} (Delta's VACUUM "
                                         "rounds fractions: 0.4 h would become 0)")  # fmt: skip
    return value


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def _age(text: str) -> float:
    """``--since``: a number and a unit (s, m, h, d), e.g. 7d; seconds."""
    unit = _AGE_UNITS.get(text[-1:].lower())
    try:
        value = float(text[:-1]) * unit if unit else -1.0
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected an age such as 7d, 12h, 30m or 90s, got {text!r}")
    return value


def _int_in(low: int, high: int) -> Callable[[str], int]:
    """A flag's type: a whole number from ``low`` to ``high``."""
    return _in_range(int, low, high, f"a whole number in {low}..{high}")


def _float_in(low: float, high: float) -> Callable[[str], float]:
    """A flag's type: a number from ``low`` to ``high`` (NaN and infinities are outside)."""
    return _in_range(float, low, high, f"a number in {low:g}..{high:g}")


def _in_range(kind: Callable[[str], _N], low: _N, high: _N, expected: str) -> Callable[[str], _N]:
    def parse(text: str) -> _N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def _output_options(p: argparse.ArgumentParser) -> None:
    """``--output text|json`` and ``--json``, accepted before or after the subcommand."""
    p.add_argument("--output", "-o", choices=["text", "json"], default=argparse.SUPPRESS,
                   help="format of results (default text)")  # fmt: skip
    p.add_argument("--json", dest="output", action="store_const", const="json", default=argparse.SUPPRESS,
                   help="same as --output json")  # fmt: skip


def _with_output_options(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """Subparsers whose every parser takes the output options."""
    add_parser = sub.add_parser

    def add(name: str, **kwargs: object) -> argparse.ArgumentParser:
        parser = add_parser(name, **kwargs)  # type: ignore[arg-type]
        _output_options(parser)
        return parser

    sub.add_parser = add  # type: ignore[method-assign]
    return sub


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (no command: help on stderr, 2)."""
    p = parser()
    args = p.parse_args(argv)
    if args.command is None:
        p.print_help(sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kafka-python (start-up checks, admin, lag) warns about its own event loop, reconnects and slow
    # polls on a busy machine; what matters to the user reaches them as lakecluster's errors.
    debugging = args.debug or args.log_level == "DEBUG"
    logging.getLogger("kafka").setLevel(logging.NOTSET if debugging else logging.ERROR)
    if args.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    # Long phases (jars, Spark's start, a vacuum) say how they go on stderr; beside JSON logs they
    # are INFO records of lakecluster.progress.
    progress.set_sink(_progress_line if args.log_format == "text" else None)
    context: Context | None = None
    try:
        overrides = parse_overrides(args.set)
        if args.debug:  # the JVM's own reports too, unless the configuration says otherwise
            overrides.setdefault("spark.log_level", '"warn"')
        context = Context(args, load_config(args.config, overrides=overrides))
        context.follow_table_clustering()
        context.check()
        return COMMANDS[args.command](context)
    except InputError as e:
        return _fail(args, e, e.one_line(), 2)
    except LakeclusterError as e:
        return _fail(args, e, _storage_cause(e, context) or f"{type(e).__name__}: {e}", 1)
    except BrokenPipeError:
        quiet_broken_pipe()
        return 141
    except KeyboardInterrupt:
        print("lakecluster: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if (cause := _storage_cause(e, context)) is not None:
            return _fail(args, e, cause, 1)
        return _fail(args, e, f"unexpected {type(e).__name__}: {_first_line(str(e))} (run with --debug for the trace)",
                     1)  # fmt: skip


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        import datetime
        import json

        data = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


def entry() -> NoReturn:
    """The ``lakecluster`` executable: run :func:`main`, then leave without finalising the interpreter.

    Everything the process owns is closed by then (the session stopped, files written, the JVM
    exits on its own when its stdin closes). Finalisation would only add seconds and nanobind's
    report about datasketches objects still referenced at shutdown to stderr.
    """
    code = main()
    class_archive.finish()  # a first start's class archive, written by the JVM as it exits
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = 141
    logging.shutdown()
    os._exit(code)


def _progress_line(line: str) -> None:
    sys.stderr.write(f"lakecluster: {line}\n")  # one write: lines of other threads never land inside it
    sys.stderr.flush()


def _fail(args: argparse.Namespace, error: BaseException, message: str, status: int) -> int:
    """Print the one-line message (after the trace with ``--debug``); returns ``status``."""
    if args.debug:
        traceback.print_exception(error)
    print(f"lakecluster: {message}", file=sys.stderr, flush=True)
    return status


def _storage_cause(error: BaseException, context: Context | None) -> str | None:
    """The message of an object-store failure of the table, naming its cause; None for other failures."""
    if context is None:
        return None
    found = failures.storage_error(error, context.table.uri, context.table.storage)
    return None if found is None else f"{type(found).__name__}: {found}"


def _first_line(text: str) -> str:
    """The first non-blank line of an unexpected error's text, at most 300 characters."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return text[:300]
