"""The subcommands. Read-only ones (``status``, ``compact --dry-run`` (with ``--where`` or ``--full``
too), ``explain`` without ``--sync``, ``boundaries``, ``tune``, ``report``, ``index show``, ``vacuum
--dry-run``, ``workload`` without ``--expire`` or ``--import-eventlog``, ``config``) never write to
the table; a missing table is a one-line error, raised before Spark starts. ``config`` does not look
at the table at all. Everything that can be checked without Spark (metrics port, table location,
schema, broker) is checked before Spark starts."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

from lakecluster import metrics
from lakecluster.cli.context import Context
from lakecluster.cli.output import emit
from lakecluster.config import Config, describe
from lakecluster.errors import (
    ConfigError,
    FatalServiceError,
    LakeclusterError,
    PredicateError,
    TableNotFoundError,
    UsageError,
)
from lakecluster.sizes import human_bytes
from lakecluster.table import LakeTable


def _serve_metrics(config: Config, table: LakeTable) -> str:
    """Start the metrics endpoint (``metrics.host``:``metrics.port``), its series labelled with the
    table's name; a port in use is a one-line error. Returns where it listens, for the service's
    first line."""
    try:
        port = metrics.serve(config.metrics.port, config.metrics.host, table=table.name)
    except OSError as e:
        raise LakeclusterError(
            f"cannot serve metrics on {config.metrics.host}:{config.metrics.port} ({e.strerror or e}): set "
            "metrics.port to a free port, or 0 to turn metrics off"
        ) from None
    if port is None:
        return "metrics off (metrics.port = 0)"
    return f"metrics on http://{config.metrics.host}:{port}/metrics"


def _reloader(args: argparse.Namespace) -> Any:
    """The compactor's view of the configuration as it is now: the same file, environment and flags."""
    from lakecluster.compaction.reload import ThresholdReloader
    from lakecluster.config import load_config, parse_overrides

    return ThresholdReloader(lambda: load_config(args.config, overrides=parse_overrides(args.set)), args.config)


def _on_sighup(reload: Any) -> None:
    """SIGHUP re-reads the compaction thresholds (docs/operations.md, "Changing thresholds")."""
    import signal

    signal.signal(signal.SIGHUP, lambda *_: reload())


def _progress(args: argparse.Namespace, config: Config) -> bool:
    """Progress lines on stdout: ``stream.progress``, except beside JSON logs (one object a line)."""
    return config.stream.progress and getattr(args, "log_format", "text") == "text"


def _print(line: str) -> None:
    print(line, flush=True)


def _existing(table: LakeTable) -> LakeTable:
    """The table, which must exist (read-only commands never create one): checked before Spark starts."""
    if not table.delta.exists():
        raise TableNotFoundError(table.uri)
    return table


def _index_sync(table: LakeTable) -> object:
    from lakecluster.index.sync import sync

    return sync(table)


def _say(args: argparse.Namespace, line: str) -> None:
    """A service's start and stop line: printed, or logged beside JSON logs (stdout stays quiet)."""
    if getattr(args, "log_format", "text") == "json":
        logging.getLogger("lakecluster.cli").info(line)
    else:
        _print(line)


def stream(ctx: Context) -> int:
    """``lakecluster stream``: ingest until stopped (checks run in ``StreamJob.run`` before Spark)."""
    from lakecluster.shutdown import MARGIN_S, install_signal_handlers
    from lakecluster.stream.job import StreamJob, progress_printer

    args, config = ctx.args, ctx.config
    served = _serve_metrics(config, ctx.table)
    _say(args, f"lakecluster stream: {ctx.source.describe()} -> {ctx.table.uri}, {served} "
               "(Ctrl-C stops after the current batch)")  # fmt: skip
    job = StreamJob(config, table=ctx.table, source=ctx.source, available_now=args.available_now,
                    max_batches=args.max_batches, index_sync=_index_sync)  # fmt: skip
    if _progress(args, config):
        job.on_batch = progress_printer(lag=job.total_lag)
    install_signal_handlers(job.request_stop, what="micro-batch", deadline_s=config.stream.stop_timeout_s + MARGIN_S)
    reports = job.run()
    rows = sum(r.rows for r in reports)
    _say(args, f"lakecluster stream: stopped after {len(reports)} batch(es), {rows:,} rows committed")
    return 0


