"""Configuration: precedence, strict types, errors that name the key, redaction, and
docs/configuration.md, which must list exactly these keys with these defaults."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from lakecluster.config import Config, describe, is_secret, load_config, parse_overrides
from lakecluster.errors import ConfigError
from lakecluster.stream.source import open_source
from lakecluster.stream.ssb import SSB_COLUMNS
from lakecluster.table import LakeTable, TableSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults_run_the_generator_into_a_local_table() -> None:
    config = load_config(environ={})
    assert config.source.kind == "generator"
    assert config.table.clustering_columns == ("s_city", "c_city", "p_brand")
    table = LakeTable(config)
    assert table.paths.checkpoint.startswith(table.uri + "/_lakecluster/")


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
        ("[stream]\nwrite_buffer_bytes = 1000", "stream.write_buffer_bytes", ">= 1048576"),
        ('[source]\nkind = "pulsar"', "source.kind", "generator, kafka"),
        ('[table]\nclustering_columns = ["nope"]', "table.clustering_columns", "unknown column 'nope'"),
        ('[table]\npartition_by = ["s_city"]', "table.clustering_columns", "partition columns"),
        ('[table]\nname = "line order"', "table.name", "letters, digits and _.:-"),
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
        open_source(load_config(f, environ={}))  # what every command checks before it runs
    assert info.value.key == key
    assert key in str(info.value) and words in str(info.value)


def test_bad_env_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"stream\.progress"):
        load_config(environ={"LAKECLUSTER_STREAM__PROGRESS": "maybe"})


def test_set_flag_needs_key_value() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["table.path"])


# -- strict types -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "key", "value", "words"),
    [
        ("env", "source.kafka.topics", "ssb", "expected a list, got 'ssb'"),
        ("set", "source.kafka.topics", "ssb", "expected a list, got 'ssb'"),
        ("env", "stream.trigger_interval_s", '"5"', "expected a number, got '5'"),
        ("set", "sketches.k", '"200"', "expected an integer, got '200'"),
        ("set", "sketches.k", "200.0", "expected an integer, got 200.0"),
        ("env", "table.path", "5", "expected a string, got 5"),
        ("set", "stream.id", "2024-01-01", "expected a string, got datetime.date(2024, 1, 1)"),
        ("set", "source.kafka.fail_on_data_loss", "1", "expected true or false, got 1"),
        ("set", "source.kind", "1", "must be one of generator, kafka, got 1"),
        ("set", "spark.conf.spark.driver.memory", "[4]", "expected a string, number or boolean, got [4]"),
    ],
)
def test_a_value_of_the_wrong_type_is_an_error_never_converted(source: str, key: str, value: str, words: str) -> None:
    name = "LAKECLUSTER_" + key.upper().replace(".", "__")
    with pytest.raises(ConfigError) as info:
        if source == "env":
            load_config(environ={name: value})
        else:
            load_config(overrides={key: value}, environ={})
    assert info.value.key == key
    assert words in str(info.value)


def test_numbers_are_numbers_from_every_source(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[compaction]\ninterval_s = 5\n")
    config = load_config(f, environ={"LAKECLUSTER_SKETCHES__K": "300"}, overrides={"metrics.port": "0"})
    assert (config.compaction.interval_s, config.sketches.k, config.metrics.port) == (5.0, 300, 0)
    assert isinstance(config.compaction.interval_s, float)


def test_unknown_key_lists_the_known_keys_of_its_section() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"compaction.orphan_min_age_s": "0"}, environ={})
    assert info.value.key == "compaction.orphan_min_age_s"
    known = ", ".join(sorted(f.name for f in dataclasses.fields(type(Config().compaction))))
    assert str(info.value).endswith(f"unknown key; known keys here: {known}")


def test_option_names_keep_their_dots_from_every_source(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        '[spark.conf]\n"spark.sql.shuffle.partitions" = 4\nspark.driver.memory = "2g"\n'
        '[source.kafka.options]\n"security.protocol" = "SASL_SSL"\n'
    )
    config = load_config(
        f,
        environ={"LAKECLUSTER_SOURCE__KAFKA__OPTIONS__SASL.MECHANISM": "PLAIN"},
        overrides={"spark.conf.spark.sql.shuffle.partitions": "16", "spark.conf.spark.ui.enabled": "false"},
    )
    assert dict(config.spark.conf) == {
        "spark.sql.shuffle.partitions": "16",  # --set wins over the file's quoted name
        "spark.driver.memory": "2g",  # a TOML dotted key is the same dotted name
        "spark.ui.enabled": "false",
    }
    assert dict(config.source.kafka.options) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}


def test_kafka_option_names_in_kafka_pythons_spelling_are_refused_with_the_java_name() -> None:
    with pytest.raises(ConfigError, match=r"source\.kafka\.options\.security_protocol'?: .*'security\.protocol'"):
        load_config(overrides={"source.kind": "kafka", "source.kafka.topics": '["t"]',
                               "source.kafka.options.security_protocol": '"SASL_SSL"'}, environ={})


def test_metrics_bind_loopback_unless_set_otherwise() -> None:
    assert load_config(environ={}).metrics.host == "127.0.0.1"
    assert load_config(environ={"LAKECLUSTER_METRICS__HOST": "0.0.0.0"}).metrics.host == "0.0.0.0"
    assert load_config(overrides={"metrics.host": "10.1.2.3"}, environ={}).metrics.host == "10.1.2.3"
    with pytest.raises(ConfigError, match=r"metrics\.host"):
        load_config(overrides={"metrics.host": '" "'}, environ={})


# -- redaction --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
        "sasl.oauthbearer.client.credentials.client.secret", "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key", "spark.hadoop.fs.s3a.session.token", "spark.authenticate.secret",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "spark.hadoop.fs.azure.sas.token",
        "spark.hadoop.fs.gs.auth.service.account.private.key", "basic.auth.user.info", "s3_access_key_id",
        "s3_secret_access_key", "s3_session_token", "spark.ssl.keyStorePassword",
    ],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize(
    "name",
    ["security.protocol", "sasl.mechanism", "ssl.truststore.location", "spark.sql.shuffle.partitions",
     "bootstrap_servers", "s3_endpoint", "s3_region", "topics", "spark.driver.memory", "monkey"],
)  # fmt: skip
def test_names_that_are_not_secret(name: str) -> None:
    assert not is_secret(name)


def test_describe_redacts_only_secret_values() -> None:
    config = load_config(
        overrides={"storage.s3_secret_access_key": "wJalr/K7MDENG", "source.kafka.options.ssl.key.password": "pw",
                   "source.kafka.options.security.protocol": "SSL"},
        environ={},
    )  # fmt: skip
    shown = describe(config)
    assert shown["storage"]["s3_secret_access_key"] == "***"
    assert shown["storage"]["s3_access_key_id"] is None  # unset stays visible as unset
    assert shown["source"]["kafka"]["options"] == {"ssl.key.password": "***", "security.protocol": "SSL"}
    assert "wJalr" not in json.dumps(shown)
    assert describe(config, redact=False)["storage"]["s3_secret_access_key"] == "wJalr/K7MDENG"


# -- the table's schema -----------------------------------------------------------------------


def _ddl_columns(ddl: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"`(\w+)` ([^`]+?)(?=, `|$)", ddl)}


def test_required_columns_are_not_null_in_the_delta_schema() -> None:
    spec = TableSpec.of_columns(SSB_COLUMNS, ("d_year",))
    columns = _ddl_columns(spec.ddl)
    assert list(columns) == [c.name for c in SSB_COLUMNS]
    assert columns["lo_orderkey"] == "bigint NOT NULL"
    assert columns["lo_revenue"] == "decimal(18,2)"
    assert [n for n, t in columns.items() if t.endswith("NOT NULL")] == ["lo_orderkey"]


def test_required_from_the_config_reaches_the_ddl(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        '[source]\nkind = "kafka"\n[source.kafka]\ntopics = ["t"]\n'
        '[table]\npartition_by = ["day"]\nclustering_columns = ["city"]\ncolumns = [\n'
        '  { name = "id", type = "long", required = true },\n  { name = "city", type = "string", required = true },\n'
        '  { name = "amount", type = "decimal(10,2)", required = true },\n  { name = "day", type = "date" },\n]\n'
    )
    t = load_config(f, environ={}).table
    assert _ddl_columns(TableSpec.of_columns(t.columns, t.partition_by).ddl) == {
        "id": "bigint NOT NULL", "city": "string NOT NULL", "amount": "decimal(10,2) NOT NULL", "day": "date",
    }  # fmt: skip


# -- docs/configuration.md --------------------------------------------------------------------


def _keys(cls: type, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, default) of every leaf field of the config dataclasses."""
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            yield from _keys(f.default_factory, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            yield f"{prefix}{f.name}", default


def _render(value: Any) -> str:
    """A default as the doc writes it: TOML values; none for None; mappings as inline tables."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    raise AssertionError(f"no rendering for {value!r}")


def _documented() -> dict[str, str]:
    """key -> default cell of every row of the doc's ``| key | default | meaning |`` tables."""
    rows: dict[str, str] = {}
    in_table = False
    for line in DOC.read_text().splitlines():
        if line == "| key | default | meaning |":
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            m = re.fullmatch(r"`([\w.]+)`", cells[0])
            assert m and len(cells) >= 3, f"malformed row in {DOC.name}: {line}"
            assert m.group(1) not in rows, f"{m.group(1)} documented twice"
            rows[m.group(1)] = cells[1]
    return rows


def test_doc_lists_exactly_the_config_keys() -> None:
    documented = set(_documented())
    defined = {key for key, _ in _keys(Config)}
    assert sorted(defined - documented) == [], "keys missing from docs/configuration.md"
    assert sorted(documented - defined) == [], "stale keys in docs/configuration.md"


def test_doc_gives_each_default() -> None:
    documented = _documented()
    wrong = {}
    for key, default in _keys(Config):
        if key == "table.columns":
            continue  # a TOML block of its own (below)
        cell = documented.get(key)
        expected = _render(default)
        if cell != (expected if expected == "none" else f"`{expected}`"):
            wrong[key] = (cell, expected)
    assert wrong == {}


def test_doc_gives_the_default_columns() -> None:
    assert "[below](#the-default-columns)" in _documented()["table.columns"]
    text = DOC.read_text()
    block = re.search(r"### The default columns\n+```toml\n(.*?)```", text, re.S)
    assert block is not None
    columns = tomllib.loads(block.group(1))["table"]["columns"]
    assert [(c["name"], c["type"], c.get("required", False)) for c in columns] == [
        (c.name, c.type, c.required) for c in SSB_COLUMNS
    ]


def test_doc_names_the_secret_keys_and_only_secrets_as_such() -> None:
    section = DOC.read_text().split("## Secrets and redaction", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([^`]+)`", section))
    keys = {key for key, _ in _keys(Config)}
    assert {k for k in named if k in keys} == {k for k in keys if is_secret(k)}
    options = [n for n in named if "." in n and not n.startswith(".") and n not in keys]
    assert options and [n for n in options if not is_secret(n)] == []
