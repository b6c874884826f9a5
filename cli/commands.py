"""The subcommands. Read-only ones (``compact --dry-run``, ``explain``, ``boundaries``, ``index show``,
``vacuum --dry-run``) never create anything: a missing table is a one-line error, raised before Spark
starts. ``config`` does not look at the table at all. Everything that can be checked without Spark
(metrics port, table location, schema, broker) is checked before Spark starts."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from lakecluster import metrics
from lakecluster.cli.output import emit
from lakecluster.config import Config, describe
from lakecluster.errors import FatalServiceError, LakeclusterError
from lakecluster.table import open_table


def _serve_metrics(config: Config) -> None:
    """Start the metrics endpoint (``metrics.host``:``metrics.port``); a port in use is a one-line error."""
    try:
        metrics.serve(config.metrics.port, config.metrics.host)
    except OSError as e:
        raise LakeclusterError(
            f"cannot serve metrics on {config.metrics.host}:{config.metrics.port} ({e.strerror or e}): set "
            "metrics.port to a free port, or 0 to turn metrics off"
        ) from None


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


def _say(args: argparse.Namespace, line: str) -> None:
    """A service's start and stop line: printed, or logged beside JSON logs (stdout stays quiet)."""
    if getattr(args, "log_format", "text") == "json":
        logging.getLogger("lakecluster.cli").info(line)
    else:
        _print(line)


