"""Drift: the query mix changes half-way; which layouts follow it, and at what rewrite cost.

    python bench/drift.py --scale-factor 0.2 --rounds 48 --switch 24

A round stands for an hour of a live table: new rows arrive as ``--files-per-round`` stream-sized
files, the arm's maintenance runs, then ``--queries-per-round`` queries of the current mix run
through Spark + delta-spark (files read: Spark's own scan metric). Until ``--switch`` the queries
filter on dates and regions; from it on, on brands and quantities. Every arm gets the same
pre-generated fragments (the built-in generator, the flattened SSB schema) and the same queries,
and runs in a process of its own, one arm after another:

- **lakecluster, auto_layout = apply**: starts clustered on the first mix's columns, the query
  listener on; the compactor reads the captured workload and adopts a layout within its guardrails.
- **lakecluster, fixed**: clustered on the first mix's columns for good.
- **Delta liquid**: ``CLUSTER BY`` the first mix's columns, ``OPTIMIZE`` every round, and at the
  switch ``CLUSTER BY`` the new mix's columns + ``OPTIMIZE FULL`` (what a user who noticed would do).
- **hindsight best**: for each half, the best layout of ``tune``'s whole candidate search on that
  half's queries, fully re-clustered at the half's start (``compact --full``).

Bytes rewritten are read from each table's Delta log (the removed files of every commit that
removed any). Every arm must return the same answer to every query (the rows are the same).
Prints a table, writes docs/img/drift.svg and the "## Drift" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402

FIRST_COLUMNS = ["lo_orderdate", "s_region", "c_region"]  # what the first mix filters on
SECOND_COLUMNS = ["p_brand1", "lo_quantity"]  # ... and the second
ARMS = ("lakecluster, auto_layout = apply", "lakecluster, fixed", "Delta liquid", "hindsight best")
COLOURS = {"lakecluster, auto_layout = apply": "#d62728", "lakecluster, fixed": "#7f7f7f",
           "Delta liquid": "#1f77b4", "hindsight best": "#2ca02c"}  # fmt: skip
REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
FIRST_DAY, LAST_DAY = dt.date(1992, 1, 1), dt.date(1998, 8, 2)

WINDOW_ROUNDS = 12  # the apply arm scores the captured queries of the last 12 rounds ("hours") ...
HALF_LIFE_ROUNDS = 2  # ... a query 2 rounds old weighing half a fresh one
BUDGET_ROUNDS = 12  # and may re-cluster as many bytes as the whole input per 12 rounds


def apply_settings(round_s: float, in_bytes: int) -> dict[str, Any]:
    """The apply arm's settings that are not the defaults. A round stands for an hour and lasts
    ``round_s`` seconds of the clock, so the layout loop's durations are scaled to it:

    - scoring once a round (its interval a little shorter than a round, which the clock
      measures from one scoring to the next), on at least a round's span of captured queries, the
      last ``WINDOW_ROUNDS`` rounds' queries with a half-life of ``HALF_LIFE_ROUNDS`` (the defaults, a
      week and a day, are in the same ratio);
    - scoring may take half the clock: a scoring of a few seconds is a fifth of a 30 s round but
      0.1 % of the hour the round stands for (the default 5 % would let it score only every third
      or fourth round, as if it took minutes an hour);
    - the re-cluster's budget: the whole input's bytes per ``BUDGET_ROUNDS`` rounds, about twice
      the table a day (the default, half the table a day, would re-cluster the table in two days:
      past the end of the run). Its write amplification is reported beside the result. The budget
      is set per day of the clock and applied per window (``rewrite_budget_window_s``): a window
      of ``BUDGET_ROUNDS`` rounds is ``BUDGET_ROUNDS * round_s`` seconds of the clock."""
    window = BUDGET_ROUNDS * round_s
    return {"auto_layout": "apply", "auto_layout_interval_s": 0.8 * round_s, "auto_layout_min_span_s": round_s,
            "auto_layout_window_s": WINDOW_ROUNDS * round_s, "auto_layout_half_life_s": HALF_LIFE_ROUNDS * round_s,
            "auto_layout_max_cost_share": 0.5, "rewrite_budget_bytes_per_day": int(in_bytes * 86_400 / window),
            "rewrite_budget_window_s": window}  # fmt: skip


# -- the workload ----------------------------------------------------------------------------------


def _day(rng: np.random.Generator, span: int) -> tuple[str, str]:
    start = FIRST_DAY + dt.timedelta(days=int(rng.integers(0, (LAST_DAY - FIRST_DAY).days - span)))
    return start.isoformat(), (start + dt.timedelta(days=span)).isoformat()


def first_mix(rng: np.random.Generator) -> list[str]:
    """Date and region filters (SSB Q1 and Q3 shapes)."""
    a, b = _day(rng, 90)
    c, d = _day(rng, 30)
    r1, r2, r3, r4 = (REGIONS[i] for i in rng.integers(0, len(REGIONS), 4))
    return [f"s_region = '{r1}' AND lo_orderdate BETWEEN '{a}' AND '{b}'",
            f"c_region = '{r2}' AND d_year = {int(rng.integers(1992, 1999))}",
            f"lo_orderdate BETWEEN '{c}' AND '{d}'",
            f"s_region = '{r3}' AND c_region = '{r4}'"]  # fmt: skip


def second_mix(rng: np.random.Generator) -> list[str]:
    """Brand and quantity filters (SSB Q2 shapes, and quantity bands)."""
    from lakecluster.stream.ssb import BRANDS, CATEGORIES

    b1, b2 = (str(v) for v in rng.choice(BRANDS, 2))
    q = int(rng.integers(1, 41))
    return [f"p_brand1 = '{b1}'",
            f"p_brand1 = '{b2}' AND lo_quantity BETWEEN {q} AND {q + 9}",
            f"p_category = '{rng.choice(CATEGORIES)}' AND lo_quantity < {int(rng.integers(2, 11))}",
            f"lo_quantity BETWEEN {q} AND {q + 2}"]  # fmt: skip


def schedule(rounds: int, switch: int, per_round: int, seed: int) -> list[list[str]]:
    """Each round's WHERE clauses: the first mix before ``switch``, the second from it on."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rounds):
        mix = first_mix if r < switch else second_mix
        clauses: list[str] = []
        while len(clauses) < per_round:
            clauses += mix(rng)
        out.append(clauses[:per_round])
    return out


