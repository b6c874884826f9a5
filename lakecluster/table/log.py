"""The tail of a Delta log: the JSON commits after a version, read directly.

A process that already holds the table's state at version ``v`` (the index, the compactor's live
files) brings it up to date by reading ``_delta_log/<v+1>.json``, ``<v+2>.json``, ... (newline-
delimited actions): work that grows with the new commits, never with the table. When a commit it
needs is gone (log cleanup after a checkpoint), or one changes the table's metadata, the caller
must read the whole snapshot again (:class:`LogGap`).

The functions here take the filesystem and the ``_delta_log`` directory; a table's
:class:`~lakecluster.table.location.DeltaLocation` supplies both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


class LogGap(Exception):
    """The commits after a version cannot be applied one by one: read the whole snapshot."""


def read_commit(fs: Any, log_dir: str, version: int) -> list[dict] | None:
    """The actions of commit ``version``, None when there is no such JSON file."""
    try:
        with fs.open_input_stream(f"{log_dir}/{version:020d}.json") as f:
            text = f.read().decode()
    except FileNotFoundError:
        return None
    return json_lines(text)


def json_lines(text: str) -> list[dict]:
    """The actions of newline-delimited JSON (a commit, a JSON checkpoint)."""
    # Lines end at "\n" only: str.splitlines() also breaks at U+2028, U+0085, ..., which Delta
    # writers leave unescaped inside strings (stats, partition values, user metadata).
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def commit_info(fs: Any, log_dir: str, version: int, chunk: int = 1 << 16) -> dict | None:
    """The ``commitInfo`` of commit ``version``, None when the file or the action is missing.

    Reads the file only up to that action: writers put it first, and a commit of many files can
    be large.
    """
    return first_action(fs, log_dir, version, "commitInfo", chunk)


def first_action(fs: Any, log_dir: str, version: int, kind: str, chunk: int = 1 << 16) -> dict | None:
    """The first action of ``kind`` (``commitInfo``, ``metaData``...) in commit ``version``, None
    when the file or the action is missing; the file is read only up to that action."""
    try:
        stream = fs.open_input_stream(f"{log_dir}/{version:020d}.json")
    except FileNotFoundError:
        return None
    key = f'"{kind}"'.encode()
    with stream:
        pending = b""
        while True:
            data = stream.read(chunk)
            lines = (pending + data).split(b"\n")
            pending = lines.pop() if data else b""
            for line in lines:
                if key in line:
                    action = json.loads(line).get(kind)
                    if isinstance(action, dict):
                        return action
            if not data:
                return None


STAMP_BYTES = 1 << 16


def commit_stamp(fs: Any, log_dir: str, version: int) -> str | None:
    """A hash of the start (up to 64 KiB) of commit ``version``'s file, None when it is gone.

    A commit file is never rewritten, and its start holds what no other table's commit of that
    number holds (its ``commitInfo`` timestamp, or data file names with random UUIDs): a state
    recorded at a version (the index's) is the log's at that version as long as the stamps agree.
    One small read, whatever the size of the commit or the table.
    """
    try:
        with fs.open_input_stream(f"{log_dir}/{version:020d}.json") as f:
            head = f.read(STAMP_BYTES)
    except FileNotFoundError:
        return None
    return hashlib.blake2b(head, digest_size=16).hexdigest()


def last_checkpoint(fs: Any, log_dir: str) -> int | None:
    try:
        with fs.open_input_stream(f"{log_dir}/_last_checkpoint") as f:
            return int(json.loads(f.read())["version"])
    except (FileNotFoundError, KeyError, ValueError):
        return None


def log_exists(fs: Any, log_dir: str) -> bool:
    """Whether a Delta log is in ``log_dir``: its first commit or a checkpoint (cleanup removes
    old commits only once a checkpoint covers them). Cheap: no snapshot is read."""
    infos = fs.get_file_info([f"{log_dir}/{0:020d}.json", f"{log_dir}/_last_checkpoint"])
    return any(info.is_file for info in infos)


def commits_after(fs: Any, log_dir: str, version: int) -> list[list[dict]]:
    """The commits after ``version``, in order; :class:`LogGap` when one of them is gone."""
    commits = []
    while (actions := read_commit(fs, log_dir, version + 1)) is not None:
        commits.append(actions)
        version += 1
    checkpoint = last_checkpoint(fs, log_dir)
    if checkpoint is not None and checkpoint > version:
        raise LogGap(f"commits after version {version} are only in a checkpoint ({checkpoint})")
    return commits


@dataclass(frozen=True)
class NetChanges:
    """Files added and removed by several commits taken together, one entry per path.

    A logical file is its path and its deletion vector (``deletionVector``): a ``DELETE`` that
    writes deletion vectors removes ``(path, old vector)`` and adds ``(path, new vector)`` in one
    commit, in either order. The actions of one commit are a set, so each commit's removes are
    applied before its adds: the path is then live with its new vector (its add action, the
    vector in it), as Delta's own reconciliation keyed by (path, vector id) has it. Across commits
    a later action on a path wins.
    """

    added: dict[str, dict]  # path -> the add action live at the end
    removed: dict[str, dict]  # path -> its remove action, for paths no longer live at the end
    # domain -> its configuration at the end (None: removed), for the domains the commits set
    domains: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def of(cls, commits: list[list[dict]]) -> NetChanges:
        """:class:`LogGap` when a commit changes the table's metadata (schema, partitioning)."""
        added: dict[str, dict] = {}
        removed: dict[str, dict] = {}
        domains: dict[str, str | None] = {}
        for actions in commits:
            if any("metaData" in action for action in actions):
                raise LogGap("a commit changed the table's metadata")
            for action in actions:
                domain = action.get("domainMetadata")
                if isinstance(domain, dict):
                    domains[domain["domain"]] = None if domain.get("removed") else domain.get("configuration") or ""
            for action in actions:
                if "remove" in action:
                    path = action["remove"]["path"]
                    added.pop(path, None)
                    removed[path] = action["remove"]
            for action in actions:
                if "add" in action:
                    path = action["add"]["path"]
                    added[path] = action["add"]
                    removed.pop(path, None)
        return cls(added, removed, domains)
