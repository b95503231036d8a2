"""Strict file readers for ingest (no Spark): good files round-trip, bad ones are named."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata.controller.readers import IngestError, read_source
from strata.model.schema import parse_ddl

SCHEMA = parse_ddl("s string, n bigint, x double, ok boolean")
EXPECTED = pa.Table.from_pylist(
    [{"s": "a", "n": 1, "x": 1.5, "ok": True}, {"s": "", "n": None, "x": 2.0, "ok": False},
     {"s": "c, d", "n": 3, "x": None, "ok": None}], schema=SCHEMA)


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path, schema: pa.Schema = SCHEMA) -> str:
    with pytest.raises(IngestError) as e:
        read_source([path], schema, None, "things")
    msg = str(e.value)
    assert path.name in msg and "Nothing was ingested." in msg and "'things'" in msg
    return msg


# -- good files -------------------------------------------------------------------------
def test_csv_round_trips(tmp_path):
    path = _write(tmp_path, "good.csv",
                  'n,s,x,ok\n1,a,1.5,true\n,"",2,0\n\n3,"c, d",,\n')
    assert read_source([path], SCHEMA, None, "things").equals(EXPECTED)


def test_jsonl_round_trips_with_blank_lines(tmp_path):
    path = _write(tmp_path, "good.jsonl", '{"s": "a", "n": 1, "x": 1.5, "ok": true}\n\n'
                  '{"s": "", "n": null, "x": 2, "ok": false}\n   \n'
                  '{"s": "c, d", "n": 3, "x": null, "ok": null}')
    assert read_source([path], SCHEMA, None, "things").equals(EXPECTED)


def test_parquet_round_trips_and_casts(tmp_path):
    path = tmp_path / "good.parquet"
    pq.write_table(EXPECTED.select(["ok", "x", "n", "s"]).cast(pa.schema(
        [("ok", pa.bool_()), ("x", pa.float32()), ("n", pa.int32()), ("s", pa.string())])), path)
    assert read_source([path], SCHEMA, None, "things").equals(EXPECTED)


def test_files_and_formats_concatenate(tmp_path):
    csv = _write(tmp_path, "a.txt", "s,n,x,ok\na,1,1.5,true\n")
    assert read_source([csv, csv], SCHEMA, "csv", "things").num_rows == 2


def test_nested_and_temporal_columns(tmp_path):
    schema = parse_ddl("tags array<bigint>, p struct<x:double,d:date>, day date, at timestamp")
    rows = [{"tags": [1, 2], "p": {"x": 0.5, "d": dt.date(2024, 1, 2)},
             "day": dt.date(2024, 3, 4), "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)},
            {"tags": None, "p": None, "day": None, "at": None}]
    expected = pa.Table.from_pylist(rows, schema=schema)
    csv = _write(tmp_path, "n.csv", 'tags,p,day,at\n"[1, 2]","{""x"": 0.5, ""d"": '
                 '""2024-01-02""}",2024-03-04,2024-01-02T03:04:05Z\n,,,\n')
    assert read_source([csv], schema, None, "t").equals(expected)
    jsonl = _write(tmp_path, "n.jsonl", '{"tags": [1, 2], "p": {"x": 0.5, "d": "2024-01-02"}, '
                   '"day": "2024-03-04", "at": "2024-01-02T03:04:05Z"}\n'
                   '{"tags": null, "p": null, "day": null, "at": null}\n')
    assert read_source([jsonl], schema, None, "t").equals(expected)
    jsonl = _write(tmp_path, "n.jsonl", '{"tags": [1], "p": null, "day": null, "at": null}\n'
                   '{"tags": ["a"], "p": null, "day": null, "at": null}\n')
    assert "line 2, field 'tags': [\"a\"] is not a list" in _error(jsonl, schema)


def test_timestamps_without_an_offset_are_utc_in_csv_as_in_jsonl(tmp_path):
    schema = parse_ddl("at timestamp, n bigint")
    cells = ["2026-11-27 10:00:00", "2026-11-27T11:00:00+01:00", "2026-11-27T10:30:00Z",
             "2026-11-28", ""]
    utc = [dt.datetime(2026, 11, 27, 10, tzinfo=dt.UTC),
           dt.datetime(2026, 11, 27, 10, tzinfo=dt.UTC),
           dt.datetime(2026, 11, 27, 10, 30, tzinfo=dt.UTC),
           dt.datetime(2026, 11, 28, tzinfo=dt.UTC), None]
    csv = _write(tmp_path, "t.csv", "at,n\n" + "".join(f"{c},{i}\n" for i, c in enumerate(cells)))
    got = read_source([csv], schema, None, "t")
    assert got.column("at").to_pylist() == utc and got.column("n").to_pylist() == [0, 1, 2, 3, 4]
    jsonl = _write(tmp_path, "t.jsonl", "".join(
        f'{{"at": {json_cell}, "n": {i}}}\n' for i, json_cell in enumerate(
            [f'"{c}"' if c else "null" for c in cells])))
    assert read_source([jsonl], schema, None, "t").equals(got)
    bad = _write(tmp_path, "b.csv", "at,n\n2026-11-27 10:00:00,1\nnoon,2\n")
    assert "line 3, column 'at': 'noon' is not a timestamp" in _error(bad, schema)


def test_map_columns(tmp_path):
    schema = parse_ddl("k string, m map<string,array<bigint>>")
    expected = pa.Table.from_pylist([{"k": "a", "m": [("x", [1])]}, {"k": "b", "m": None}],
                                    schema=schema)
    csv = _write(tmp_path, "m.csv", 'k,m\na,"{""x"": [1]}"\nb,\n')
    assert read_source([csv], schema, None, "t").equals(expected)
    jsonl = _write(tmp_path, "m.jsonl", '{"k": "a", "m": {"x": [1]}}\n{"k": "b", "m": null}\n')
    assert read_source([jsonl], schema, None, "t").equals(expected)
    msg = _error(_write(tmp_path, "m.csv", 'k,m\na,"{""x"": [1]}"\nb,"{""x"": 1}"\n'), schema)
    assert "m.csv, line 3, column 'm': '{\"x\": 1}' is not JSON for a map" in msg
    msg = _error(_write(tmp_path, "m.jsonl", '{"k": "a", "m": {}}\n{"k": "b"}\n'), schema)
    assert "m.jsonl, line 2" in msg and "missing ['m']" in msg


def test_empty_files(tmp_path):
    assert read_source([_write(tmp_path, "e.jsonl", "\n")], SCHEMA, None, "t").num_rows == 0
    assert read_source([_write(tmp_path, "e.csv", "s,n,x,ok\n")], SCHEMA, None, "t").num_rows == 0


# -- bad CSV ----------------------------------------------------------------------------
def test_csv_missing_number_field(tmp_path):
    msg = _error(_write(tmp_path, "data.csv", "s,n,x,ok\na,1,1.5,true\nb,2,3.5\n"))
    assert "data.csv, line 3" in msg and "no value for column 'ok'" in msg
    assert "3 fields where the header has 4" in msg


def test_csv_missing_text_field_is_not_null(tmp_path):
    msg = _error(_write(tmp_path, "data.csv", "n,x,ok,s\n1,1.5,true,a\n\n2,3.5,false\n"))
    assert "data.csv, line 3" in msg and "column 's'" in msg  # blank lines are not counted


def test_csv_extra_field_in_a_row(tmp_path):
    msg = _error(_write(tmp_path, "data.csv", "s,n,x,ok\na,1,1.5,true\nb,2,3.5,true,9\n"))
    assert "data.csv, line 3" in msg and "extra value after the last column 'ok'" in msg


@pytest.mark.parametrize("header, missing, extra", [
    ("s,n,x", "['ok']", "[]"), ("s,n,x,ok,z", "[]", "['z']"), ("s,n,x,ok,n", "[]", "['n', 'n']")])
def test_csv_header_mismatch(tmp_path, header, missing, extra):
    msg = _error(_write(tmp_path, "data.csv", header + "\n"))
    assert "data.csv, line 1: header" in msg and f"missing {missing}, unexpected {extra}" in msg


@pytest.mark.parametrize("cell, col, what", [
    ("abc", "n", "'abc' is not an int64"), ("1.5", "n", "'1.5' is not an int64"),
    ("x", "x", "'x' is not a double"), ("maybe", "ok", "'maybe' is not a bool")])
def test_csv_bad_cell(tmp_path, cell, col, what):
    row = {"s": "b", "n": "2", "x": "2.5", "ok": "false"} | {col: cell}
    lines = ["s,n,x,ok"] + ["a,1,1.5,true"] * 5 + [",".join(row.values())] + ["c,3,1,1"]
    msg = _error(_write(tmp_path, "data.csv", "\n".join(lines) + "\n"))
    assert f"data.csv, line 7, column '{col}': {what}" in msg


def test_csv_empty_cell_in_required_column(tmp_path):
    schema = pa.schema([pa.field("s", pa.string()), pa.field("n", pa.int64(), nullable=False)])
    msg = _error(_write(tmp_path, "data.csv", "s,n\na,1\nb,\n"), schema)
    assert "data.csv, line 3, column 'n': empty, but the flow requires a value" in msg


def test_csv_bad_nested_cell(tmp_path):
    schema = parse_ddl("tags array<bigint>")
    msg = _error(_write(tmp_path, "data.csv", 'tags\n"[1]"\n"[1, ""a""]"\n'), schema)
    assert "data.csv, line 3, column 'tags': '[1, \"a\"]' is not JSON for a list" in msg
    msg = _error(_write(tmp_path, "data.csv", 'tags\n"[1]"\n"[1"\n'), schema)
    assert "data.csv, line 3, column 'tags'" in msg


# -- bad JSONL --------------------------------------------------------------------------
GOOD = '{"s": "a", "n": 1, "x": 1.5, "ok": true}\n'


def test_jsonl_extra_key(tmp_path):
    msg = _error(_write(tmp_path, "data.jsonl", GOOD * 2 + '\n{"s": "b", "z": 1}\n'))
    assert "data.jsonl, line 4, field 'z': not a column of the flow" in msg


def test_jsonl_missing_key(tmp_path):
    schema = pa.schema([pa.field("s", pa.string()), pa.field("n", pa.int64(), nullable=False)])
    msg = _error(_write(tmp_path, "data.jsonl", '{"s": "a", "n": 1}\n{"s": "b"}\n'), schema)
    assert "data.jsonl, line 2, field 'n': missing, but the flow requires a value" in msg
    msg = _error(_write(tmp_path, "data.jsonl", '{"s": "a", "n": null}\n'), schema)
    assert "data.jsonl, line 1, field 'n': null" in msg


@pytest.mark.parametrize("value, field, what", [
    ('"abc"', "n", '"abc" is not an int64'), ("1.5", "n", "1.5 is not an int64"),
    ("7", "s", "7 is not a string"), ('"yes"', "ok", '"yes" is not a bool')])
def test_jsonl_wrong_type(tmp_path, value, field, what):
    bad = GOOD.replace(f'"{field}": ' + {"n": "1", "s": '"a"', "ok": "true"}[field],
                       f'"{field}": {value}')
    msg = _error(_write(tmp_path, "data.jsonl", GOOD * 300 + bad + GOOD))
    assert f"data.jsonl, line 301, field '{field}': {what}" in msg


@pytest.mark.parametrize("line", ['{"s": "a", "n": 1', "[1, 2]", GOOD.strip() + " " + GOOD])
def test_jsonl_invalid_json(tmp_path, line):
    msg = _error(_write(tmp_path, "data.jsonl", GOOD + "\n" + line + "\n" + GOOD))
    assert "data.jsonl, line 3:" in msg
    assert "invalid JSON" in msg or "one JSON object per line" in msg


# -- bad Parquet ------------------------------------------------------------------------
def test_parquet_wrong_column_type_names_row_group(tmp_path):
    path = tmp_path / "data.parquet"
    n = pa.array(["1", "2", "3", "x", "5"])
    pq.write_table(EXPECTED.slice(0, 1).take([0] * 5).set_column(1, "n", n), path,
                   row_group_size=2)
    msg = _error(path)
    assert "data.parquet, row group 1 (rows 3-4), column 'n'" in msg
    assert "file type string does not fit the flow's type int64" in msg


def test_parquet_column_set_mismatch(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(EXPECTED.drop_columns(["ok"]), path)
    assert "columns ['s', 'n', 'x'] differ from flow 'things'" in _error(path)


def test_a_missing_jsonl_key_is_refused_even_for_a_nullable_field(tmp_path):
    schema = pa.schema([("s", pa.string()), ("n", pa.int64())])  # both nullable
    path = tmp_path / "gap.jsonl"
    path.write_text('{"s": "a", "n": 1}\n\n{"s": "b", "n": null}\n{"s": "c"}\n')
    with pytest.raises(IngestError) as e:
        read_source([str(path)], schema, None, "things")
    assert "gap.jsonl, line 4, field 'n': missing (write null for no value)" in str(e.value)
    path.write_text('{"s": "a", "n": 1}\n{"n": null, "s": "b"}\n')
    assert read_source([str(path)], schema, None, "things").to_pylist() == [
        {"s": "a", "n": 1}, {"s": "b", "n": None}]
