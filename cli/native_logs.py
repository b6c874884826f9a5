"""The native libraries' own loggers, kept off the terminal unless ``--debug`` asks for them.

delta-rs logs from Rust (the AWS SDK's ``WARN aws_config::imds`` lines when no credentials are
found, hundreds of characters each) at the level ``RUST_LOG`` sets, read once, when ``deltalake``
is first imported. So the level is set before the command line imports anything that imports it:
off, unless ``--debug`` is on the command line or the environment sets ``RUST_LOG`` itself. The
failures those lines are about reach lakecluster as exceptions, and its one-line message names them.
(Spark's JVM logging follows ``spark.log_level``: ``lakecluster.spark``.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

RUST_LOG = "RUST_LOG"


def quiet(argv: Sequence[str]) -> None:
    """``RUST_LOG=off`` for this process unless ``argv`` has ``--debug`` or ``RUST_LOG`` is set."""
    if "--debug" not in argv and RUST_LOG not in os.environ:
        os.environ[RUST_LOG] = "off"
