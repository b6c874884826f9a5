"""The effective configuration as plain data, with secrets redacted (``lakecluster config``, logs)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from lakecluster.config.sections import Config

REDACTED = "***"
# Names of settings whose values are credentials: SASL/SSL passwords and JAAS configs in Kafka
# options, S3 keys and tokens, Azure account keys, HTTP basic-auth user info, Spark settings
# carrying any of them. A superset of Spark's own spark.redaction.regex.
_SECRET = re.compile(
    r"(password|passwd|secret|token|jaas|credential|access[._-]?key|private[._-]?key|account[._-]?key"
    r"|user[._-]?info|\bkey$)",
    re.I,
)


def is_secret(name: str) -> bool:
    """Whether a setting of this name (a config key or an option name) holds a credential."""
    return bool(_SECRET.search(name))


def describe(config: Config, *, redact: bool = True) -> dict[str, Any]:
    """Every key and its effective value; values of secret-looking keys become ``***``."""

    def plain(v: Any, name: str) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name), f.name) for f in dataclasses.fields(v)}
        if isinstance(v, Mapping):
            return {k: plain(x, k) for k, x in v.items()}
        if isinstance(v, tuple):
            return [plain(x, name) for x in v]
        if redact and v is not None and isinstance(v, str) and is_secret(name):
            return REDACTED
        return v

    return plain(config, "")
