"""Which stream of the table a configuration is: its id, whatever the table's path is spelled, and
wherever the table was copied, restored or moved to.

A stream's id is ``stream.id``, or derived from its source and the table's path as the
configuration spells it (``paths.stream_id_of``). The id names the stream's app transaction in the
log and its folder ``_lakecluster/streams/<id>/`` (checkpoint, lease, sketches), so a derived id
that changes makes the table see a new stream, which reads its topics again from the start. The
path changes when the table moves (another directory, another bucket, ``s3a://`` written ``s3://``),
and so would the id.

Each stream therefore records what it reads in its folder, ``stream.json`` (its id and its
source's identity: the Kafka servers and topics, the generator's seed), and a configuration
without ``stream.id`` is resolved against the records the table carries with it:

1. the folder of the id derived from this configuration exists: that stream (as before);
2. a record names this source: that stream, under its recorded id (the table moved);
3. a stream of the table reads what this source reads (the same topics or pattern) under another
   identity (other servers, say), or a stream written before records existed may be this one (its
   commits read one of these topics, or it is a generator too): refused with one line naming
   ``stream.id`` (set it to continue that stream, or to a new id to read the source again);
4. otherwise a stream new to the table, under the derived id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from lakecluster import storage
from lakecluster.errors import ConfigError
from lakecluster.table.paths import stream_id_of

if TYPE_CHECKING:
    from lakecluster.config import Config

RECORD = "stream.json"


@dataclass(frozen=True)
class StreamRecord:
    """What a stream's ``stream.json`` says: its id and its source's identity."""

    id: str
    source: Mapping[str, Any]


def record_of(config: Config, stream_id: str) -> bytes:
    return json.dumps({"id": stream_id, "source": config.source.identity(), "recorded_at": time.time()},
                      sort_keys=True).encode()  # fmt: skip


def write_record(config: Config, streams_uri: str, stream_id: str) -> None:
    """Record the stream in its folder once (a record there is kept: it names what the id reads)."""
    storage.create_if_absent(f"{streams_uri}/{stream_id}/{RECORD}", record_of(config, stream_id), config.storage)


def read_records(fs: pafs.FileSystem, streams: str) -> dict[str, StreamRecord | None]:
    """Every stream folder of the table: its record, or None for a folder without one (a stream
    written before records existed)."""
    try:
        folders = [i for i in fs.get_file_info(pafs.FileSelector(streams, allow_not_found=True))
                   if i.type == pafs.FileType.Directory]
    except FileNotFoundError:
        return {}
    out: dict[str, StreamRecord | None] = {}
    for info in folders:
        try:
            with fs.open_input_stream(f"{info.path}/{RECORD}") as f:
                raw = json.loads(f.read())
            out[info.base_name] = StreamRecord(str(raw["id"]), dict(raw["source"]))
        except FileNotFoundError:
            out[info.base_name] = None
        except (OSError, ValueError, KeyError, TypeError):
            out[info.base_name] = None  # unreadable: as unknown as a folder without a record
    return out


def resolve(config: Config, records: Mapping[str, StreamRecord | None],
            last_commit: Callable[[str], Mapping[str, Any] | None]) -> str:  # fmt: skip
    """The id of ``config``'s stream on a table whose stream folders hold ``records``;
    ``last_commit(id)`` is the lakecluster metadata of that stream's newest commit (None: none),
    what a folder without a record says of its stream.

    Raises:
        ConfigError: (``stream.id``) the table holds a stream this one may be under another id.
    """
    if config.stream.id:
        return config.stream.id
    derived = stream_id_of(config)
    if derived in records:
        return derived
    identity = dict(config.source.identity())
    same = sorted(i for i, r in records.items() if r is not None and dict(r.source) == identity)
    if len(same) == 1:
        return same[0]
    if same:
        raise ConfigError("stream.id", f"the table holds {len(same)} streams of this source ({', '.join(same)}); "
                                       "set stream.id to the one to continue")  # fmt: skip
    for other, record in sorted(records.items()):
        if record is None and _may_be(identity, last_commit(other)):
            raise ConfigError("stream.id", (
                f"the table holds stream {other}, written before lakecluster recorded what a stream reads, and this "
                f"configuration's stream would be a new one ({derived}, derived from the table's path as written "
                f"now): set stream.id = \"{other}\" to continue it, or stream.id = \"{derived}\" to read the source "
                "again into the table"))  # fmt: skip
        if record is not None and _overlaps(identity, dict(record.source)):
            raise ConfigError("stream.id", (
                f"the table holds stream {other}, which reads {_describe(dict(record.source))}; this configuration "
                f"reads {_describe(identity)}: set stream.id = \"{other}\" to continue that stream with these "
                f"settings, or stream.id = \"{derived}\" to read the source again into the table"))  # fmt: skip
    return derived


def _may_be(identity: Mapping[str, Any], meta: Mapping[str, Any] | None) -> bool:
    """Whether a stream that left no record (only its commits' metadata: the source kind, the
    offsets it read) may read what ``identity`` reads: a generator may (its seed is not recorded);
    a Kafka stream may when it read one of the topics (its servers are not recorded either)."""
    if meta is None or meta.get("source") != identity.get("kind"):
        return False  # a folder no commit names (sketches built from the table), or another kind
    if identity["kind"] != "kafka":
        return True
    offsets = meta.get("offsets")
    read = set(json.loads(offsets) if isinstance(offsets, str) else offsets or {})
    return bool(read & set(identity.get("topics") or ())) or bool(identity.get("pattern"))


def _overlaps(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether two sources of one kind read some of the same records."""
    if ours.get("kind") != theirs.get("kind"):
        return False
    if ours["kind"] != "kafka":
        return False  # a generator of another seed makes other rows
    if set(ours.get("topics") or ()) & set(theirs.get("topics") or ()):
        return True
    return bool(ours.get("pattern")) and ours.get("pattern") == theirs.get("pattern")


def _describe(identity: Mapping[str, Any]) -> str:
    if identity.get("kind") == "kafka":
        what = f"topics {', '.join(identity.get('topics') or ())}" if identity.get("topics") else \
            f"topics matching {identity.get('pattern')}"  # fmt: skip
        return f"{what} from {', '.join(identity.get('servers') or ())}"
    return json.dumps(dict(identity), sort_keys=True)
