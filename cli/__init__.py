"""``lakecluster``: the command line, one subcommand per service or task (``lakecluster.cli``).

The composition root of the project: it wires configuration, storage and the components
(``stream``, ``compaction``, ``index``) together; the shared package never imports it.
"""

import sys

from lakecluster.cli import native_logs

native_logs.quiet(sys.argv[1:])  # before anything imports deltalake, which reads RUST_LOG once

from lakecluster.cli.main import entry, main  # noqa: E402

__all__ = ["entry", "main"]