# -- the input ----------------------------------------------------------------------------------------


def write_fragments(work: Path, scale_factor: float, initial_files: int, rounds: int, per_round: int) -> dict:
    """Half the rows as ``initial_files`` files, the other half as ``per_round`` files per round, in
    generator order (every file holds every date, region and brand, as a stream's do)."""
    from lakecluster.stream.generator import GeneratorSettings, generate
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    settings = GeneratorSettings(scale_factor=scale_factor)
    rows = int(6_000_000 * scale_factor)
    initial = rows // 2
    names: dict[str, list[str]] = {"initial": []}
    cuts = np.linspace(0, initial, initial_files + 1).astype(int)
    later = np.linspace(initial, rows, rounds * per_round + 1).astype(int)
    folder = work / "fragments"
    folder.mkdir(parents=True)

    def one(name: str, start: int, end: int) -> str:
        batch = generate(int(start), int(end), settings, SSB_FULL_COLUMNS)
        path = folder / f"{name}.parquet"
        pq.write_table(pa.Table.from_batches([batch]), path)
        return str(path)

    for i in range(initial_files):
        names["initial"].append(one(f"initial-{i:04d}", cuts[i], cuts[i + 1]))
    for r in range(rounds):
        names[str(r)] = [one(f"round-{r:02d}-{j}", later[r * per_round + j], later[r * per_round + j + 1])
                         for j in range(per_round)]  # fmt: skip
    names["rows"] = rows  # type: ignore[assignment]
    return names


def append(path: Path, fragments: Sequence[str], spark: Any = None) -> int:
    """Each fragment as one append of one file, as micro-batches land (by delta-rs, or by Spark when
    given: delta-rs cannot write to a table with liquid clustering); their bytes."""
    from deltalake import write_deltalake

    for f in fragments:
        if spark is None:
            write_deltalake(str(path), pq.read_table(f), mode="append")
        else:
            spark.read.parquet(f).coalesce(1).write.format("delta").mode("append").save(str(path))
    return sum(Path(f).stat().st_size for f in fragments)


# -- measuring -----------------------------------------------------------------------------------------


class Log:
    """Bytes removed by the commits of a table since the last call (rewrites: appends remove none)."""

    def __init__(self, path: Path) -> None:
        self.log = path / "_delta_log"
        self.seen = -1
        self.sizes: dict[str, int] = {}

    def rewritten(self) -> int:
        total = 0
        versions = sorted(int(p.stem) for p in self.log.glob("*.json") if p.stem.isdigit())
        for v in (v for v in versions if v > self.seen):
            for line in (self.log / f"{v:020d}.json").read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    self.sizes[action["add"]["path"]] = int(action["add"]["size"])
                elif "remove" in action:
                    r = action["remove"]
                    total += int(r.get("size") or self.sizes.get(r["path"], 0))
            self.seen = v
        return total


