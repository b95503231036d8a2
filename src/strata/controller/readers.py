"""Reading files to ingest with pyarrow's readers, checked against the flow's schema.

A file that does not fit is rejected whole, naming the file, the line (CSV, JSONL) or
row group (Parquet) and the column. Rules:

* CSV: the header must hold exactly the flow's columns (any order). A row with too few
  or too many fields is rejected. An empty cell is ``""`` in a string column and null in
  any other column, which is an error if the field is not nullable. Nested columns
  (lists, structs, maps) hold JSON text. A timestamp without a UTC offset is in UTC,
  as in JSONL. Line numbers count the header as line 1 and one per record; blank lines
  are skipped and not counted.
* JSONL: one JSON object per line; blank lines are allowed. An unexpected key is
  rejected; an absent key is null, which is an error if the field is not nullable.
* Parquet: the same columns as the flow, each castable to the flow's type.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pj
import pyarrow.parquet as pq

from strata.model.errors import StrataError
from strata.model.schema import holds_map, to_table

FORMATS = ("jsonl", "csv", "parquet")
# a NOT NULL column of the flow (a column a window stage reads every record's event
# time or source from, docs/windows.md) without a value
REQUIRED = ("but the flow requires a value (a stage reading it needs one): give every "
            "record one, or drop those records, and ingest the file again")
_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError)
_TRUE, _FALSE = ["true", "True", "TRUE", "1"], ["false", "False", "FALSE", "0"]


class IngestError(StrataError):
    """A file to ingest does not fit the flow; nothing was appended."""


def format_of(path: str, fmt: str | None) -> str:
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


def read_source(source: Sequence, schema: pa.Schema, fmt: str | None, flow: str, *,
                exact_types: bool = False) -> pa.Table:
    """All records of ``source`` (files, or a list of dicts) as one table of ``schema``.
    ``exact_types``: a Parquet file's columns have the flow's types, not types that cast
    to them (a correction of a segment, which replaces rows of that schema)."""
    if source and all(isinstance(s, dict) for s in source):
        return _checked(list(source), schema, flow, "records", lambda i: f"record {i + 1}")
    if not source:
        raise IngestError(f"nothing to ingest into {flow!r}: give at least one file")
    tables = [_read_file(os.fspath(p), schema, format_of(os.fspath(p), fmt), flow,
                         exact_types) for p in source]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _checked(records: list, schema: pa.Schema, flow: str, where: str,
             locate: Callable[[int], str]) -> pa.Table:
    res = to_table(records, schema)
    if isinstance(res, tuple):
        i, rec, why = res
        raise IngestError(f"{where}, {locate(i)}: does not fit flow {flow!r} "
                          f"({why}); record: {rec!r}. Nothing was ingested.")
    return res


def _fail(path: str, where: str, what: str, flow: str) -> IngestError:
    return IngestError(f"{path}, {where}: {what} (flow {flow!r}). Nothing was ingested.")


def _read_file(path: str, schema: pa.Schema, fmt: str, flow: str,
               exact_types: bool = False) -> pa.Table:
    if not os.path.exists(path):
        raise IngestError(f"no such file: {path}")
    if fmt == "parquet":
        return _read_parquet(path, schema, flow, exact_types)
    return {"jsonl": _read_jsonl, "csv": _read_csv}[fmt](path, schema, flow)


# -- helpers ----------------------------------------------------------------------------
def _error_of(fn: Callable[..., Any], *args: Any) -> str | None:
    """The message of the error ``fn(*args)`` raises, or None."""
    try:
        fn(*args)
    except _ERRORS as e:
        return _clean(e)
    return None


def _clean(e: Exception) -> str:
    """pyarrow's message without its "in row N", which counts within a block."""
    return re.sub(r" in row \d+", "", str(e))


def _first_bad(n: int, ok: Callable[[int, int], bool]) -> int | None:
    """Index of the first of ``n`` items that fails, ``ok(lo, hi)`` checking items lo..hi-1."""
    if ok(0, n):
        return None
    lo, hi = 0, n  # items before lo are fine; the first bad one is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(lo, mid) else (lo, mid)
    return lo


def _first_failing(fn: Callable[..., Any], cells: pa.Array, *args: Any) -> int | None:
    """Index of the first cell on which ``fn(cells, *args)`` fails."""
    return _first_bad(len(cells), lambda lo, hi: _error_of(fn, cells[lo:hi], *args) is None)


def _a(t: pa.DataType) -> str:
    return f"{'an' if str(t)[0] in 'aeiou' else 'a'} {t}"


