"""Configuration: precedence, types, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakecluster.config import load_config, parse_overrides
from lakecluster.errors import ConfigError


def test_defaults_run_the_generator_into_a_local_table() -> None:
    config = load_config(environ={})
    assert config.source.kind == "generator"
    assert config.table.clustering_columns == ("s_city", "c_city", "p_brand")
    assert config.stream.resolved_checkpoint(config.table).startswith(config.table.path)


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[table]\npath = "/from/file"\n[stream]\ntrigger_interval_s = 3\n')
    env = {"LAKECLUSTER_TABLE__PATH": "/from/env", "LAKECLUSTER_SKETCHES__K": "400"}
    config = load_config(f, environ=env, overrides=parse_overrides(["sketches.k=300"]))
    assert config.table.path == "/from/env"
    assert config.stream.trigger_interval_s == 3.0
    assert config.sketches.k == 300


@pytest.mark.parametrize(
    ("toml", "key", "words"),
    [
        ('[table]\nclustring_columns = ["a"]', "table.clustring_columns", "unknown key"),
        ('[stream]\ntrigger_interval_s = "soon"', "stream.trigger_interval_s", "expected a number"),
        ("[sketches]\nk = 2", "sketches.k", "8..65535"),
        ('[source]\nkind = "pulsar"', "source.kind", "generator, kafka"),
        ('[table]\nclustering_columns = ["nope"]', "table.clustering_columns", "unknown column 'nope'"),
        ('[table]\npartition_by = ["s_city"]', "table.clustering_columns", "partition columns"),
        ('[source]\nkind = "kafka"', "source.kafka.topics", "exactly one of topics or topic_pattern"),
        (
            '[source]\nkind = "kafka"\n[source.kafka]\ntopics = ["t"]\nstarting_offsets = "yesterday"',
            "source.kafka.starting_offsets",
            "earliest, latest",
        ),
        (
            '[table]\ncolumns = [{ name = "x", type = "varchar" }]\nclustering_columns = ["x"]\npartition_by = []',
            "table.columns[0].type",
            "unknown type 'varchar'",
        ),
        (
            '[table]\ncolumns = [{ name = "x", type = "string" }]\nclustering_columns = ["x"]\npartition_by = []',
            "table.columns[0].name",
            "generator source does not produce 'x'",
        ),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, toml: str, key: str, words: str) -> None:
    f = tmp_path / "c.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(f, environ={})
    assert info.value.key == key
    assert key in str(info.value) and words in str(info.value)


def test_bad_env_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"stream\.progress"):
        load_config(environ={"LAKECLUSTER_STREAM__PROGRESS": "maybe"})


def test_set_flag_needs_key_value() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["table.path"])