def _where_scope(table: LakeTable, where: str) -> Callable[[], list[str]]:
    """``compact --where``: a function giving the paths of the files whose partition values and stats
    can match ``where``, from the column-stats index and the commits it lacks (writes nothing).
    Called once here, so a predicate that does not parse is a usage error before anything runs."""
    from lakecluster.index.prune import prune

    def scope() -> list[str]:
        return prune(table, where, index="latest").paths

    try:
        scope()
    except PredicateError as e:
        e.source = "--where"
        raise
    return scope


def compact(ctx: Context) -> int:
    """``lakecluster compact``: the table must exist (opened before anything else); ``--dry-run`` plans
    only; ``--where`` limits it to the files that can match; ``--full`` re-clusters after a layout change."""
    from lakecluster.compaction.loop import Compactor, describe_plan
    from lakecluster.compaction.planner import Group
    from lakecluster.shutdown import MARGIN_S, install_signal_handlers

    args, config = ctx.args, ctx.config
    scope = _where_scope(_existing(ctx.table), args.where) if args.where is not None else None
    compactor = Compactor(config, table=ctx.table, scope=scope, full=args.full)
    if args.dry_run:
        the_plan = compactor.plan()
        # Once per partition: the text and the JSON count each group's files alike.
        rates = {g.partition: compactor.compacted_bytes_per_row(g.partition_values) for g in the_plan.groups}

        def per_row(group: Group) -> float | None:
            return rates[group.partition]

        data: dict[str, Any] = {"table_version": the_plan.table_version, "groups": [
            {"partition": dict(g.partition), "files": [f.path for f in g.files], "bytes": g.bytes, "rows": g.rows,
             "generation": g.generation, "reason": g.reason,
             "expected_files": g.expected_files(config.compaction.target_file_bytes, per_row(g))}
            for g in the_plan.groups]}  # fmt: skip
        data["bytes"] = sum(g.bytes for g in the_plan.groups)
        if args.where is not None:
            data["where"] = args.where
        if args.full:
            data["full"] = {"layout": compactor.fingerprint, "files_left": the_plan.relayout_files,
                            "bytes_left": the_plan.relayout_bytes}  # fmt: skip
        text = describe_plan(the_plan, config.compaction.target_file_bytes, full=args.full, where=args.where,
                             bytes_per_row=per_row)  # fmt: skip
        emit(data, text, args.output)
        return 0
    served = _serve_metrics(config, ctx.table)
    install_signal_handlers(compactor.request_stop, what="group",
                            deadline_s=config.compaction.stop_timeout_s + MARGIN_S)  # fmt: skip
    compactor.reloader = _reloader(args)
    _on_sighup(compactor.request_reload)
    if args.once:
        results = compactor.run_once()
        for res in results:
            print(res.describe(), flush=True)
        conflicts = sum(1 for res in results if res.result == "conflict")
        committed = sum(1 for res in results if res.result == "committed")
        print(f"lakecluster compact: {committed} group(s) committed, {conflicts} conflict(s)", flush=True)
        if args.full:
            files, size = compactor.relayout_left()
            print(f"lakecluster compact --full: {files} file(s), {human_bytes(size)} left on other layouts"
                  + (" (run it again to go on)" if files else ""), flush=True)  # fmt: skip
        return 3 if conflicts else 0
    what = "until every file is clustered under the current layout" if args.full else \
        f"every {config.compaction.interval_s:g}s"
    _say(args, f"lakecluster compact{' --full' if args.full else ''}: {ctx.table.uri} {what}, {served} "
               "(Ctrl-C stops after the current group)")  # fmt: skip
    if _progress(args, config):
        compactor.on_progress = _print
    compactor.run_forever()
    if args.full and not compactor.stopping:
        _say(args, "lakecluster compact --full: done, every file is clustered under the current layout "
                   f"({', '.join(config.table.clustering_columns)}; {config.compaction.curve}); exiting")  # fmt: skip
    return 0


