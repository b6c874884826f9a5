"""The live rows of a table's data files: deletion vectors applied wherever the reader's batches
end, columns a file lacks read as null, no more memory held than the rows need."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakecluster.table.deletion_vectors import DeletionVector
from lakecluster.table.file_rows import LiveFile, file_head, live_batches, read_live
from tests.lakecluster.test_deletion_vectors import portable, z85_encode


def test_file_head_reads_the_first_rows_as_the_schema_asks_and_holds_no_more(tmp_path) -> None:  # type: ignore[no-untyped-def]
    n = 150_000
    text = pc.utf8_lpad(pc.cast(pa.array(np.arange(n)), pa.string()), 40, "0")
    pq.write_table(pa.table({"text": text, "n": pa.array(np.arange(n), pa.int32())}), tmp_path / "old.parquet",
                   row_group_size=100_000)  # fmt: skip
    schema = pa.schema([("n", pa.int64()), ("text", pa.string()), ("added_later", pa.string())])
    fs = pafs.LocalFileSystem()
    head = file_head(fs, str(tmp_path), LiveFile("old.parquet"), 300, schema)
    assert head.schema == schema and head.num_rows == 300
    assert head["n"].to_pylist() == list(range(300)) and head["text"][299].as_py() == f"{299:040d}"
    assert head["added_later"].null_count == 300  # a column the file was written without
    assert head.get_total_buffer_size() <= 1.1 * head.nbytes + 4096
    assert file_head(fs, str(tmp_path), LiveFile("old.parquet"), 10 * n, schema).num_rows == n  # asked past the end
    assert file_head(fs, str(tmp_path), LiveFile("old.parquet"), 0, schema).num_rows == 0


def test_the_live_rows_of_files_with_and_without_vectors_in_their_order(tmp_path: Path) -> None:
    """Files with a vector lose exactly its rows, wherever the reader's batches end; a column a
    file lacks reads as null; file_head counts only live rows."""
    fs, root = pafs.LocalFileSystem(), str(tmp_path)
    for i in range(3):
        pq.write_table(pa.table({"n": pa.array(range(i * 1000, i * 1000 + 1000), pa.int32())}),
                       tmp_path / f"f{i}.parquet", row_group_size=300)  # fmt: skip
    data = portable([0, 1, 299, 300, 301, 999])
    inline = DeletionVector("i", z85_encode(data), None, len(data), 6)
    files = [LiveFile("f0.parquet"), LiveFile("f1.parquet", inline), LiveFile("f2.parquet")]
    schema = pa.schema([("n", pa.int64()), ("later", pa.string())])
    expected = [*range(1000), *[n for n in range(1000, 2000) if n - 1000 not in {0, 1, 299, 300, 301, 999}],
                *range(2000, 3000)]  # fmt: skip
    table = read_live(fs, root, files, schema)
    assert table["n"].to_pylist() == expected and table["later"].null_count == len(expected)
    for batch_rows in (7, 256, 5000):
        got = [n for b in live_batches(fs, root, files, schema, columns=["n"], batch_rows=batch_rows)
               for n in b.column("n").to_pylist()]  # fmt: skip
        assert got == expected
    head = file_head(fs, root, files[1], 300, schema)
    assert head["n"].to_pylist() == [n for n in range(1002, 1306) if n not in (1299, 1300, 1301)][:300]
    assert file_head(fs, root, files[1], 5000, schema).num_rows == 994
    assert file_head(fs, root, files[0], 0, schema).num_rows == 0


_READ_ONE_BATCH = """
import sys
import pyarrow as pa, pyarrow.fs as pafs, pyarrow.parquet as pq
from lakecluster.table.file_rows import LiveFile, live_batches
schema = pq.read_schema(sys.argv[1] + "/wide.parquet")
batch = next(live_batches(pafs.LocalFileSystem(), sys.argv[1], [LiveFile("wide.parquet")], schema, batch_rows=1000))
print(batch.num_rows, pa.default_memory_pool().max_memory())
"""


def test_a_batch_of_a_large_row_group_is_read_without_decoding_the_row_group(tmp_path: Path) -> None:
    """A rewrite task reads a slice a batch at a time: the Arrow memory it takes follows the batch,
    not the row group (a dataset scan decoded whole row groups ahead, 500 MiB on SSB's rows)."""
    import subprocess
    import sys

    n = 300_000
    text = pc.utf8_lpad(pc.cast(pa.array(np.arange(n)), pa.string()), 100, "x")
    wide = pa.table({"n": pa.array(np.arange(n)), "text": text})
    pq.write_table(wide, tmp_path / "wide.parquet", row_group_size=n)  # one row group, 30 MB decoded
    out = subprocess.run([sys.executable, "-c", _READ_ONE_BATCH, str(tmp_path)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    rows, peak = map(int, out.stdout.split())
    assert rows == 1000
    assert peak < wide.nbytes / 2, f"reading 1,000 rows took {peak:,} bytes of a {wide.nbytes:,}-byte row group"
