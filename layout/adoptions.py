"""Adopting a layout: its file, then its record in the table's log.

An adoption (``lakecluster.table.Adoption``) becomes the layout in effect in two steps:

1. **Its file**, ``_lakecluster/layout/adoption-<number>.json``, created put-if-absent on the next
   number (``AdoptionFiles.create``: a hard link on local disks, one ``If-None-Match: *`` PUT on
   S3). Of two compactors adopting at the same moment one creates the file; the other reads the
   winner's and follows it. A compactor first reads the number it means to take: one that scored
   on an old listing learns it lost without a write. Compactors of earlier versions read only these
   files, so they follow every adoption during a rolling upgrade.
2. **Its record**, the table's ``lakecluster.layout`` domain (Delta domain metadata), committed
   through the one commit protocol (``lakecluster/commit.py``) by :class:`LayoutRecordCommit`.
   Every process then reads the layout in effect with the table's log (``LakeTable.layout``). A
   table without the ``domainMetadata`` writer feature gets it first (``ALTER TABLE ... SET
   TBLPROPERTIES ('delta.feature.domainMetadata' = 'supported')``: the protocol's writer version
   goes to 7; readers are unaffected).

A file numbered above the record (an earlier version adopted it, or the adopting compactor stopped
between the two steps) is already in effect, and the next compactor records it
(:meth:`AdoptionStore.record_pending`): the migration of tables adopted on before the record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakecluster import delta_txn
from lakecluster.commit import Transaction, commit, marked
from lakecluster.errors import TableError
from lakecluster.table import LAYOUT_DOMAIN, Adoption, AdoptionFiles, DeltaLocation, LakeTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Delta's refusals of a record commit that mean another commit changed the table meanwhile
# (another compactor recorded the layout, the protocol was upgraded): nothing was committed.
_CONFLICTS = ("Concurrent", "DomainMetadata", "domain metadata", "ProtocolChangedException",
              "MetadataChangedException")  # fmt: skip


class LayoutRecordConflict(TableError):
    """Another commit changed the table while the layout's record was committed: nothing of this
    one landed; the layout in effect is read again."""


@dataclass
class LayoutRecordCommit:
    """The commit of an adoption's record (a :class:`~lakecluster.commit.CommitPlan`)."""

    location: DeltaLocation
    adoption: Adoption
    configuration: str  # the record: ``Adoption.record``
    fail_point: str = "layout_record_after_commit_call"

    @property
    def what(self) -> str:
        return f"the record of adopted layout {self.adoption.number}"

    def precheck(self, txn: Transaction) -> bool:
        """False when the snapshot records this adoption or a newer one already."""
        recorded = _snapshot_domain(txn, LAYOUT_DOMAIN)
        if recorded is None:
            return True
        number = int(json.loads(recorded).get("adoption", {}).get("number", 0))
        return number < self.adoption.number

    def actions(self, now_ms: int) -> list[str]:
        return [json.dumps({"domainMetadata": {"domain": LAYOUT_DOMAIN, "configuration": self.configuration,
                                               "removed": False}})]  # fmt: skip

    def operation(self, jvm: Any) -> Any:
        return getattr(getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$ManualUpdate$"), "MODULE$")

    def metrics(self) -> dict[str, int]:
        return {}

    def metadata(self) -> dict[str, str]:
        return {"service": "compactor", "layout_record": str(self.adoption.number),
                "layout_record_id": self.adoption.id}  # fmt: skip

    def refused(self, text: str) -> Exception | None:
        if any(name in text for name in _CONFLICTS):
            return LayoutRecordConflict(f"another commit changed {self.location.uri} while {self.what} was "
                                        f"committed (nothing of it landed): {delta_txn.first_line(text)}")
        return None

    def landed_in(self, actions: Sequence[dict]) -> bool:
        return marked(actions, "layout_record_id", self.adoption.id)


def _snapshot_domain(txn: Transaction, domain: str) -> str | None:
    """The configuration of ``domain`` in the transaction's snapshot (None: not set)."""
    found = txn.txn.snapshot().domainMetadata()
    for d in txn.jvm.scala.jdk.javaapi.CollectionConverters.asJava(found):
        if str(d.domain()) == domain and not bool(d.removed()):
            return str(d.configuration())
    return None


def record_adoption(spark: SparkSession, table: LakeTable, adoption: Adoption) -> int | None:
    """Commit ``adoption``'s record to the table's log (first giving the table the
    ``domainMetadata`` writer feature if it lacks it); the committed version, None when the log
    records it or a newer one already.

    Raises:
        LayoutRecordConflict: another commit changed the table meanwhile (nothing landed).
        TableError: the commit failed for another reason (nothing landed, or the log cannot tell).
    """
    config = table.config
    metadata = table.live_files().snapshot_with_metadata()[2]
    if "domainMetadata" not in metadata.writer_features:
        log.warning("layout loop: giving %s the domainMetadata writer feature (its protocol's writer version goes "
                    "to 7) to record the adopted layout in its log", table.uri)  # fmt: skip
        try:
            spark.sql(f"ALTER TABLE delta.`{table.uri}` SET TBLPROPERTIES ('delta.feature.domainMetadata' = "
                      "'supported')")  # fmt: skip
        except Exception as e:  # another compactor upgrading it at the same moment: the next look records
            text = f"{type(e).__name__}: {e}"
            if not any(name in text for name in (*_CONFLICTS, "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")):
                raise
            raise LayoutRecordConflict(f"another commit changed {table.uri} while it was given the domainMetadata "
                                       f"feature (nothing of this one landed): {delta_txn.first_line(text)}") from None
    record = adoption.record(config.compaction.curve, config.compaction.group_by_parents, config.table.partition_by)
    return commit(spark, LayoutRecordCommit(table.delta, adoption, record)).version


@dataclass
class AdoptionStore:
    """The layout loop's adoptions on one table: the newest, every one, adopting a new one, and
    the last scoring's recommendation. ``spark`` (a compactor's session) commits records; without
    it the store only writes files, as compactors before the record did."""

    table: LakeTable
    spark: Callable[[], SparkSession] | None = None
    files: AdoptionFiles = field(init=False)

    def __post_init__(self) -> None:
        self.files = self.table.adoptions()

    @property
    def folder(self) -> str:
        return str(self.files.folder)

    def _read(self, path: str) -> dict[str, Any] | None:
        return self.files.read(path)

    def latest(self) -> Adoption | None:
        """The newest adoption: recorded in the log, or a newer file (None: none ever)."""
        return self.table.adoption()[0]

    def all(self) -> list[Adoption]:
        """Every adoption, oldest first (``lakecluster history``)."""
        return self.files.all()

    def adopt(self, adoption: Adoption) -> tuple[Adoption, bool]:
        """Adopt ``adoption`` under its number unless another compactor took that number first,
        then record the winner in the log (see the module's docstring).

        Returns:
            (the adoption under that number, whether it is this one).
        """
        path = self.files.path(adoption.number)
        data = self._read(path)  # taken already: no write needed to know it
        if data is None:
            if self.create(adoption.number, json.dumps(adoption.as_dict(), sort_keys=True).encode()):
                data = adoption.as_dict()
            else:
                data = self._read(path)
                if data is None:  # cannot happen on a consistent store: say so rather than guess
                    raise OSError(f"{path} was refused as existing but cannot be read")
        found = Adoption.from_dict(data)
        # Its own id too when a retried PUT found the file its first attempt had created.
        won = found.id == adoption.id
        if won:
            self.record_pending()
        return found, won

    def create(self, number: int, body: bytes) -> bool:
        """Create ``adoption-<number>.json`` with ``body`` unless it exists: True if this call did."""
        return self.files.create(number, body)

    def record_pending(self) -> None:
        """Record the newest adoption in the log when only its file has it (a compactor of an
        earlier version adopted it, or one stopped between the file and the record). A conflict
        with another compactor recording it too, or any other failure, leaves it to the next look:
        the adoption is in effect from its file meanwhile, and compaction goes on."""
        if self.spark is None:
            return
        adoption, recorded = self.table.adoption()
        if adoption is None or recorded:
            return
        try:
            version = record_adoption(self.spark(), self.table, adoption)
        except LayoutRecordConflict as e:
            log.info("layout loop: %s", e)
            return
        except Exception as e:  # the file keeps the layout in effect; the next round records it
            log.warning("layout loop: recording adopted layout %d in the table's log failed (it stays in effect from "
                        "its file; tried again next round): %s", adoption.number, delta_txn.first_line(str(e)))
            return
        if version is not None:
            log.info("layout loop: adopted layout %d recorded in the table's log at version %d", adoption.number,
                     version)  # fmt: skip

    def write_recommendation(self, data: dict[str, Any]) -> None:
        self.files.write_recommendation(data)

    def recommendation(self) -> dict[str, Any] | None:
        return self.files.recommendation()