def run_queries(spark: Any, path: Path, clauses: Sequence[str]) -> tuple[list[int], list[str]]:
    """Files read per query (Spark's scan metric) and a digest of each answer."""
    from tests.spark_scans import files_scanned

    files, answers = [], []
    for clause in clauses:
        frame = spark.sql(f"SELECT count(*) AS n, sum(lo_revenue) AS revenue FROM delta.`{path}` WHERE {clause}")
        answer = frame.collect()
        files.append(files_scanned(frame))
        answers.append(hashlib.sha1(repr([tuple(r) for r in answer]).encode()).hexdigest()[:12])
    return files, answers


# -- the arms -----------------------------------------------------------------------------------------

CONFIG = """
[source]
kind = "generator"
[table]
path = "{path}"
partition_by = []
clustering_columns = [{clustering}]
columns = [{columns}]
[compaction]
target_file_bytes = {target}
min_file_bytes = {min_file}
max_group_bytes = {max_group}
column_weights = {{ {weights} }}
{extra}
[metrics]
port = 0
"""


def lakecluster_config(path: Path, clustering: Sequence[str], weights: dict[str, float], target: int,
                       extra: dict[str, Any] | None = None) -> Path:  # fmt: skip
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    declared = ", ".join(f'{{ name = "{c.name}", type = "{c.type}" }}' for c in SSB_FULL_COLUMNS)
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in (extra or {}).items())
    text = CONFIG.format(path=path, clustering=", ".join(f'"{c}"' for c in clustering), columns=declared,
                         target=target, min_file=max(1, target // 8), max_group=16 * target,
                         weights=", ".join(f"{k} = {v:g}" for k, v in weights.items()), extra=lines)  # fmt: skip
    cfg = path.parent / f"lakecluster-{hashlib.sha1(text.encode()).hexdigest()[:8]}.toml"
    cfg.write_text(text)
    return cfg


def sketch(path: Path, fragments: Sequence[str], columns: Sequence[str]) -> None:
    """Merge the fragments' rows into the boundary sketches of ``columns`` and of every other column
    the sketch file holds (those of an adopted layout), as the stream does per batch."""
    from deltalake import DeltaTable

    from lakecluster.sketches import BoundarySketches
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS
    from lakecluster.table import LakeTable

    store = LakeTable.at(str(path)).sketches()
    by_name = {c.name: c for c in SSB_FULL_COLUMNS}
    latest = store.latest() or BoundarySketches({})
    fresh = BoundarySketches.empty([by_name[c] for c in columns if c not in latest.sketches])
    latest.sketches.update(fresh.sketches)
    sketched = [c for c in latest.sketches if c in by_name]
    for f in fragments:
        batch = pq.read_table(f, columns=sketched)
        for c in sketched:
            latest.sketches[c].update(batch[c])
    latest.delta_version = DeltaTable(str(path)).version()
    store.write(latest)


def compactor(config: Path, spark: Any, *, full: bool = False) -> Any:
    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import load_config

    return Compactor(load_config(config, environ={}), spark=spark, full=full)


def rounds(service: Any, limit: int = 20) -> float:
    """Compactor rounds until one commits nothing (or ``limit``); with ``full``, until the re-cluster is
    done. Returns their seconds."""
    started = time.perf_counter()
    for _ in range(limit):
        results = service.run_once()
        if service.full and service.relayout_left()[0] == 0:
            break
        if not service.full and not any(r.result == "committed" for r in results):
            break
    return time.perf_counter() - started


def hindsight_layout(path: Path, clauses: Sequence[str], target: int) -> tuple[list[str], dict[str, float]]:
    """The best layout of ``tune``'s whole candidate search for these queries, on the table as it is."""
    from lakecluster.cli.tune import advise
    from lakecluster.config import load_config
    from lakecluster.table import LakeTable

    queries = path.parent / "hindsight.sql"
    queries.write_text("\n".join(clauses) + "\n")
    cfg = lakecluster_config(path, FIRST_COLUMNS, {}, target)
    data = advise(LakeTable(load_config(cfg, environ={})), str(queries), 200_000, min_gain=0.0)
    best = data["recommended"] or data["current"]
    return list(best["clustering_columns"]), dict(best["column_weights"])


def run_arm(arm: str, work: Path, setup: dict, plan: list[list[str]], switch: int, round_s: float,
            emit: Callable[[dict], None]) -> None:  # fmt: skip
    fragments, target, in_bytes = setup["fragments"], setup["target"], setup["in_bytes"]
    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session
    from lakecluster.workload.listener import listener_jar

    spark_config = SparkConfig(master="local[2]", conf={"spark.driver.memory": "4g"})
    spark = get_session(spark_config, extra_jars=[listener_jar(spark_config)])  # the "apply" arms capture
    spark.sparkContext.setLogLevel("ERROR")
    home = work / slug(arm) / "table"
    if home.parent.exists():
        shutil.rmtree(home.parent)
    home.parent.mkdir(parents=True)
    append(home, fragments["initial"])
    log = Log(home)
    listener = None
    columns, weights = list(FIRST_COLUMNS), dict[str, float]()
    started = time.perf_counter()
    if arm == "hindsight best":
        columns, weights = hindsight_layout(home, [c for r in plan[:switch] for c in r], target)
    service = None
    if arm.startswith("lakecluster") or arm == "hindsight best":
        sketch(home, fragments["initial"], columns)
        extra = apply_settings(round_s, in_bytes) if arm.endswith("apply") else {}
        config = lakecluster_config(home, columns, weights, target, extra)
        rounds(compactor(config, spark, full=True), limit=100)
        service = compactor(config, spark)  # the long-running compactor of the table from here on
        if arm.endswith("apply"):
            listener = spark._jvm.lakecluster.workload.WorkloadListener()  # type: ignore[union-attr]
            spark._jsparkSession.listenerManager().register(listener)
    else:
        # Delta's defaults scaled to the target as maxFileSize scales them (1 GiB): a Z-cube of less
        # than 100 files' worth takes new data in on every OPTIMIZE, and cubes grow to 150 files' worth.
        spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
        spark.conf.set("spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.threshold",
                       str(100 * target))
        spark.conf.set("spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.targetCubeSize",
                       str(150 * target))
        spark.sql(f"ALTER TABLE delta.`{home}` CLUSTER BY ({', '.join(columns)})").collect()
        spark.sql(f"OPTIMIZE delta.`{home}` FULL").collect()
    log.rewritten()  # the initial layout is the same for every round: not counted
    emit({"arm": arm, "round": -1, "layout": {"columns": columns, "weights": weights},
          "setup_s": round(time.perf_counter() - started, 1)})  # fmt: skip
    for r, clauses in enumerate(plan):
        started = time.perf_counter()
        loop: dict[str, Any] = {}
        ingested = append(home, fragments[str(r)], spark)
        if r == switch and arm == "Delta liquid":
            columns = list(SECOND_COLUMNS)
            spark.sql(f"ALTER TABLE delta.`{home}` CLUSTER BY ({', '.join(columns)})").collect()
            spark.sql(f"OPTIMIZE delta.`{home}` FULL").collect()
        elif arm == "Delta liquid":
            spark.sql(f"OPTIMIZE delta.`{home}`").collect()
        else:
            # The stream sketches the columns it was started with (the first mix's, for lakecluster).
            sketch(home, fragments[str(r)], FIRST_COLUMNS if arm.startswith("lakecluster") else columns)
            if r == switch and arm == "hindsight best":
                columns, weights = hindsight_layout(home, [c for q in plan[switch:] for c in q], target)
                config = lakecluster_config(home, columns, weights, target)
                rounds(compactor(config, spark, full=True), limit=100)
                service = compactor(config, spark)
            assert service is not None
            rounds(service)
            if listener is not None:
                service.layout_loop()  # between rounds, as the service does
                rounds(service)  # a layout adopted now is followed at once
                last = service.auto.last
                if last is not None:  # what the loop decided this round, for the record
                    loop = {"decision": last.decision, "scans": last.scans, "gain": last.gain, "seconds": last.seconds,
                            "recommended": (last.recommended or {}).get("clustering_columns")}  # fmt: skip
                adopted = service.adoption
                if adopted is not None:
                    columns = list(adopted.clustering_columns)
                    weights = dict(adopted.column_weights)
        maintain_s = time.perf_counter() - started
        files, answers = run_queries(spark, home, clauses)
        if listener is not None:
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
            listener.flush()
            time.sleep(max(0.0, round_s - (time.perf_counter() - started)))  # a round is round_s of the clock
        emit({"arm": arm, "round": r, "files_read": files, "answers": answers, "ingested": ingested,
              "rewritten": log.rewritten(), "live_files": _live(home), "maintain_s": round(maintain_s, 2),
              "layout": {"columns": columns, "weights": weights},
              **({"layout_loop": loop} if loop else {})})  # fmt: skip


def slug(arm: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", arm.lower()).strip("-")


def _live(path: Path) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(path)).file_uris())