def stream(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster stream``: ingest until stopped (checks run in ``StreamJob.run`` before Spark)."""
    from lakecluster.stream.job import StreamJob, install_signal_handlers, progress_printer

    _serve_metrics(config)
    source = config.source
    what = "generator" if source.kind == "generator" else f"kafka {source.kafka.bootstrap_servers}"
    _say(args, f"lakecluster stream: {what} -> {config.table.path} (Ctrl-C stops after the current batch)")
    job = StreamJob(config, available_now=args.available_now, max_batches=args.max_batches)
    if _progress(args, config):
        job.on_batch = progress_printer(lag=job.total_lag)
    install_signal_handlers(job)
    reports = job.run()
    rows = sum(r.rows for r in reports)
    _say(args, f"lakecluster stream: stopped after {len(reports)} batch(es), {rows:,} rows committed")
    return 0


def compact(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster compact``: the table must exist (opened before anything else); ``--dry-run`` plans only."""
    from lakecluster.compaction.loop import Compactor, describe_plan
    from lakecluster.stream.job import install_signal_handlers

    compactor = Compactor(config)
    if args.dry_run:
        the_plan = compactor.plan()
        data = {"table_version": the_plan.table_version, "groups": [
            {"partition": dict(g.partition), "files": [f.path for f in g.files], "bytes": g.bytes, "rows": g.rows,
             "generation": g.generation, "reason": g.reason,
             "expected_files": g.expected_files(config.compaction.target_file_bytes)}
            for g in the_plan.groups]}  # fmt: skip
        emit(data, describe_plan(the_plan, config.compaction.target_file_bytes), args.output)
        return 0
    _serve_metrics(config)
    install_signal_handlers(compactor, what="group")
    compactor.reloader = _reloader(args)
    _on_sighup(compactor.request_reload)
    if args.once:
        results = compactor.run_once()
        for res in results:
            print(res.describe(), flush=True)
        conflicts = sum(1 for res in results if res.result == "conflict")
        committed = sum(1 for res in results if res.result == "committed")
        print(f"lakecluster compact: {committed} group(s) committed, {conflicts} conflict(s)", flush=True)
        return 3 if conflicts else 0
    _say(args, f"lakecluster compact: {config.table.path} every {config.compaction.interval_s:g}s "
               "(Ctrl-C stops after the current group)")  # fmt: skip
    if _progress(args, config):
        compactor.on_progress = _print
    compactor.run_forever()
    return 0


def run(args: argparse.Namespace, config: Config) -> int:
    """The stream in the main thread, the compactor in a background thread, one SparkContext.

    Either one failing for good stops the other and the process exits non-zero.
    """
    from lakecluster.compaction.loop import BackgroundCompactor
    from lakecluster.spark import get_session
    from lakecluster.stream.job import StreamJob, install_signal_handlers, preflight, progress_printer

    _serve_metrics(config)
    preflight(config)  # an unwritable location, a schema mismatch, no broker: before Spark starts
    spark = get_session(config.spark, config.storage, s3=config.uses_s3)
    job = StreamJob(config, spark=spark, max_batches=args.max_batches)
    progress = _progress(args, config)
    if progress:
        job.on_batch = progress_printer(lag=job.total_lag)
    compactor = BackgroundCompactor(config, spark, on_failure=lambda _: job.request_stop(), reloader=_reloader(args),
                                    on_progress=_print if progress else None)  # fmt: skip
    job.on_started = compactor.start
    _on_sighup(compactor.request_reload)
    install_signal_handlers(job)
    _say(args, f"lakecluster run: {config.source.kind} -> {config.table.path}, compacting every "
               f"{config.compaction.interval_s:g}s (Ctrl-C stops both)")  # fmt: skip
    try:
        reports = job.run()
    finally:
        compactor.stop()
    if compactor.failure is not None:
        error = compactor.failure
        if isinstance(error, LakeclusterError):
            raise FatalServiceError(f"the compactor stopped: {error}")
        raise FatalServiceError(f"the compactor stopped: {type(error).__name__}: {error}")
    _say(args, f"lakecluster run: stopped after {len(reports)} batch(es), {sum(r.rows for r in reports):,} rows")
    return 0


def vacuum(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster vacuum``: the table and its quarantine table; ``--dry-run`` lists only."""
    from lakecluster.compaction.vacuum import check_whole_hours, vacuum_all
    from lakecluster.config import MIN_RETENTION_HOURS
    from lakecluster.spark import get_session

    open_table(config.table.path)  # a missing table is an error before Spark starts
    hours = config.vacuum.retention_hours if args.retention is None else args.retention
    check_whole_hours(hours)
    force = args.force or config.vacuum.force
    if hours < MIN_RETENTION_HOURS and not force:
        raise LakeclusterError(
            f"retention {hours:g} h is below {MIN_RETENTION_HOURS:g} h: files a running rewrite or a slow reader "
            "still needs could be deleted; add --force if you are sure"
        )
    spark = get_session(config.spark, config.storage, s3=config.uses_s3).newSession()
    reports = vacuum_all(spark, config, retention_hours=hours, force=force, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    lines = []
    for r in reports:
        size = f"{r.bytes / 1e6:,.1f} MB"
        lines.append(f"{r.table}: {verb} {r.files:,} file(s), {size} (retention {r.retention_hours:g} h)")
        lines.extend(f"  {p}" for p in r.paths[:50])
        if len(r.paths) > 50:
            lines.append(f"  ... and {len(r.paths) - 50:,} more (--output json lists all)")
    emit([r.__dict__ for r in reports], "\n".join(lines), args.output)
    return 0


def show_config(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster config``: the effective configuration, secrets redacted (JSON in both formats)."""
    import json

    data = describe(config)
    emit(data, json.dumps(data, indent=2), args.output)
    return 0


def boundaries(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster boundaries``: the newest boundary sketches of the clustering columns."""
    from lakecluster.sketch_store import SketchStore

    open_table(config.table.path)
    latest = SketchStore(config.table.path).latest()
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


def index(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster index sync|rebuild|show``: the column-stats index of an existing table."""
    from lakecluster.index.show import show
    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import rebuild, sync

    open_table(config.table.path)
    spec = IndexSpec.from_config(config)
    if args.index_command in ("sync", "rebuild"):
        res = sync(spec) if args.index_command == "sync" else rebuild(spec)
        start = "" if res.from_version is None else f"{res.from_version} -> "
        text = (
            f"index {res.mode}: version {start}{res.to_version}, {res.files_added} file(s) added, "
            f"{res.files_removed} removed in {res.seconds:.2f}s" + (f" ({res.reason})" if res.reason else "")
        )
        emit(res.__dict__, text, args.output)  # fmt: skip
        return 0
    info = show(spec, args.column, args.limit)
    emit(info, info["text"], args.output)
    return 0


def explain(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster explain --where``: files a predicate must read, from the column-stats index."""
    from lakecluster.index.explain import explain as run_explain
    from lakecluster.index.explain import format_text
    from lakecluster.index.spec import IndexSpec

    open_table(config.table.path)
    rep = run_explain(IndexSpec.from_config(config), args.where, sync_first=not args.no_sync)
    emit(rep, format_text(rep), args.output)
    return 0


def status(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster status``: the table's health in one screen (``--json`` for scripts)."""
    from lakecluster.cli.status import format_text, table_status

    data = table_status(config, lag_timeout_s=args.lag_timeout)
    emit(data, format_text(data), args.output)
    return 0


def report(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster report --out DIR``: the table's layout as an HTML page with plots."""
    from pathlib import Path

    from lakecluster.cli.report import write

    open_table(config.table.path)  # a missing table is a one-line error
    page = write(config, Path(args.out))
    emit({"page": str(page)}, f"lakecluster report: {page}", args.output)
    return 0


def tune(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster tune``: the planner replayed over the table for a grid of thresholds; with
    ``--queries``, candidate layouts scored on the workload's predicates."""
    from pathlib import Path

    from lakecluster.cli.tune import advise, format_advice, format_text, write_page
    from lakecluster.cli.tune import tune as run_tune

    data: dict[str, object] = {}
    texts = []
    thresholds = workload = None
    if args.queries:
        workload = data["workload"] = advise(config, args.queries, args.sample_rows)
        texts.append(format_advice(workload))
    if args.grid or not args.queries:
        thresholds = data["thresholds"] = run_tune(config, args.grid)
        texts.append(format_text(thresholds))
    text = "\n\n".join(texts)
    if args.out:
        page = write_page(Path(args.out), thresholds, workload)
        data["page"] = str(page)
        text += f"\nplot: {page}"
    emit(data, text, args.output)
    return 0


def produce(args: argparse.Namespace, config: Config) -> int:
    """``lakecluster produce``: generator records as JSON into ``source.kafka.topics[0]`` until stopped."""
    import signal
    import threading

    from lakecluster.stream.kafka import consumer, partitions
    from lakecluster.stream.produce import produce as send

    if config.source.kind != "kafka" or not config.source.kafka.topics:
        raise LakeclusterError("produce needs source.kind = \"kafka\" and source.kafka.topics (the topic to fill)")
    if args.rate <= 0:
        raise LakeclusterError(f"--rate must be a positive number of records per second, got {args.rate}")
    client = consumer(config.source.kafka)  # an unreachable broker or a missing topic: one line, now
    try:
        partitions(config.source.kafka, client)
    finally:
        client.close()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    topic = config.source.kafka.topics[0]
    print(f"lakecluster produce: {args.rate:,} records/s -> {config.source.kafka.bootstrap_servers} {topic} "
          "(Ctrl-C stops)", flush=True)  # fmt: skip
    sent = send(config, rate=args.rate, records=args.records, malformed_every=args.malformed_every, stop=stop)
    emit({"records": sent, "topic": topic}, f"lakecluster produce: {sent:,} records sent to {topic}", args.output)
    return 0
