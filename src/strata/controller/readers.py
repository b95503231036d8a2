"""Reading files to ingest, checked against the flow's schema before anything is stored."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from strata.model.errors import StrataError
from strata.model.schema import to_table

FORMATS = ("jsonl", "csv", "parquet")


class IngestError(StrataError):
    """A file to ingest does not fit the flow; nothing was appended."""


def _format_of(path: str, fmt: str | None) -> str:
    if fmt:
        if fmt not in FORMATS:
            raise IngestError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        return fmt
    ext = Path(path).suffix.lower().lstrip(".")
    fmt = {"json": "jsonl", "ndjson": "jsonl", "jsonl": "jsonl", "csv": "csv",
           "parquet": "parquet", "pq": "parquet"}.get(ext)
    if fmt is None:
        raise IngestError(f"cannot tell the format of {path!r}; pass --format "
                          f"({', '.join(FORMATS)})")
    return fmt


def read_source(source: Sequence, schema: pa.Schema, fmt: str | None, flow: str) -> pa.Table:
    """All records of ``source`` (files, or a list of dicts) as one table of ``schema``."""
    if source and all(isinstance(s, dict) for s in source):
        return _checked(list(source), schema, flow, "records", lambda i: f"record {i + 1}")
    if not source:
        raise IngestError(f"nothing to ingest into {flow!r}: give at least one file")
    tables = [_read_file(os.fspath(p), schema, _format_of(os.fspath(p), fmt), flow)
              for p in source]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _checked(records: list, schema: pa.Schema, flow: str, where: str, locate) -> pa.Table:
    res = to_table(records, schema)
    if isinstance(res, tuple):
        i, rec, why = res
        raise IngestError(f"{where}, {locate(i)}: does not fit flow {flow!r} "
                          f"({why}); record: {rec!r}. Nothing was ingested.")
    return res


def _read_file(path: str, schema: pa.Schema, fmt: str, flow: str) -> pa.Table:
    if not os.path.exists(path):
        raise IngestError(f"no such file: {path}")
    if fmt == "parquet":
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as e:
            raise IngestError(f"{path}: not a readable Parquet file ({e})") from None
        if set(table.column_names) != set(schema.names):
            raise IngestError(f"{path}: columns {table.column_names} differ from flow "
                              f"{flow!r} ({schema.names}). Nothing was ingested.")
        try:
            return table.select(schema.names).cast(schema, safe=True)
        except (pa.ArrowException, ValueError) as e:
            raise IngestError(f"{path}: column types do not fit flow {flow!r}: {e}. "
                              "Nothing was ingested.") from None
    records: list = []
    lines: list[int] = []
    if fmt == "jsonl":
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise IngestError(f"{path}, line {n}: invalid JSON ({e.msg}). "
                                      "Nothing was ingested.") from None
                lines.append(n)
        return _checked(records, schema, flow, path, lambda i: f"line {lines[i]}")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if set(reader.fieldnames or []) != set(schema.names):
            raise IngestError(f"{path}: header {reader.fieldnames} differs from flow {flow!r} "
                              f"({schema.names}). Nothing was ingested.")
        for n, row in enumerate(reader, 2):
            try:
                records.append({fld.name: _convert(row[fld.name], fld.type) for fld in schema})
            except ValueError as e:
                raise IngestError(f"{path}, row {n}: {e}. Nothing was ingested.") from None
            lines.append(n)
    return _checked(records, schema, flow, path, lambda i: f"row {lines[i]}")


def _convert(text: str, t: pa.DataType):
    if text == "":
        return None
    if pa.types.is_integer(t):
        return int(text)
    if pa.types.is_floating(t):
        return float(text)
    if pa.types.is_boolean(t):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{text!r} is not a boolean")
        return text.lower() in ("true", "1")
    if pa.types.is_string(t):
        return text
    return json.loads(text)  # nested types are written as JSON in CSV cells