# -- the report --------------------------------------------------------------------------------------


def summarise(records: list[dict], switch: int, last: int) -> dict[str, dict[str, float]]:
    """Per arm: mean files read per query over the first half's last rounds and the second's, bytes
    rewritten and write amplification (rewritten / ingested over the rounds)."""
    out = {}
    for arm in ARMS:
        rows = [r for r in records if r["arm"] == arm and r["round"] >= 0]
        if not rows:
            continue
        tail = [r for r in rows if r["round"] >= len(rows) - last]
        before = [r for r in rows if switch - last <= r["round"] < switch]
        rewritten, ingested = sum(r["rewritten"] for r in rows), sum(r["ingested"] for r in rows)
        out[arm] = {"first_mix": float(np.mean([np.mean(r["files_read"]) for r in before])) if before else 0.0,
                    "second_mix": float(np.mean([np.mean(r["files_read"]) for r in tail])),
                    "rewritten": rewritten, "write_amplification": rewritten / ingested if ingested else 0.0,
                    "live_files": rows[-1]["live_files"]}  # fmt: skip
    return out


def render(command: str, records: list[dict], args: argparse.Namespace, setup: dict[str, Any]) -> tuple[str, str]:
    from lakecluster import plots

    rounds = list(range(args.rounds))
    series = {}
    for arm in ARMS:
        per = {r["round"]: float(np.mean(r["files_read"])) for r in records if r["arm"] == arm and r["round"] >= 0}
        if len(per) == len(rounds):
            series[arm] = ([per[r] for r in rounds], COLOURS[arm])
    svg = plots.lines([float(r) for r in rounds], series, "drift", "round (an hour each; the mix switches at "
                      f"round {args.switch})", "files read per query (mean of the round)")  # fmt: skip
    s = summarise(records, args.switch, args.last)
    head = ("| arm | files per query, first mix (last rounds before the switch) | files per query, second mix "
            f"(last {args.last} rounds) | MB rewritten in the rounds | write amplification | files at the end |\n"
            "|---|---:|---:|---:|---:|---:|\n")  # fmt: skip
    body = "".join(f"| {arm} | {v['first_mix']:.1f} | {v['second_mix']:.1f} | {v['rewritten'] / 1e6:,.1f} | "
                   f"{v['write_amplification']:.2f} | {v['live_files']:,} |\n" for arm, v in s.items())  # fmt: skip
    layouts = "".join(f"- {arm}: " + "; ".join(
        f"round {r['round']}: {', '.join(r['layout']['columns'])}" for r in _layout_changes(records, arm)) + "\n"
        for arm in s)  # fmt: skip
    goal = ""
    apply, best, fixed = (s.get(a) for a in (ARMS[0], ARMS[3], ARMS[1]))
    if apply and best and fixed:
        goal = (f"\nGoal by round {args.rounds}: lakecluster (apply) reads ≤ 1.2 × the hindsight-best layout's files "
                f"on the new mix and ≤ 0.5 × the fixed lakecluster layout's. This run: "
                f"{apply['second_mix'] / max(best['second_mix'], 1e-9):.2f} × hindsight best, "
                f"{apply['second_mix'] / max(fixed['second_mix'], 1e-9):.2f} × fixed, at a write amplification of "
                f"{apply['write_amplification']:.2f} (hindsight best: {best['write_amplification']:.2f}).\n")
    section = (f"## Drift: the query mix switches half-way\n\n`{command}` — {setup['rows']:,} rows of the "
               f"flattened SSB table (scale factor {args.scale_factor:g}): half as {args.initial_files} files "
               f"clustered before round 0, the other half as {args.files_per_round} files per round; "
               f"{args.queries_per_round} queries per round, dates and regions before round {args.switch}, brands "
               f"and quantities from it on; target file size {setup['target']:,} bytes. Spark `local[2]` + "
               "delta-spark; files read are Spark's scan metric. Every arm answered every query alike.\n\n"
               "![files read per query over the rounds](img/drift.svg)\n\n" + head + body
               + "\nLayouts over the run:\n\n" + layouts + goal)  # fmt: skip
    return section, svg


