"""docker/compose.yaml as Docker Compose would see it, without a Docker engine or the compose plugin:
its `${VAR}` references resolved from a given environment (Compose's interpolation rules), the
configurations it inlines, and the apache/kafka image's mapping of `KAFKA_*` variables to broker
settings. The deployment tests check these and run real servers with them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"
COMPOSE = DOCKER / "compose.yaml"

# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}; $$ is a literal $.
_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


class MissingVariable(ValueError):
    """A required variable (``${VAR:?message}``) is unset or empty: ``docker compose`` stops with the message."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"required variable {name} is missing a value: {message}")
        self.name = name


def variables(node: Any) -> dict[str, str | None]:
    """Every variable the strings in ``node`` reference: {name: its operator (``:-``, ``:?``, ...) or None}."""
    if isinstance(node, list):
        return {k: v for n in node for k, v in variables(n).items()}
    if isinstance(node, dict):
        return {k: v for n in node.values() for k, v in variables(n).items()}
    return {m.group(1): m.group(2) for m in _REFERENCE.finditer(str(node)) if m.group(1)}


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with its references replaced as Docker Compose replaces them from ``environ``."""

    def replace(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if name is None:
            return "$"
        current = environ.get(name)
        missing = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":-", "-"):
            return arg if missing else str(current)
        if op in (":?", "?"):
            if missing:
                raise MissingVariable(name, arg)
            return str(current)
        return current or ""

    return _REFERENCE.sub(replace, value)


def _resolve(node: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, environ)
    if isinstance(node, list):
        return [_resolve(n, environ) for n in node]
    if isinstance(node, dict):
        return {k: _resolve(v, environ) for k, v in node.items()}
    return node


def load(environ: Mapping[str, str]) -> dict[str, Any]:
    """The compose file with every reference resolved from ``environ``.

    Raises:
        MissingVariable: the first required variable ``environ`` lacks.
    """
    return _resolve(yaml.safe_load(COMPOSE.read_text()), environ)


def raw() -> dict[str, Any]:
    """The compose file as written (references unresolved)."""
    return yaml.safe_load(COMPOSE.read_text())


def example_environment() -> dict[str, str]:
    """The variables docker/.env.example sets, with a value for each empty one (as a user fills them in)."""
    out = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            name = name.strip()
            filled = f"https://example.invalid/{name.lower()}" if name.endswith("_URL") else f"example-{name.lower()}"
            out[name] = value.strip() or filled
    return out


def alertmanager_config(webhook_url: str, **timing: str) -> dict[str, Any]:
    """The compose deployment's Alertmanager configuration, posting to ``webhook_url``; ``timing``
    replaces route settings (``group_wait="1s"``, ...)."""
    environ = {**example_environment(), "ALERT_WEBHOOK_URL": webhook_url}
    config: dict[str, Any] = yaml.safe_load(load(environ)["configs"]["alertmanager"]["content"])
    config["route"].update(timing)
    return config


# Environment variables of the apache/kafka image that configure the JVM or the image, not the broker.
_KAFKA_IMAGE_VARIABLES = {"KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
                          "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL",
                          "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME"}  # fmt: skip
# Where the image keeps the log when no KAFKA_LOG_DIRS is given: inside the container.
KAFKA_IMAGE_LOG_DIRS = "/tmp/kraft-combined-logs"


def kafka_settings(environment: Mapping[str, object]) -> dict[str, str]:
    """Broker settings from a service's ``KAFKA_*`` environment, as the apache/kafka image derives
    them: the prefix dropped, lower case, ``___`` -> ``_``, ``__`` -> ``-``, ``_`` -> ``.``; the
    image's log directory when none is set."""
    out = {}
    for name, value in environment.items():
        if not name.startswith("KAFKA_") or name in _KAFKA_IMAGE_VARIABLES:
            continue
        key = name[len("KAFKA_"):].lower().replace("___", "\0").replace("__", "-").replace("_", ".").replace("\0", "_")
        out[key] = str(value)
    out.setdefault("log.dirs", KAFKA_IMAGE_LOG_DIRS)
    return out


def named_volumes(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's named volumes: {path in the container: volume name} (bind mounts left out)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if not source.startswith((".", "/")):
            out[target] = source
    return out