def _json_type(t: pa.DataType) -> pa.DataType:
    """The type pyarrow.json reads for ``t``: dates as text (cast afterwards)."""
    if pa.types.is_date(t):
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_json_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_json_type(f.type)) for f in t])
    return t


# -- JSONL ------------------------------------------------------------------------------
def _jsonl(data: bytes, schema: pa.Schema, unexpected: str = "error") -> pa.Table:
    opts = pj.ParseOptions(unexpected_field_behavior=unexpected, explicit_schema=pa.schema(
        [f.with_type(_json_type(f.type)) for f in schema]))
    return pj.read_json(pa.BufferReader(data), parse_options=opts).cast(schema)


def _records(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line.strip())


def _read_jsonl(path: str, schema: pa.Schema, flow: str) -> pa.Table:
    if holds_map(pa.struct(list(schema))):  # pyarrow.json cannot read maps
        return _read_jsonl_records(path, schema, flow)
    data = Path(path).read_bytes()
    try:
        table = _jsonl(data, schema) if data.strip() else schema.empty_table()
        if table.num_rows == _records(data):  # else a line held no object or several
            _check_keys(path, data, schema, flow)
            return table
    except _ERRORS:
        pass
    lines = data.split(b"\n")
    i = _first_bad(len(lines), lambda lo, hi: _fits(b"\n".join(lines[lo:hi]), schema))
    if i is None:
        raise _fail(path, "line unknown", "the file does not fit", flow)
    field, what = _json_line_problem(lines[i], schema)
    raise _fail(path, f"line {i + 1}{field}", what, flow)


def _check_keys(path: str, data: bytes, schema: pa.Schema, flow: str) -> None:
    """Every object names every field: pyarrow reads an absent key as null, so a missing
    key is found by looking for ``"name":`` on each line (vectorised, no parsing; a key
    written with \\u escapes would not be seen)."""
    lines = pc.list_flatten(pc.split_pattern(pa.array([data.decode("utf-8")]), "\n"))
    filled = pc.match_substring_regex(lines, r"\S")
    for f in schema:
        named = pc.match_substring_regex(lines, '"' + re.escape(f.name) + r'"\s*:')
        absent = pc.and_(filled, pc.invert(named))
        if pc.any(absent).as_py():
            i = pc.index(absent, True).as_py()
            raise _fail(path, f"line {i + 1}, field {f.name!r}",
                        "missing (write null for no value)", flow)


def _fits(chunk: bytes, schema: pa.Schema) -> bool:
    """Whether JSONL text fits ``schema`` with one object on each non-blank line."""
    try:
        return not chunk.strip() or _jsonl(chunk, schema).num_rows == _records(chunk)
    except _ERRORS:
        return False


def _json_line_problem(line: bytes, schema: pa.Schema) -> tuple[str, str]:
    """Why one JSONL line does not fit ``schema``: (``", field 'f'"`` or ``""``, why)."""
    try:
        got = pj.read_json(pa.BufferReader(line))
    except _ERRORS as e:
        return "", f"invalid JSON ({_clean(e)})"
    if got.num_rows != 1:
        return "", "one JSON object per line is expected"
    extra = [n for n in got.column_names if n not in schema.names]
    if extra:
        return f", field {extra[0]!r}", f"not a column of the flow ({', '.join(schema.names)})"
    for f in schema:
        value = got[f.name][0].as_py() if f.name in got.column_names else ...
        if value is ... or value is None:
            if not f.nullable:
                how = "missing" if value is ... else "null"
                return f", field {f.name!r}", f"{how}, {REQUIRED}"
        elif _error_of(_jsonl, line, pa.schema([f]), "ignore"):
            return f", field {f.name!r}", f"{json.dumps(value, default=str)} is not {_a(f.type)}"
    return "", f"does not fit ({_error_of(_jsonl, line, schema)})"


def _read_jsonl_records(path: str, schema: pa.Schema, flow: str) -> pa.Table:
    records: list = []
    lines: list[int] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise _fail(path, f"line {n}", f"invalid JSON ({e.msg})", flow) from None
                lines.append(n)
    return _checked(records, schema, flow, path, lambda i: f"line {lines[i]}")


# -- CSV --------------------------------------------------------------------------------
def _csv(path: str, types: dict[str, pa.DataType], bad: list, threads: bool) -> pa.Table:
    def on_bad(row: Any) -> str:
        bad.append((row.number, row.actual_columns, row.text))
        return "skip"

    return pcsv.read_csv(
        path, read_options=pcsv.ReadOptions(use_threads=threads),
        parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=on_bad),
        convert_options=pcsv.ConvertOptions(
            column_types=types, null_values=[""], strings_can_be_null=False,
            true_values=_TRUE, false_values=_FALSE))


