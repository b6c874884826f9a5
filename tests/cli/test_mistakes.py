"""One rule for every mistake on the command line: exit status 2 and one line on stderr naming where
the wrong input came from (file and line, ``--set``, an environment variable, a flag), with the
nearest known key or column; runtime failures exit 1 (tests/cli/test_failures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakecluster.cli import main
from tests.cli.conftest import run_cli


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def test_a_check_between_keys_shows_both_keys_their_values_and_where_they_were_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--set", "compaction.target_file_bytes=1000000", "config"]) == 2
    assert _one_line(capsys) == (
        "lakecluster: configuration error in --set compaction.target_file_bytes: config key "
        "'compaction.min_file_bytes': 33,554,432 (32.0 MiB) must be <= compaction.target_file_bytes 1,000,000 "
        "(976.6 KiB)")  # fmt: skip
    toml = tmp_path / "c.toml"
    toml.write_text('# thresholds\n[table]\npath = "t"\n\n[compaction]\nmin_file_bytes = 2048\n')
    assert main(["--config", str(toml), "--set", "compaction.target_file_bytes=1024", "config"]) == 2
    assert _one_line(capsys) == (
        f"lakecluster: configuration error in {toml} line 6, --set compaction.target_file_bytes: config key "
        "'compaction.min_file_bytes': 2,048 (2.0 KiB) must be <= compaction.target_file_bytes 1,024 (1.0 KiB)")


def test_a_mistyped_key_names_its_file_line_or_variable_and_the_nearest_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[table]\npath = "t"\n[compaction]\ninterval_s = 5\ntarget_file_byte = 1024\n')
    assert main(["--config", str(toml), "config"]) == 2
    assert _one_line(capsys).startswith(
        f"lakecluster: configuration error in {toml} line 5: config key 'compaction.target_file_byte': unknown key; "
        "did you mean 'compaction.target_file_bytes'? known keys here: ")
    monkeypatch.setenv("LAKECLUSTER_SKETCHES__BOUNDARIS", "16")
    assert main(["config"]) == 2
    assert _one_line(capsys).startswith(
        "lakecluster: configuration error in LAKECLUSTER_SKETCHES__BOUNDARIS: config key 'sketches.boundaris': "
        "unknown key; did you mean 'sketches.boundaries' (LAKECLUSTER_SKETCHES__BOUNDARIES)? known keys here: ")


def test_a_column_the_source_cannot_produce_names_where_it_was_declared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[table]\npartition_by = []\nclustering_columns = ["x"]\n'
                    'columns = [{ name = "x", type = "string" }]\n')
    assert main(["--config", str(toml), "config"]) == 2
    assert _one_line(capsys).startswith(f"lakecluster: configuration error in {toml} line 4: config key "
                                        "'table.columns[0].name': ")  # fmt: skip


def test_a_clustering_column_typo_gets_the_nearest_column(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", 'table.clustering_columns=["s_cty"]', "config"]) == 2
    assert _one_line(capsys).startswith(
        "lakecluster: configuration error in --set table.clustering_columns: config key 'table.clustering_columns': "
        "unknown column 's_cty' (did you mean 's_city'?); columns: ")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("s_city = 'UNITED KI1' AND", "--where, character 26: expected a column name, found the end of the clause"),
        ("c_cty = 'UNITED KI1'", "--where, character 1: unknown column 'c_cty' (did you mean 'c_city'?); known "),
        ("upper(s_city) = 'UNITED KI1'", "--where, character 1: functions are not supported: upper(...); compare "),
        ("s_city = lower('UNITED KI1')", "--where, character 10: functions are not supported: lower(...); compare "),
    ],
)
def test_a_bad_where_clause_exits_2_naming_the_flag_and_the_character(
    ssb_table: Path, capsys: pytest.CaptureFixture[str], where: str, message: str
) -> None:
    assert main(["--set", f"table.path={ssb_table}", "explain", "--where", where]) == 2
    assert _one_line(capsys).startswith(f"lakecluster: {message}")


def test_a_bad_query_file_exits_2_naming_the_file_and_line(
    ssb_table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "q.sql"
    queries.write_text("-- the workload\nc_city = 'UNITED KI1'\nupper(c_city) = 'X'\n")
    assert main(["--set", f"table.path={ssb_table}", "tune", f"--queries={queries}"]) == 2
    assert _one_line(capsys).startswith(f"lakecluster: {queries} line 3: functions are not supported: upper(...)")
    missing = tmp_path / "missing.sql"
    assert main(["--set", f"table.path={ssb_table}", "tune", f"--queries={missing}"]) == 2
    assert _one_line(capsys).startswith(f"lakecluster: --queries {missing}: cannot read the workload file: ")


@pytest.mark.parametrize("k", ["0", "-3", "1001", "many"])
def test_boundaries_k_outside_its_range_exits_2_naming_the_range(tmp_path: Path, k: str) -> None:
    proc = run_cli("boundaries", "--k", k, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"lakecluster boundaries: argument --k: expected a whole number in 1..1000, got '{k}' "
                           "(see lakecluster boundaries --help)\n")  # fmt: skip


def test_report_refuses_to_replace_a_file_or_a_report_unless_forced(ssb_table: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("someone's notes")
    args = ["--set", f"table.path={ssb_table}", "report", "--out", str(taken)]
    refused = run_cli(*args, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr == (f"lakecluster: --out {taken}: is a file; choose another directory or add --force to "
                              "replace it\n")  # fmt: skip
    assert taken.read_text() == "someone's notes"
    forced = run_cli(*args, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (taken / "index.html").exists() and (taken / "report.json").exists()
    again = run_cli(*args, cwd=tmp_path)  # a report is there now
    assert again.returncode == 2 and again.stderr.startswith(f"lakecluster: --out {taken}: holds an earlier one (")


@pytest.mark.parametrize(("args", "expected"), [
    (["status", "--lag-timeout", "0"], "argument --lag-timeout: expected a number in 0.1..300, got '0'"),
    (["produce", "--records", "-5"], "argument --records: expected a whole number in 0..4611686018427387904"),
    (["produce", "--malformed-every", "x"], "argument --malformed-every: expected a whole number in 0.."),
    (["vacuum", "--retention", "0.4"], "argument --retention: expected a whole number of hours >= 0, got '0.4'"),
    (["vacuum", "--retention", "-1"], "argument --retention: expected a whole number of hours >= 0, got '-1'"),
])  # fmt: skip
def test_flag_values_outside_their_range_exit_2_in_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr


def test_a_short_vacuum_retention_without_force_is_a_usage_error(ssb_table: Path, tmp_path: Path) -> None:
    proc = run_cli("--set", f"table.path={ssb_table}", "vacuum", "--retention", "24", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("lakecluster: --retention: retention 24 h is below 168 h")
    assert "--force" in proc.stderr


def test_produce_without_a_kafka_source_names_the_key(tmp_path: Path) -> None:
    proc = run_cli("produce", "--records", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "source.kind" in proc.stderr and "kafka" in proc.stderr


def test_produce_in_avro_without_a_schema_registry_and_avro_from_the_generator_name_the_key(tmp_path: Path) -> None:
    kafka = ["--set", "source.kind=kafka", "--set", 'source.kafka.topics=["t"]']
    proc = run_cli(*kafka, "produce", "--format", "avro", "--records", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "source.kafka.schema_registry.url" in proc.stderr and "Traceback" not in proc.stderr
    configured = run_cli("--set", "source.kafka.format=avro", "status", cwd=tmp_path)
    assert configured.returncode == 2 and configured.stderr.count("\n") == 1, configured.stderr
    assert "source.kafka.format" in configured.stderr and 'source.kind = "kafka"' in configured.stderr


def test_tune_refuses_to_replace_its_page_unless_forced_before_any_work(ssb_table: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "tune.html").write_text("last week's page")
    proc = run_cli("--set", f"table.path={ssb_table}", "tune", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == (f"lakecluster: --out {out}: holds an earlier one (tune.html); choose another directory "
                           "or add --force to replace it\n")  # fmt: skip
    assert (out / "tune.html").read_text() == "last week's page"


def test_index_show_names_the_column_flag_for_an_unknown_column(ssb_table: Path, tmp_path: Path) -> None:
    assert run_cli("--set", f"table.path={ssb_table}", "index", "sync", cwd=tmp_path).returncode == 0
    proc = run_cli("--set", f"table.path={ssb_table}", "index", "show", "--column", "s_cty", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("lakecluster: --column: unknown column 's_cty' (did you mean 's_city'?)")
