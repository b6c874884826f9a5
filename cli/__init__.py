"""``lakecluster``: the command line, one subcommand per service or task (``lakecluster.cli``).

The composition root of the project: it wires configuration, storage and the components
(``stream``, ``compaction``, ``index``) together; the shared package never imports it.
"""

from lakecluster.cli.main import entry, main

__all__ = ["entry", "main"]