def _check_text(path: str, flow: str) -> None:
    """Refuse a file that is not UTF-8 text (a Parquet file given as CSV, say) before
    pyarrow's CSV reader sees it: its handler of a bad row cannot decode such a row and
    prints the error to stderr itself."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, done = 1, False
    with open(path, "rb") as f:
        while not done:
            chunk = f.read(1 << 20)
            done = not chunk
            pending = len(decoder.getstate()[0])  # bytes of the last chunk's last character
            try:
                decoder.decode(chunk, final=done)
            except UnicodeDecodeError as e:
                line += chunk.count(b"\n", 0, max(e.start - pending, 0))
                raise _fail(path, f"line {line}", "not UTF-8 text, so not CSV (give the "
                            "file's format with --format, or convert the file to UTF-8)",
                            flow) from None
            line += chunk.count(b"\n")


def _read_csv(path: str, schema: pa.Schema, flow: str) -> pa.Table:
    _check_text(path, flow)
    try:
        header = pcsv.open_csv(path, parse_options=pcsv.ParseOptions(
            invalid_row_handler=lambda row: "skip")).schema.names
    except _ERRORS as e:
        raise _fail(path, "line 1", f"no CSV header ({e})", flow) from None
    if sorted(header) != sorted(schema.names):
        missing = [n for n in schema.names if n not in header]
        extra = [n for n in header if n not in schema.names or header.count(n) > 1]
        raise _fail(path, "line 1", f"header {header} differs from the flow's columns "
                    f"{schema.names} (missing {missing}, unexpected {extra})", flow)
    types = {f.name: pa.string() if pa.types.is_nested(f.type) or _zoned(f.type) else f.type
             for f in schema}
    bad: list = []
    try:
        table = _csv(path, types, bad, threads=True)
    except _ERRORS as e:
        raise _csv_problem(path, schema, flow, str(e)) from None
    if bad:
        raise _csv_problem(path, schema, flow, "")
    return pa.Table.from_arrays([_csv_column(path, table[f.name].combine_chunks(), f, flow)
                                 for f in schema], schema=schema)


def _csv_problem(path: str, schema: pa.Schema, flow: str, arrow_msg: str) -> IngestError:
    """Re-read every cell as text to find the first bad row, or cell and its line."""
    bad: list = []
    text = _csv(path, dict.fromkeys(schema.names, pa.string()), bad, threads=False)
    header = text.column_names
    if bad:
        line, n, row = bad[0]
        what = (f"no value for column {header[n]!r}" if n < len(header)
                else f"extra value after the last column {header[-1]!r}")
        return _fail(path, f"line {line}", f"{n} fields where the header has {len(header)}, "
                     f"{what}: {row[:80]!r}", flow)
    found = []
    for f in schema:
        if pa.types.is_nested(f.type) or pa.types.is_string(f.type):
            continue
        cells = text[f.name].combine_chunks()
        i = _first_failing(_cast_text, _empty_as_null(cells), f.type)
        if i is not None:
            found.append((i, f.name, f.type))
    if not found:
        return _fail(path, "line unknown", arrow_msg, flow)
    i, name, t = min(found, key=lambda x: x[0])
    return _fail(path, f"line {i + 2}, column {name!r}",
                 f"{text[name][i].as_py()!r} is not {_a(t)}", flow)


def _json_cells(cells: pa.Array, t: pa.DataType) -> pa.Array:
    """JSON text cells (``""`` is null) as an array of nested type ``t``."""
    if holds_map(t):  # pyarrow.json cannot read maps: parse each cell
        return pa.array([json.loads(c) if c else None for c in cells.to_pylist()], type=t)
    text = pc.replace_substring_regex(cells, r"[\r\n]", " ")  # raw newlines are not JSON
    text = pc.if_else(pc.equal(text, ""), "null", text)
    lines = pc.binary_join_element_wise('{"v":', text, "}", "")
    offsets = pa.array([0, len(lines)], pa.int32())
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, lines), "\n")[0]
    table = _jsonl(joined.as_buffer().to_pybytes(), pa.schema([("v", t)]))
    if table.num_rows != len(cells):
        raise ValueError("a cell holds more than one JSON value")
    return table["v"].combine_chunks()


# a UTC offset after a time of day: 10:00Z, 10:00:00+01:00, 10:00:00.5-0800
_OFFSET = r"\d:\d\d(:\d\d(\.\d*)?)?\s*(Z|[+-]\d\d(:?\d\d)?)$"


def _empty_as_null(cells: pa.Array) -> pa.Array:
    """Text cells with ``""`` as null (how a CSV's empty cell reads outside strings)."""
    return pc.if_else(pc.equal(cells, ""), pa.scalar(None, pa.string()), cells)


def _zoned(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is not None


def _cast_text(cells: pa.Array, t: pa.DataType) -> pa.Array:
    """Text cells (nulls for empty ones) as type ``t``. For a timestamp with a zone, a
    cell without a UTC offset is a UTC time, as in JSONL (pyarrow's CSV reader would
    refuse it)."""
    if not _zoned(t):
        return pc.cast(cells, t)
    zoned = pc.fill_null(pc.match_substring_regex(cells, _OFFSET), False)
    none = pa.scalar(None, pa.string())
    with_offset = pc.cast(pc.if_else(zoned, cells, none), t)
    utc = pc.cast(pc.cast(pc.if_else(zoned, none, cells), pa.timestamp(t.unit)), t)
    return pc.if_else(zoned, with_offset, utc)


def _csv_column(path: str, cells: pa.Array, f: pa.Field, flow: str) -> pa.Array:
    if _zoned(f.type):  # read as text: an empty cell is null, as in other columns
        cells = _empty_as_null(cells)
        try:
            cells = _cast_text(cells, f.type)
        except _ERRORS:
            i = _first_failing(_cast_text, cells, f.type) or 0
            raise _fail(path, f"line {i + 2}, column {f.name!r}",
                        f"{cells[i].as_py()!r} is not {_a(f.type)}", flow) from None
    if pa.types.is_nested(f.type):
        try:
            cells = _json_cells(cells, f.type)
        except _ERRORS:
            i = _first_failing(_json_cells, cells, f.type) or 0
            why = _error_of(_json_cells, cells[i:i + 1], f.type)
            raise _fail(path, f"line {i + 2}, column {f.name!r}", f"{cells[i].as_py()!r} "
                        f"is not JSON for {_a(f.type)} ({why})", flow) from None
    if not f.nullable and cells.null_count:
        i = pc.index(cells.is_null(), True).as_py()
        raise _fail(path, f"line {i + 2}, column {f.name!r}",
                    f"empty, {REQUIRED}", flow)
    return cells


# -- Parquet ----------------------------------------------------------------------------
_KINDS = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_boolean,
          pa.types.is_timestamp, pa.types.is_date, pa.types.is_string,
          pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)


def _same_kind(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether a file's type is the flow's up to its width or unit (int32 for bigint,
    nanoseconds for microseconds), not another kind of value (text for a number)."""
    if got.equals(want):
        return True
    kind = next((k for k in _KINDS if k(want)), None)
    return kind is not None and kind(got) or (
        pa.types.is_string(want) and pa.types.is_large_string(got))


def _read_parquet(path: str, schema: pa.Schema, flow: str, exact_types: bool = False
                  ) -> pa.Table:
    try:
        pf = pq.ParquetFile(path)
        table = pf.read()
    except (pa.ArrowException, OSError) as e:
        raise IngestError(f"{path}: not a readable Parquet file ({e})") from None
    if sorted(table.column_names) != sorted(schema.names):
        raise IngestError(f"{path}: columns {table.column_names} differ from flow "
                          f"{flow!r} ({schema.names}). Nothing was ingested.")
    for f in schema:
        col = table[f.name]
        if exact_types and not _same_kind(col.type, f.type):
            raise _fail(path, f"column {f.name!r}", f"file type {col.type} is not the flow's "
                        f"type {f.type}: write the file with the flow's types", flow)
        if _error_of(col.cast, f.type) is None and (f.nullable or not col.null_count):
            continue
        start = 0
        for g in range(pf.num_row_groups):
            part = pf.read_row_group(g, columns=[f.name]).column(0)
            where = f"row group {g} (rows {start + 1}-{start + len(part)}), column {f.name!r}"
            why = _error_of(part.cast, f.type)
            if why:
                raise _fail(path, where, f"file type {col.type} does not fit the flow's type "
                            f"{f.type} ({why})", flow)
            if not f.nullable and part.null_count:
                row = start + 1 + pc.index(part.is_null(), True).as_py()
                raise _fail(path, f"row {row}, column {f.name!r}", f"null, {REQUIRED}", flow)
            start += len(part)
    return table.select(schema.names).cast(schema)
