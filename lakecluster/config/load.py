"""Loading the configuration: defaults < TOML file < ``LAKECLUSTER_*`` environment < ``--set`` flags.

Values are typed strictly: a TOML string where a number or a list is expected, or a number where
a string is expected, is an error naming the key, never a silent coercion. Environment and flag
values are read as TOML values (``3``, ``true``, ``["a", "b"]``, ``"text"``); a value that is not
valid TOML is taken as a plain string, so ``--set table.path=/data/t`` needs no quotes. Error
messages never show the value of a secret key (:func:`~lakecluster.config.describe.is_secret`).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from lakecluster.config.describe import REDACTED, is_secret
from lakecluster.config.sections import Config
from lakecluster.config.validate import validate
from lakecluster.errors import ConfigError
from lakecluster.schema import ColumnSpec

ENV_PREFIX = "LAKECLUSTER_"
TEST_ENV_PREFIX = ENV_PREFIX + "TEST_"  # test hooks (faults.py), not configuration


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Load, merge and validate the configuration.

    Args:
        path: a TOML file (None: defaults, environment and overrides only).
        overrides: ``--set`` flags as ``{"dotted.key": "value"}``; values are read as TOML values.
        environ: the environment to read ``LAKECLUSTER_*`` variables from (default: the process's).

    Returns:
        The frozen, validated :class:`Config`.

    Raises:
        ConfigError: an unknown key, a value of the wrong type, or keys that disagree; it names
            the key (``.key``).
    """
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError("--config", f"file not found: {p}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("--config", f"{p} is not valid TOML: {e}") from None
    env = os.environ if environ is None else environ
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and not name.startswith(TEST_ENV_PREFIX):
            key = ".".join(part.lower() for part in name[len(ENV_PREFIX) :].split("__"))
            _set_path(data, key, _parse_value(value), source=name)
    for key, value in (overrides or {}).items():
        _set_path(data, key, _parse_value(value), source=f"--set {key}")
    config = _build(Config, data, "")
    validate(config)
    return config


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Turn ``["a.b=1", ...]`` from ``--set`` flags into a mapping."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, "--set takes key=value, e.g. --set table.path=/data/t")
        out[key.strip()] = value
    return out


def _parse_value(text: str) -> Any:
    """An environment or ``--set`` value: a TOML value if it parses as one, else the plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _set_path(data: dict[str, Any], key: str, value: Any, *, source: str) -> None:
    """Put ``value`` at the dotted ``key`` of the nested ``data``, creating sections on the way.

    Below a table of options (``source.kafka.options``, ``spark.conf``) the rest of the key is one
    option name, dots included: ``spark.conf.spark.sql.shuffle.partitions`` sets the Spark setting
    ``spark.sql.shuffle.partitions``, replacing what the file gave it.
    """
    parts = key.split(".")
    node = data
    cls: Any = Config
    for i, part in enumerate(parts[:-1]):
        tp = _field_type(cls, part)
        if tp is not None and _is_options(tp):
            options = node.get(part, {})
            if not isinstance(options, dict):
                raise ConfigError(key, f"{source} sets an option below '{part}', which is not a table")
            node[part] = {**_flat(options), ".".join(parts[i + 1 :]): value}
            return
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(key, f"{source} sets a key below '{part}', which is not a section")
        node = child
        cls = tp
    node[parts[-1]] = value


def _field_type(cls: Any, name: str) -> Any:
    """The type of field ``name`` of the dataclass ``cls`` (None: not a dataclass or no such field)."""
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        return None
    tp = typing.get_type_hints(cls).get(name)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 else None
    return tp


def _is_options(tp: Any) -> bool:
    return tp is Mapping or typing.get_origin(tp) is Mapping


def _flat(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables of options (TOML dotted keys) as one level of dotted names."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _shown(key: str, value: Any) -> str:
    """``value`` as an error message may show it: never the value of a secret key."""
    return REDACTED if is_secret(key) else repr(value)


def _build(cls: type, data: Any, prefix: str) -> Any:
    """An instance of the dataclass ``cls`` from a TOML table; unknown keys are errors."""
    if not isinstance(data, Mapping):
        key = prefix.rstrip(".") or "<root>"
        raise ConfigError(key, f"expected a section (table), got {_shown(key, data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}", f"unknown key; known keys here: {', '.join(sorted(fields))}")
    kwargs = {name: _convert(hints[name], data[name], f"{prefix}{name}") for name in data}
    return cls(**kwargs)


def _convert(tp: Any, value: Any, key: str) -> Any:
    """``value`` checked against the type ``tp`` of ``key``; ConfigError naming the key when it is not one."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, key)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, value, key + ".")
    if tp is ColumnSpec:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f'expected {{ name = "...", type = "..." }}, got {_shown(key, value)}')
        return _build(ColumnSpec, value, key + ".")
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {', '.join(map(str, args))}, got {_shown(key, value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            hint = f' (write ["{value}"])' if isinstance(value, str) and not is_secret(key) else ""
            raise ConfigError(key, f"expected a list, got {_shown(key, value)}{hint}")
        return tuple(_convert(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is Mapping or tp is Mapping:
        return _options(value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {_shown(key, value)}{_unquote_hint(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {_shown(key, value)}{_unquote_hint(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"expected a number, got {_shown(key, value)}{_unquote_hint(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            shown = "..." if is_secret(key) else str(value)
            hint = f" (write it in quotes; on the command line: --set '{key}=\"{shown}\"')"
            raise ConfigError(key, f"expected a string, got {_shown(key, value)}{hint}")
        return value
    raise ConfigError(key, f"unsupported config type {tp}")  # pragma: no cover - programming error


def _unquote_hint(value: Any) -> str:
    """For a quoted number or boolean: how to write it instead."""
    if isinstance(value, str):
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            return ""
        if isinstance(parsed, bool | int | float):
            return f" (write {value.strip()} without quotes)"
    return ""


def _options(value: Any, key: str) -> Mapping[str, str]:
    """A table of pass-through options (Kafka client properties, Spark settings): string values.

    Numbers and booleans are accepted and written the way Java properties spell them, because
    the systems receiving them take every value as a string. Option names hold dots
    (``sasl.jaas.config``): TOML's dotted keys and ``--set spark.conf.spark.x.y=1`` give nested
    tables, which are joined back into one dotted name.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a table of key = value, got {_shown(key, value)}")
    out: dict[str, str] = {}
    for name, v in _flat(value).items():
        if isinstance(v, bool):
            out[name] = "true" if v else "false"
        elif isinstance(v, str | int | float):
            out[name] = str(v)
        else:
            shown = _shown(f"{key}.{name}", v)
            raise ConfigError(f"{key}.{name}", f"expected a string, number or boolean, got {shown}")
    return types.MappingProxyType(out)
