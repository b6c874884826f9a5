"""What lakecluster writes into a commit's ``commitInfo.userMetadata``, and reading it back.

Every commit lakecluster makes carries a JSON object under the key ``lakecluster``: the stream's
id, batch, txn version and source offsets for an append, the curve, columns, generation and
attempt id for a rewrite. Other writers' commits carry none (or other text), which reads as None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# commitInfo.userMetadata of every lakecluster commit is a JSON object under this key.
METADATA_KEY = "lakecluster"


def user_metadata(**fields: Any) -> str:
    """The ``userMetadata`` text of a commit carrying ``fields``."""
    return json.dumps({METADATA_KEY: fields}, sort_keys=True, separators=(",", ":"))


def parse_user_metadata(text: Any) -> dict | None:
    """The lakecluster fields of a commit's ``userMetadata``; None when it carries none."""
    if not isinstance(text, str) or METADATA_KEY not in text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    inner = data.get(METADATA_KEY) if isinstance(data, dict) else None
    return inner if isinstance(inner, dict) else None


def table_properties(configuration: Mapping[str, str | None]) -> dict[str, str]:
    """A table's properties (``metaData.configuration``) that have a value: delta-rs gives a
    property written as null as None, which no reader of a property expects."""
    return {k: v for k, v in configuration.items() if v is not None}
