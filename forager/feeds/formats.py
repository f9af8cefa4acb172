"""A feed file in its format, written chunk by chunk: JSON Lines, CSV (cells as the exports
write them) or Parquet (pyarrow: one row group per chunk, an explicit schema so every file of a
feed has the same columns whatever its rows hold).

Writers are synchronous and run on a thread (``forager.feeds.runs``)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import IO, Any, Protocol

from forager.parse.items import canonical
from forager.products.export import csv_cell

EXTENSIONS = {"jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}
MEDIA_TYPES = {
    "jsonl": "application/x-ndjson",
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
}
_INTEGERS = frozenset({"id", "product_id", "domain_id", "version", "crawl_task_id", "review_count"})
_BOOLEANS = frozenset({"is_available"})
_STRING_LISTS = frozenset({"image_urls"})


class FileWriter(Protocol):
    def write(self, records: list[dict[str, Any]]) -> None: ...

    def close(self) -> None:
        """Finish the file, flushed to disk (fsync)."""


class _TextWriter:
    def __init__(self, path: Path, fields: tuple[str, ...], fmt: str) -> None:
        self.fields = fields
        self.fmt = fmt
        self.file: IO[bytes] = path.open("wb")
        if fmt == "csv":
            self.file.write(self._csv([list(fields)]))

    @staticmethod
    def _csv(rows: list[list[Any]]) -> bytes:
        buffer = io.StringIO()
        csv.writer(buffer).writerows(rows)
        return buffer.getvalue().encode()

    def write(self, records: list[dict[str, Any]]) -> None:
        if self.fmt == "csv":
            self.file.write(self._csv([[_cell(r.get(f)) for f in self.fields] for r in records]))
        else:
            self.file.write(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
            )

    def close(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def _cell(value: Any) -> Any:
    return csv_cell(canonical(value) if isinstance(value, dict) else value)


class _ParquetWriter:
    def __init__(self, path: Path, fields: tuple[str, ...]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa = pa
        self.fields = fields
        self.schema = pa.schema([(name, _arrow_type(pa, name)) for name in fields])
        self.path = path
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")

    def write(self, records: list[dict[str, Any]]) -> None:
        columns = {
            name: [_parquet_value(name, r.get(name)) for r in records] for name in self.fields
        }
        self.writer.write_table(self.pa.table(columns, schema=self.schema))

    def close(self) -> None:
        self.writer.close()
        with self.path.open("rb") as done:
            os.fsync(done.fileno())


def _arrow_type(pa: Any, name: str) -> Any:
    if name in _INTEGERS:
        return pa.int64()
    if name in _BOOLEANS:
        return pa.bool_()
    if name in _STRING_LISTS:
        return pa.list_(pa.string())
    return pa.string()


def _parquet_value(name: str, value: Any) -> Any:
    """A record's value as its column's type: objects as canonical JSON text."""
    if value is None or name in _INTEGERS or name in _BOOLEANS or name in _STRING_LISTS:
        return value
    if isinstance(value, dict | list):
        return canonical(value) if isinstance(value, dict) else json.dumps(value)
    return str(value)


def open_writer(path: Path, fmt: str, fields: tuple[str, ...]) -> FileWriter:
    """A writer of a new ``fmt`` file at ``path`` (replacing any file there)."""
    if fmt == "parquet":
        return _ParquetWriter(path, fields)
    return _TextWriter(path, fields, fmt)