def _layout_changes(records: list[dict], arm: str) -> Iterator[dict]:
    seen = None
    for r in (r for r in records if r["arm"] == arm):
        key = json.dumps(r["layout"], sort_keys=True)
        if key != seen:
            seen = key
            yield r


def run_arms(args: argparse.Namespace, work: Path) -> list[dict]:
    """Each arm in a process of its own, on the fragments of ``work`` (written first if missing);
    an arm ``work/records.jsonl`` holds every round of already is not run again."""
    setup_file = work / "setup.json"
    if not setup_file.exists():
        fragments = write_fragments(work, args.scale_factor, args.initial_files, args.rounds, args.files_per_round)
        in_bytes = sum(Path(f).stat().st_size for k, v in fragments.items() if k != "rows" for f in v)
        setup = {"fragments": fragments, "target": max(1, in_bytes // args.target_files), "rows": fragments["rows"],
                 "in_bytes": in_bytes}  # fmt: skip
        setup_file.write_text(json.dumps(setup))
    setup = json.loads(setup_file.read_text())
    print(f"{setup['rows']:,} rows, {setup['in_bytes'] / 1e6:,.0f} MB of fragments; target {setup['target']:,} "
          "bytes", flush=True)  # fmt: skip
    records_file = work / "records.jsonl"
    for arm in args.arms:
        done = [json.loads(line) for line in records_file.read_text().splitlines()] if records_file.exists() else []
        if sum(1 for r in done if r["arm"] == arm and r["round"] >= 0) == args.rounds:
            print(f"{arm}: measured before, in {records_file}", flush=True)
            continue
        if done:  # an arm cut short leaves rounds behind: drop them
            records_file.write_text("".join(json.dumps(r) + "\n" for r in done if r["arm"] != arm))
        subprocess.run([sys.executable, __file__, "--child", arm, "--work", str(work), "--rounds",
                        str(args.rounds), "--switch", str(args.switch), "--queries-per-round",
                        str(args.queries_per_round), "--seed", str(args.seed), "--round-s", str(args.round_s)],
                       check=True)  # fmt: skip
        shutil.rmtree(work / slug(arm), ignore_errors=True)
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    return [r for r in records if r["arm"] in args.arms]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale-factor", type=float, default=0.2)
    p.add_argument("--rounds", type=int, default=48)
    p.add_argument("--switch", type=int, default=24)
    p.add_argument("--initial-files", type=int, default=100)
    p.add_argument("--files-per-round", type=int, default=4)
    p.add_argument("--queries-per-round", type=int, default=10)
    p.add_argument("--target-files", type=int, default=200, help="the table's files at the end, at the target size")
    p.add_argument("--last", type=int, default=4, help="rounds at the end of each half that are averaged")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--round-s", type=float, default=20.0,
                   help="seconds of the clock a round of the apply arm lasts at least (it stands for an hour)")
    p.add_argument("--work-dir", help="keep the fragments and each arm's rounds here; arms measured before are "
                   "not run again (default: a temporary folder)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    plan = schedule(args.rounds, args.switch, args.queries_per_round, args.seed)
    if args.child:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("lakecluster.layout.auto_layout").setLevel(logging.INFO)  # every decision
        work = Path(args.work)
        setup = json.loads((work / "setup.json").read_text())
        with (work / "records.jsonl").open("a") as out:
            def emit(record: dict) -> None:
                out.write(json.dumps(record) + "\n")
                out.flush()
                print(json.dumps({k: v for k, v in record.items() if k != "answers"}), flush=True)

            run_arm(args.child, work, setup, plan, args.switch, args.round_s, emit)
        return
    command = (f"python bench/drift.py --scale-factor {args.scale_factor:g} --rounds {args.rounds} "
               f"--switch {args.switch} --round-s {args.round_s:g}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lc-drift-") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        records = run_arms(args, work)
        setup = json.loads((work / "setup.json").read_text())
    for r in range(args.rounds):  # the same rows: every arm answers alike
        answers = {rec["arm"]: rec["answers"] for rec in records if rec["round"] == r}
        assert len({json.dumps(a) for a in answers.values()}) == 1, f"round {r}: the arms answer differently"
    section, svg = render(command, records, args, setup)
    print(section)
    if not args.no_write:
        (REPO / "docs" / "img" / "drift.svg").write_text(svg)
        write_section(REPO / "docs" / "benchmarks.md", "## Drift", section)


if __name__ == "__main__":
    main()
