"""A process and its live descendants, read from /proc (Linux): what the benches measure their
processes by (CPU seconds, RSS, PSS)."""

from __future__ import annotations

import os


def tree_stats(root: int) -> dict[int, list[str]]:
    """pid -> the fields of ``/proc/<pid>/stat`` after the command name, for ``root`` and every live
    descendant, root first: ``[1]`` the parent, ``[11:15]`` utime, stime, cutime and cstime in clock
    ticks, ``[21]`` the RSS in pages. A process gone while the table is read is left out."""
    stats: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    tree: dict[int, list[str]] = {}
    pending = [root]
    while pending:
        pid = pending.pop(0)
        if pid in stats:
            tree[pid] = stats[pid]
        pending.extend(children.get(pid, []))
    return tree
