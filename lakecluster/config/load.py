"""Loading the configuration: defaults < TOML file < ``LAKECLUSTER_*`` environment < ``--set`` flags.

Values are typed strictly: a TOML string where a number or a list is expected, or a number where
a string is expected, is an error naming the key, never a silent coercion. Environment and flag
values are read as TOML values (``3``, ``true``, ``["a", "b"]``, ``"text"``); a value that is not
valid TOML is taken as a plain string, so ``--set table.path=/data/t`` needs no quotes. Error
messages never show the value of a secret key (:func:`~lakecluster.config.describe.is_secret`).

Every error names where the key's value came from (:attr:`ConfigError.source`): the file and
line, the environment variable, or the ``--set`` flag; an unknown key gets the nearest known one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
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
from lakecluster.suggest import nearest

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
    origins = config_origins(path, overrides=overrides, environ=environ)
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
            data = tomllib.loads(text)
        except FileNotFoundError:
            raise _at(ConfigError("--config", f"file not found: {p}"), f"--config {p}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise _at(ConfigError("--config", f"cannot read {p}: {e}"), f"--config {p}") from None
        except tomllib.TOMLDecodeError as e:
            raise _at(ConfigError("--config", f"not valid TOML: {e}"), str(p)) from None
    for name, key, value in _environment(environ):
        _set_path(data, key, _parse_value(value), source=name)
    for key, value in (overrides or {}).items():
        _set_path(data, key, _parse_value(value), source=f"--set {key}")
    try:
        config = _build(Config, data, "")
        validate(config)
    except ConfigError as e:
        raise locate(e, origins) from None
    return config


def config_origins(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Where each key given a value came from, the last source winning as in :func:`load_config`:
    ``"<file> line <n>"``, the environment variable's name, or ``"--set <key>"``."""
    origins: dict[str, str] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            text = ""
        origins.update((key, f"{path} line {line}") for key, line in _file_lines(text).items())
    origins.update((key, name) for name, key, _ in _environment(environ))
    origins.update((key, f"--set {key}") for key in overrides or {})
    return origins


def _environment(environ: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """(variable, dotted key, value) of every ``LAKECLUSTER_*`` configuration variable."""
    env = os.environ if environ is None else environ
    return [(name, ".".join(part.lower() for part in name[len(ENV_PREFIX) :].split("__")), value)
            for name, value in sorted(env.items())
            if name.startswith(ENV_PREFIX) and not name.startswith(TEST_ENV_PREFIX)]  # fmt: skip


def _at(error: ConfigError, source: str) -> ConfigError:
    error.source = source
    return error


def locate(error: ConfigError, origins: Mapping[str, str]) -> ConfigError:
    """``error`` with the sources of its keys (:func:`config_origins`; none for keys left at
    their defaults), and for an unknown key from the environment the variable of the nearest key."""
    sources = [s for key in (error.key, *error.related) if (s := _origin(key, origins)) is not None]
    error.source = ", ".join(dict.fromkeys(sources)) or None
    own = _origin(error.key, origins)
    if error.suggestion and own is not None and own.startswith(ENV_PREFIX):
        name = ENV_PREFIX + "__".join(part.upper() for part in error.suggestion.split("."))
        error.args = (error.args[0].replace(f"'{error.suggestion}'?", f"'{error.suggestion}' ({name})?"),)
    return error


def _origin(key: str, origins: Mapping[str, str]) -> str | None:
    """Where ``key`` came from: the longest of it and its parents that a source gave
    (``table.columns[2].name`` came with ``table.columns``)."""
    parts = re.sub(r"\[\d+\]", "", key).split(".")
    for end in range(len(parts), 0, -1):
        found = origins.get(".".join(parts[:end]))
        if found is not None:
            return found
    below = [origin for given, origin in origins.items() if given.startswith(key + ".")]  # an unknown section
    return below[0] if below else None


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGNMENT = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")


def _file_lines(text: str) -> dict[str, int]:
    """The line of each table header and key assignment of a TOML file, by dotted key."""
    lines: dict[str, int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            section = _dotted(header.group(1))
            lines.setdefault(section, number)
            continue
        assignment = _ASSIGNMENT.match(line)
        if assignment:
            key = _dotted(assignment.group(1))
            lines.setdefault(f"{section}.{key}" if section else key, number)
    return lines


def _dotted(key: str) -> str:
    """A TOML key as one dotted name: parts unquoted, spaces around the dots dropped."""
    return ".".join(part.strip().strip("\"'") for part in re.split(r"\.(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", key))


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Turn ``["a.b=1", ...]`` from ``--set`` flags into a mapping."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _at(ConfigError("--set", "takes key=value, e.g. --set table.path=/data/t"), f"--set {item}")
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
                raise _at(ConfigError(key, f"sets an option below '{part}', which is not a table"), source)
            node[part] = {**_flat(options), ".".join(parts[i + 1 :]): value}
            return
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise _at(ConfigError(key, f"sets a key below '{part}', which is not a section"), source)
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
        match = nearest(unknown[0], fields)
        hint = f"did you mean '{prefix}{match}'? " if match else ""
        raise ConfigError(f"{prefix}{unknown[0]}", f"unknown key; {hint}known keys here: {', '.join(sorted(fields))}",
                          suggestion=f"{prefix}{match}" if match else None)  # fmt: skip
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
        if not math.isfinite(value):  # TOML allows nan and inf; no setting means either
            raise ConfigError(key, f"expected a finite number, got {_shown(key, value)}")
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
