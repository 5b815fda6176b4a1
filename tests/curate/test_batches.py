"""A curation task holds a bounded number of rows: datatrove's reader decodes and its writer buffers
``BATCH_ROWS`` at a time (one output row group each), whatever the number of rows in the task."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.artifact.columns import COLUMNS
from pipeline.keytokens.curation import BATCH_ROWS, inspect_corpus, shard_writer


def test_reader_and_writer_hold_batch_rows_at_a_time(tmp_path):
    rows = 2 * BATCH_ROWS + 7
    folder = tmp_path / "corpus"
    folder.mkdir()
    table = pa.table({"id": [f"d{i}" for i in range(rows)], "text": [f"w{i} w1" for i in range(rows)]})
    pq.write_table(table, folder / "part-0.parquet")  # one row group of every row
    corpus = inspect_corpus(str(folder), None, "text", "id")
    reader = corpus.reader(by_rows=False)
    assert reader.reader.batch_size == BATCH_ROWS
    writer = shard_writer(corpus, tmp_path / "out", 1)
    scored = ({**dict.fromkeys(COLUMNS, 0)} for _ in range(rows))
    list(writer.run((r for r in _with(reader.run(rank=0, world_size=1), scored)), rank=0, world_size=1))
    (shard,) = (tmp_path / "out" / "data").glob("*.partial")
    groups = pq.ParquetFile(shard).metadata
    assert [groups.row_group(g).num_rows for g in range(groups.num_row_groups)] == [BATCH_ROWS, BATCH_ROWS, 7]
    assert pq.read_table(shard).column("id").to_pylist() == table.column("id").to_pylist()


def _with(rows, columns):
    for row, extra in zip(rows, columns, strict=True):
        row.metadata |= extra
        yield row