def run(ctx: Context) -> int:
    """The stream in the main thread, the compactor in a background thread, one SparkContext and
    one table handle.

    Either one failing for good stops the other and the process exits non-zero.
    """
    from lakecluster.compaction.background import BackgroundCompactor
    from lakecluster.health import HEALTH
    from lakecluster.shutdown import MARGIN_S, install_signal_handlers
    from lakecluster.spark import get_session
    from lakecluster.stream.job import HEALTH_NAME, StreamJob, preflight, progress_printer

    args, config, table = ctx.args, ctx.config, ctx.table
    served = _serve_metrics(config, ctx.table)
    preflight(table, ctx.source)  # an unwritable location, a schema mismatch, no broker: before Spark starts
    _say(args, f"lakecluster run: {ctx.source.describe()} -> {table.uri}, compacting every "
               f"{config.compaction.interval_s:g}s, {served} (Ctrl-C stops both)")  # fmt: skip
    spark = get_session(config.spark, config.storage, s3=table.uses_s3)
    job = StreamJob(config, table=table, source=ctx.source, spark=spark, max_batches=args.max_batches,
                    index_sync=_index_sync)  # fmt: skip
    progress = _progress(args, config)
    if progress:
        job.on_batch = progress_printer(lag=job.total_lag)
    # The stream's first micro-batch (or its idle source) before any vacuum: on a few cores a vacuum
    # beside it would delay the first rows.
    compactor = BackgroundCompactor(config, spark, on_failure=lambda _: job.request_stop(), reloader=_reloader(args),
                                    on_progress=_print if progress else None, table=table,
                                    vacuum_allowed=lambda: HEALTH.is_ready(HEALTH_NAME))  # fmt: skip
    job.on_started = compactor.start
    _on_sighup(compactor.request_reload)
    stop_timeout_s = max(config.stream.stop_timeout_s, config.compaction.stop_timeout_s)

    def stop_both() -> None:
        compactor.stop(timeout_s=0)  # asks only: the main thread waits for it below
        job.request_stop()

    install_signal_handlers(stop_both, what="micro-batch and group", deadline_s=stop_timeout_s + MARGIN_S)
    try:
        reports = job.run()
    finally:
        compactor.stop(timeout_s=stop_timeout_s)
    if compactor.failure is not None:
        error = compactor.failure
        if isinstance(error, LakeclusterError):
            raise FatalServiceError(f"the compactor stopped: {error}")
        raise FatalServiceError(f"the compactor stopped: {type(error).__name__}: {error}")
    _say(args, f"lakecluster run: stopped after {len(reports)} batch(es), {sum(r.rows for r in reports):,} rows")
    return 0


