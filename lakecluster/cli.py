"""``lakecluster``: the single command-line entry point, with one subcommand per service."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from lakecluster.config import Config, describe, load_config, parse_overrides
from lakecluster.errors import ConfigError, LakeclusterError

log = logging.getLogger("lakecluster")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakecluster", description=__doc__)
    p.add_argument("--config", "-c", help="TOML config file (defaults < file < LAKECLUSTER_* env < --set)")
    p.add_argument("--set", "-s", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set table.path=/data/t (repeatable)")  # fmt: skip
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--output", default="text", choices=["text", "json"], help="format of results")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("stream", help="ingest from the source into the Delta table (runs until stopped)")
    s.add_argument("--available-now", action="store_true",
                   help="process everything available at start, then exit")  # fmt: skip
    s.add_argument("--max-batches", type=int, help="stop after this many micro-batches")

    c = sub.add_parser("compact", help="cluster and compact the table (runs until stopped)")
    c.add_argument("--once", action="store_true", help="one planning round, then exit")
    c.add_argument("--dry-run", action="store_true", help="print the plan (groups, files, bytes, why) and exit")

    r = sub.add_parser("run", help="the stream and the compactor side by side in one process (local use)")
    r.add_argument("--max-batches", type=int, help="stop after this many micro-batches")

    sub.add_parser("config", help="print the effective, validated configuration")

    b = sub.add_parser("boundaries", help="print the current boundaries of the clustering columns")
    b.add_argument("--k", type=int, help="number of boundaries (default sketches.boundaries)")

    i = sub.add_parser("index", help="the column-stats index: sync, rebuild, show (docs/index.md)")
    isub = i.add_subparsers(dest="index_command", metavar="ACTION", required=True)
    isub.add_parser("sync", help="apply the commits since the index's version (rebuilds when it must)")
    isub.add_parser("rebuild", help="build the index from the Delta log from scratch")
    show = isub.add_parser("show", help="the index's version, files, and one column's stats")
    show.add_argument("--column", help="print this column's per-file stats")
    show.add_argument("--limit", type=int, default=20, help="most rows printed with --column")

    e = sub.add_parser("explain", help="files a where-clause must read and how many it skips, per conjunct")
    e.add_argument("--where", required=True, help="e.g. \"s_city = 'UNITED KI1' AND d_year >= 1995\"")
    e.add_argument("--no-sync", action="store_true", help="fail instead of syncing a stale index first")
    e.add_argument("--output", dest="sub_output", choices=["text", "json"], help="same as the global --output")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    command = args.command or "stream"
    try:
        config = load_config(args.config, overrides=parse_overrides(args.set))
        if command == "config":
            print(json.dumps(describe(config), indent=2))
            return 0
        if command == "boundaries":
            return _boundaries(config, args.k, args.output)
        if command == "compact":
            return _compact(config, args.once, args.dry_run, args.output)
        if command == "run":
            return _run(config, args.max_batches)
        if command == "index":
            return _index(config, args.index_command, args.output, getattr(args, "column", None), args.limit
                          if args.index_command == "show" else 20)  # fmt: skip
        if command == "explain":
            return _explain(config, args.where, not args.no_sync, args.sub_output or args.output)
        return _stream(config, getattr(args, "available_now", False), getattr(args, "max_batches", None))
    except ConfigError as e:
        print(f"lakecluster: configuration error: {e}", file=sys.stderr)
        return 2
    except LakeclusterError as e:
        print(f"lakecluster: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _stream(config: Config, available_now: bool, max_batches: int | None) -> int:
    from lakecluster.stream.job import StreamJob, install_signal_handlers, progress_printer

    source = config.source
    what = "generator" if source.kind == "generator" else f"kafka {source.kafka.bootstrap_servers}"
    print(f"lakecluster stream: {what} -> {config.table.path} (Ctrl-C stops after the current batch)",
          flush=True)  # fmt: skip
    job = StreamJob(config, available_now=available_now, max_batches=max_batches,
                    on_batch=progress_printer() if config.stream.progress else None)  # fmt: skip
    install_signal_handlers(job)
    reports = job.run()
    rows = sum(r.rows for r in reports)
    print(f"lakecluster stream: stopped after {len(reports)} batch(es), {rows:,} rows committed", flush=True)
    return 0


def _compact(config: Config, once: bool, dry_run: bool, output: str) -> int:
    import signal

    from lakecluster import metrics
    from lakecluster.compaction.loop import Compactor, describe_plan

    compactor = Compactor(config)
    if dry_run:
        the_plan = compactor.plan()
        if output == "json":
            print(json.dumps({"table_version": the_plan.table_version, "groups": [
                {"partition": dict(g.partition), "files": [f.path for f in g.files], "bytes": g.bytes,
                 "rows": g.rows, "generation": g.generation, "reason": g.reason,
                 "expected_files": g.expected_files(config.compaction.target_file_bytes)}
                for g in the_plan.groups]}, indent=2))  # fmt: skip
        else:
            print(describe_plan(the_plan, config.compaction.target_file_bytes))
        return 0
    metrics.serve(config.metrics.port, config.metrics.host)

    def stop(signum: int, frame: object) -> None:
        print("lakecluster compact: stopping after the current group", file=sys.stderr, flush=True)
        compactor.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if once:
        results = compactor.run_once()
        for res in results:
            print(f"{res.result}: {len(res.group.files)} files -> {res.files_out} files in {res.seconds:.1f}s; "
                  f"point-query files {res.scanned_before:.1f} -> {res.scanned_after:.1f}"
                  + (f" ({res.message})" if res.message else ""), flush=True)  # fmt: skip
        conflicts = sum(1 for res in results if res.result == "conflict")
        print(f"lakecluster compact: {len(results) - conflicts} group(s) committed, {conflicts} conflict(s)",
              flush=True)  # fmt: skip
        return 3 if conflicts else 0
    print(f"lakecluster compact: {config.table.path} every {config.compaction.interval_s:g}s "
          "(Ctrl-C stops after the current group)", flush=True)  # fmt: skip
    compactor.run_forever()
    return 0


def _run(config: Config, max_batches: int | None) -> int:
    """Stream in the main thread, compactor in a background thread, one SparkSession."""
    import threading

    from lakecluster import metrics
    from lakecluster.compaction.loop import Compactor
    from lakecluster.spark import get_session
    from lakecluster.stream.job import StreamJob, install_signal_handlers, progress_printer

    metrics.serve(config.metrics.port, config.metrics.host)
    spark = get_session(config.spark)
    job = StreamJob(config, spark=spark, max_batches=max_batches,
                    on_batch=progress_printer() if config.stream.progress else None)  # fmt: skip
    compactor = Compactor(config, spark=spark)
    install_signal_handlers(job)
    print(f"lakecluster run: {config.source.kind} -> {config.table.path}, compacting every "
          f"{config.compaction.interval_s:g}s (Ctrl-C stops both)", flush=True)  # fmt: skip
    worker = threading.Thread(target=compactor.run_forever, name="lakecluster-compactor", daemon=True)
    worker.start()
    try:
        reports = job.run()
    finally:
        compactor.request_stop()
        worker.join()
    print(f"lakecluster run: stopped after {len(reports)} batch(es), {sum(r.rows for r in reports):,} rows",
          flush=True)  # fmt: skip
    return 0


def _index(config: Config, action: str, output: str, column: str | None, limit: int) -> int:
    from lakecluster.index.show import show
    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import rebuild, sync

    spec = IndexSpec.from_config(config)
    if action in ("sync", "rebuild"):
        res = sync(spec) if action == "sync" else rebuild(spec)
        if output == "json":
            print(json.dumps(res.__dict__))
        else:
            start = "" if res.from_version is None else f"{res.from_version} -> "
            print(
                f"index {res.mode}: version {start}{res.to_version}, {res.files_added} file(s) added, "
                f"{res.files_removed} removed in {res.seconds:.2f}s" + (f" ({res.reason})" if res.reason else "")
            )
        return 0
    info = show(spec, column, limit)
    print(json.dumps(info, indent=2, default=str) if output == "json" else info["text"])
    return 0


def _explain(config: Config, where: str, sync_first: bool, output: str) -> int:
    from lakecluster.index.explain import explain, format_text
    from lakecluster.index.spec import IndexSpec

    rep = explain(IndexSpec.from_config(config), where, sync_first=sync_first)
    print(json.dumps(rep, indent=2) if output == "json" else format_text(rep))
    return 0


def _boundaries(config: Config, k: int | None, output: str) -> int:
    from lakecluster.sketch_store import SketchStore

    latest = SketchStore(config.table.path).latest()
    if latest is None:
        print("no boundary sketches yet (has the stream committed a batch?)", file=sys.stderr)
        return 1
    k = k or config.sketches.boundaries
    result = {
        "delta_version": latest.delta_version,
        "stream_batch_id": latest.stream_batch_id,
        "columns": {
            name: {
                "n": s.n, "nulls": s.nulls, "nans": s.nans, "exact": s.is_exact,
                "rank_error": s.normalized_rank_error(),
                "boundaries": latest.boundaries(name, k).edges.tolist(),
            }
            for name, s in latest.sketches.items()
        },
    }  # fmt: skip
    if output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(
            f"boundary sketches at Delta version {result['delta_version']} (stream batch {result['stream_batch_id']})"
        )
        for name, c in result["columns"].items():
            edges = c["boundaries"]
            shown = (
                ", ".join(map(str, [*edges[:3], "...", *edges[-2:]])) if len(edges) > 5 else ", ".join(map(str, edges))
            )
            print(f"  {name}: n={c['n']:,} nulls={c['nulls']} nans={c['nans']} boundaries={len(edges)} [{shown}]")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