def vacuum(ctx: Context) -> int:
    """``lakecluster vacuum``: the table and its quarantine table; ``--dry-run`` lists only."""
    from lakecluster.compaction.erasure import expire_quarantine
    from lakecluster.compaction.vacuum import check_whole_hours, vacuum_all
    from lakecluster.config import MIN_RETENTION_HOURS
    from lakecluster.spark import get_session

    args, config = ctx.args, ctx.config
    table = _existing(ctx.table)  # a missing table is an error before Spark starts
    hours = config.vacuum.retention_hours if args.retention is None else args.retention
    check_whole_hours(hours)
    force = args.force or config.vacuum.force
    if hours < MIN_RETENTION_HOURS and not force:
        raise UsageError(
            "--retention" if args.retention is not None else "vacuum.retention_hours",
            f"retention {hours:g} h is below {MIN_RETENTION_HOURS:g} h: files a running rewrite or a slow reader "
            "still needs could be deleted; add --force if you are sure"
        )

    def session() -> Any:  # started only for a table with a file old enough to go
        return get_session(config.spark, config.storage, s3=table.uses_s3).newSession()

    if not args.dry_run:  # quarantined records past their retention go first, as in the compactor's vacuums
        expire_quarantine(session, table, config.vacuum.quarantine_retention_days)
    reports = vacuum_all(session, table, config.vacuum, retention_hours=hours, force=force, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    lines = []
    for r in reports:
        why = f"; {r.skipped}" if r.skipped else ""
        lines.append(f"{r.table}: {verb} {r.files:,} file(s), {human_bytes(r.bytes)} "
                     f"(retention {r.retention_hours:g} h{why})")
        lines.extend(f"  {p}" for p in r.paths[:50])
        if len(r.paths) > 50:
            lines.append(f"  ... and {len(r.paths) - 50:,} more (--output json lists all)")
    emit([r.__dict__ for r in reports], "\n".join(lines), args.output)
    return 0


def show_config(ctx: Context) -> int:
    """``lakecluster config``: the effective configuration, secrets redacted (JSON in both formats)."""
    import json

    data = describe(ctx.config)
    emit(data, json.dumps(data, indent=2), ctx.output)
    return 0


def boundaries(ctx: Context) -> int:
    """``lakecluster boundaries``: the newest boundary sketches of the clustering columns."""
    args, config = ctx.args, ctx.config
    latest = _existing(ctx.table).sketches().latest()
    if latest is None:
        raise LakeclusterError("no boundary sketches yet: the stream writes them with every micro-batch")
    k = args.k or config.sketches.boundaries
    result: dict[str, Any] = {
        "delta_version": latest.delta_version,
        "stream_txn_version": latest.stream_batch_id,
        "columns": {
            name: {"n": s.n, "nulls": s.nulls, "nans": s.nans, "exact": s.is_exact,
                   "rank_error": s.normalized_rank_error(), "boundaries": latest.boundaries(name, k).edges.tolist()}
            for name, s in latest.sketches.items()
        },
    }  # fmt: skip
    lines = [f"boundary sketches at Delta version {result['delta_version']}"]
    for name, c in result["columns"].items():
        edges = c["boundaries"]
        shown = ", ".join(map(str, [*edges[:3], "...", *edges[-2:]])) if len(edges) > 5 else ", ".join(map(str, edges))
        lines.append(f"  {name}: n={c['n']:,} nulls={c['nulls']} nans={c['nans']} boundaries={len(edges)} [{shown}]")
    emit(result, "\n".join(lines), args.output)
    return 0


def index(ctx: Context) -> int:
    """``lakecluster index sync|rebuild|show``: the column-stats index of an existing table."""
    from lakecluster.index.show import show
    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import rebuild, sync

    args = ctx.args
    spec = IndexSpec.of(_existing(ctx.table))
    if args.index_command in ("sync", "rebuild"):
        res = sync(spec) if args.index_command == "sync" else rebuild(spec)
        start = "" if res.from_version is None else f"{res.from_version} -> "
        text = (
            f"index {res.mode}: version {start}{res.to_version}, {res.files_added} file(s) added, "
            f"{res.files_removed} removed in {res.seconds:.2f}s" + (f" ({res.reason})" if res.reason else "")
        )
        emit(res.__dict__, text, args.output)  # fmt: skip
        return 0
    try:
        info = show(spec, args.column, args.limit)
    except PredicateError as e:  # an unknown --column
        e.source = "--column"
        raise
    emit(info, info["text"], args.output)
    return 0


def explain(ctx: Context) -> int:
    """``lakecluster explain --where``: files a predicate must read, from the column-stats index and
    the commits it lacks (read from the log; the index is written only with ``--sync``)."""
    from lakecluster.index.explain import explain as run_explain
    from lakecluster.index.explain import format_text
    from lakecluster.index.spec import IndexSpec

    args = ctx.args
    if args.no_sync:  # the old flag asked for what is now the default; scripts using it keep working
        print("lakecluster: explain --no-sync is the default now (explain writes nothing; --sync updates the "
              "index first); drop the flag", file=sys.stderr, flush=True)  # fmt: skip
    try:
        rep = run_explain(IndexSpec.of(_existing(ctx.table)), args.where, sync=args.sync)
    except PredicateError as e:
        e.source = "--where"
        raise
    emit(rep, format_text(rep), args.output)
    return 0


def status(ctx: Context) -> int:
    """``lakecluster status``: the table's health in one screen (``--json`` for scripts)."""
    from lakecluster.cli.status import format_text, table_status

    data = table_status(ctx.table, ctx.source, lag_timeout_s=ctx.args.lag_timeout)
    emit(data, format_text(data), ctx.output)
    return 0


def report(ctx: Context) -> int:
    """``lakecluster report --out DIR``: the table's layout as an HTML page with plots."""
    from pathlib import Path

    from lakecluster.cli.report import writable_out, write

    out = Path(ctx.args.out)
    writable_out(out, force=ctx.args.force)
    page = write(_existing(ctx.table), ctx.source, out)  # a missing table is a one-line error
    emit({"page": str(page)}, f"lakecluster report: {page}", ctx.output)
    return 0


def tune(ctx: Context) -> int:
    """``lakecluster tune``: the planner replayed over the table for a grid of thresholds; with
    ``--queries``, candidate layouts scored on the workload's predicates."""
    from pathlib import Path

    from lakecluster.cli.report import writable_out
    from lakecluster.cli.tune import advise, advise_captured, format_advice, format_text, write_page
    from lakecluster.cli.tune import tune as run_tune
    from lakecluster.layout.search import MIN_GAIN

    args, table = ctx.args, ctx.table
    if args.since is not None and not args.from_workload:
        raise UsageError("--since", "applies to --from-workload only")
    if args.min_gain is not None and not (args.queries or args.from_workload):
        raise UsageError("--min-gain", "applies to --queries and --from-workload only")
    min_gain = MIN_GAIN if args.min_gain is None else args.min_gain
    if args.out:  # before the work: refused at once
        writable_out(Path(args.out), force=args.force, names=("tune.html",))
    data: dict[str, object] = {}
    texts = []
    thresholds = workload = None
    if args.queries:
        workload = data["workload"] = advise(table, args.queries, args.sample_rows, keep_columns=args.keep_columns,
                                             min_gain=min_gain, objective=args.objective)  # fmt: skip
        texts.append(format_advice(workload))
    elif args.from_workload:
        workload = data["workload"] = advise_captured(_existing(table), args.since, args.sample_rows,
                                                           keep_columns=args.keep_columns, min_gain=min_gain,
                                                           objective=args.objective)  # fmt: skip
        texts.append(format_advice(workload))
    if args.grid or not (args.queries or args.from_workload):
        thresholds = data["thresholds"] = run_tune(table, args.grid)
        texts.append(format_text(thresholds))
    text = "\n\n".join(texts)
    if args.out:
        page = write_page(Path(args.out), thresholds, workload)
        data["page"] = str(page)
        text += f"\nplot: {page}"
    emit(data, text, args.output)
    return 0


def history(ctx: Context) -> int:
    """``lakecluster history``: the newest versions of an existing table, from its log alone."""
    from lakecluster.cli.history import format_text
    from lakecluster.cli.history import history as read_history

    data = read_history(_existing(ctx.table), ctx.args.limit)
    emit(data, format_text(data), ctx.output)
    return 0


def workload(ctx: Context) -> int:
    """``lakecluster workload``: what the query listener captured on the table; with
    ``--listener-conf``, the settings that turn the listener on in an application; with
    ``--import-eventlog``, the table's scans imported from Spark event logs."""
    from lakecluster.cli.workload import format_listener_conf, format_text, summary
    from lakecluster.workload.capture import expire, read_capture
    from lakecluster.workload.listener import listener_conf, listener_jar

    args, config = ctx.args, ctx.config
    if args.listener_conf:
        conf = listener_conf(config.workload, listener_jar(config.spark))
        emit(conf, format_listener_conf(conf), ctx.output)
        return 0
    table = _existing(ctx.table)
    if args.import_eventlog:
        from lakecluster.cli.workload import format_import
        from lakecluster.workload.eventlog_import import import_eventlogs

        report = import_eventlogs(table, args.import_eventlog, config.workload)
        emit(report.as_dict(), format_import(report), ctx.output)
        return 0
    expired = expire(table, config.workload) if args.expire else None
    since = args.since if args.since is not None else config.workload.retention_s
    data = summary(read_capture(table, config.workload, since_s=since), table=table.uri, since_s=since, top=args.top)
    text = format_text(data)
    if expired is not None:
        data["expired"] = expired.__dict__
        text = (f"expired {expired.files:,} capture file(s), {human_bytes(expired.bytes)}; kept "
                f"{expired.kept_files:,}, {human_bytes(expired.kept_bytes)}\n{text}")  # fmt: skip
    emit(data, text, ctx.output)
    return 0


def produce(ctx: Context) -> int:
    """``lakecluster produce``: generator records as JSON or Avro into ``source.kafka.topics[0]``
    until stopped."""
    import signal
    import threading

    from lakecluster.stream.kafka_source import KafkaSource
    from lakecluster.stream.produce import produce as send

    args, config, source = ctx.args, ctx.config, ctx.source
    if not isinstance(source, KafkaSource) or not source.settings.topics:
        raise ConfigError("source.kind", "produce needs source.kind = \"kafka\" and source.kafka.topics "
                          "(the topic to fill)")  # fmt: skip
    avro = (args.format or config.source.kafka.format) == "avro"
    if avro and not config.source.kafka.schema_registry.urls:
        raise ConfigError("source.kafka.schema_registry.url", "produce --format avro registers its schema there: "
                          "set the schema registry's URL")  # fmt: skip
    source.check()  # an unreachable broker or a missing topic: one line, now
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    topic = config.source.kafka.topics[0]
    print(f"lakecluster produce: {args.rate:,} records/s -> {config.source.kafka.bootstrap_servers} {topic} "
          "(Ctrl-C stops)", flush=True)  # fmt: skip
    sent = send(config, rate=args.rate, records=args.records, malformed_every=args.malformed_every, stop=stop,
                avro=avro)  # fmt: skip
    emit({"records": sent, "topic": topic}, f"lakecluster produce: {sent:,} records sent to {topic}", args.output)
    return 0
