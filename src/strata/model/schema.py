"""Flow schemas: declared as Spark DDL, held as Arrow schemas, checked on write."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import sqlglot
from sqlglot import exp

from strata.model.errors import DataflowError

SchemaLike: TypeAlias = "str | pa.Schema | Mapping[str, Any]"

_SIMPLE = {
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.CHAR: pa.string(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.BINARY: pa.binary(),
    exp.DataType.Type.VARBINARY: pa.binary(),
    exp.DataType.Type.DATE: pa.date32(),
    exp.DataType.Type.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPLTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPNTZ: pa.timestamp("us"),
}
_PY = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_(), bytes: pa.binary()}


def _arrow_type(dt: exp.DataType) -> pa.DataType:
    t = dt.this
    if t in _SIMPLE:
        return _SIMPLE[t]
    if t == exp.DataType.Type.DECIMAL:
        p, s = (int(e.name) for e in dt.expressions) if dt.expressions else (10, 0)
        return pa.decimal128(p, s)
    if t == exp.DataType.Type.ARRAY:
        return pa.list_(_arrow_type(dt.expressions[0]))
    if t == exp.DataType.Type.MAP:
        return pa.map_(_arrow_type(dt.expressions[0]), _arrow_type(dt.expressions[1]))
    if t == exp.DataType.Type.STRUCT:
        return pa.struct([pa.field(c.name, _arrow_type(c.args["kind"])) for c in dt.expressions])
    raise DataflowError(f"unsupported column type {dt.sql('spark')!r}")


@functools.lru_cache(maxsize=512)
def parse_ddl(ddl: str) -> pa.Schema:
    """Parse Spark DDL such as ``"url string, count long, tags array<string>"`` (memoized:
    tasks parse the same few schemas on every call)."""
    try:
        tree = sqlglot.parse_one(f"CREATE TABLE t ({ddl})", read="spark")
    except sqlglot.errors.ParseError as e:
        raise DataflowError(f"cannot parse schema {ddl!r}: {e}") from None
    cols = tree.this.expressions
    if not cols or not all(isinstance(c, exp.ColumnDef) for c in cols):
        raise DataflowError(f"schema {ddl!r} must be a list of 'name type' columns")
    return pa.schema([pa.field(c.name, _arrow_type(c.args["kind"]), not _not_null(c))
                      for c in cols])


def _not_null(column: exp.ColumnDef) -> bool:
    """Whether the column is declared ``NOT NULL`` (a flow whose stage needs a value
    there: ingest refuses a record without one)."""
    return any(isinstance(c.args.get("kind"), exp.NotNullColumnConstraint)
               for c in column.args.get("constraints") or ())


def to_arrow_schema(schema: SchemaLike) -> pa.Schema:
    """Accept DDL, a ``pyarrow.Schema`` or a mapping of column → Python/Arrow/DDL type."""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        return parse_ddl(schema)
    if isinstance(schema, Mapping):
        fields = []
        for name, t in schema.items():
            if isinstance(t, pa.DataType):
                fields.append(pa.field(name, t))
            elif t in _PY:
                fields.append(pa.field(name, _PY[t]))
            elif isinstance(t, str):
                fields.append(pa.field(name, parse_ddl(f"x {t}").field("x").type))
            else:
                raise DataflowError(f"column {name!r}: unsupported type {t!r}")
        return pa.schema(fields)
    raise DataflowError(f"a schema must be DDL, a pyarrow.Schema or a mapping, not {schema!r}")


def type_ddl(t: pa.DataType) -> str:
    """Spark DDL of an Arrow type (the inverse of the parser above)."""
    for sql, arrow in _DDL_NAMES.items():
        if t == arrow:
            return sql
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return f"array<{type_ddl(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{type_ddl(t.key_type)},{type_ddl(t.item_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{type_ddl(f.type)}" for f in t) + ">"
    raise DataflowError(f"type {t} has no Spark DDL equivalent")


_DDL_NAMES = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
              "smallint": pa.int16(), "tinyint": pa.int8(), "double": pa.float64(),
              "float": pa.float32(), "boolean": pa.bool_(), "binary": pa.binary(),
              "date": pa.date32()}


def to_ddl(schema: pa.Schema) -> str:
    """The schema as Spark DDL (``"url string, count bigint"``, ``NOT NULL`` after a
    field that is not nullable); parses back to itself."""
    return ", ".join(f"{f.name} {type_ddl(f.type)}{'' if f.nullable else ' NOT NULL'}"
                     for f in schema)


def same_columns(a: str, b: str) -> bool:
    """Whether two DDL schemas have the same columns and types, NOT NULL or not."""
    return a == b or [(f.name, f.type) for f in parse_ddl(a)] == [
        (f.name, f.type) for f in parse_ddl(b)]


def requiring(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    """``schema`` with ``columns`` not nullable: every record needs a value there."""
    return pa.schema([f.with_nullable(False) if f.name in columns else f for f in schema])


def first_misfit(records: Sequence[dict], schema: pa.Schema) -> tuple[int, dict, str] | None:
    """Find the first record that does not fit ``schema``: (index, record, reason)."""
    names = set(schema.names)
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            return i, rec, f"expected a dict with columns {sorted(names)}, got {type(rec).__name__}"
        if rec.keys() != names:
            missing, extra = sorted(names - rec.keys()), sorted(rec.keys() - names)
            return i, rec, f"columns differ from the schema (missing {missing}, unexpected {extra})"
        try:
            pa.Table.from_pylist([rec], schema=schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            return i, rec, str(e)
    return None


def records_of(data: pa.Table | pa.RecordBatch) -> list[dict]:
    """Python records of Arrow data, as every flow hands them to translate (maps as dicts).

    Records are what their schema makes of them: a value written as ``1`` to a
    ``double`` column is read back as ``1.0`` in every execution mode.
    """
    rows = data.to_pylist()
    if not _has_map(data.schema):
        return rows
    # to_pylist gives a map as (key, value) pairs; its maps_as_pydicts option is pyarrow 20's
    # (strata supports 18), so the columns holding a map are made dicts here
    maps = [(f.name, f.type) for f in data.schema if holds_map(f.type)]
    for row in rows:
        for name, kind in maps:
            row[name] = _as_dicts(row[name], kind)
    return rows


def _as_dicts(value: Any, kind: pa.DataType) -> Any:
    """``value``, as ``to_pylist`` gives it for type ``kind``, with every map a dict (a
    key twice is a KeyError, as pyarrow's ``maps_as_pydicts="strict"``)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        out = {}
        for key, item in value:
            if key in out:
                raise KeyError(f"the map {value!r} has the key {key!r} twice")
            out[key] = _as_dicts(item, kind.item_type)
        return out
    if pa.types.is_dictionary(kind):
        return _as_dicts(value, kind.value_type)
    if not _types_hold_map((kind,)):
        return value
    if pa.types.is_struct(kind):
        return {f.name: _as_dicts(value[f.name], f.type) for f in kind}
    return [_as_dicts(v, kind.value_type) for v in value]  # a list of some kind


def _has_map(schema: pa.Schema) -> bool:
    # keyed by the column types: a schema with metadata is unhashable before pyarrow 17
    return _types_hold_map(tuple(schema.types))


@functools.lru_cache(maxsize=256)
def _types_hold_map(types: tuple[pa.DataType, ...]) -> bool:
    return any(holds_map(t) for t in types)


def holds_map(kind: pa.DataType) -> bool:
    """Is ``kind`` a map, or a type with a map inside it at any depth?"""
    if pa.types.is_map(kind):
        return True
    if pa.types.is_dictionary(kind):
        return holds_map(kind.value_type)
    return any(holds_map(kind.field(i).type) for i in range(kind.num_fields))


def to_table(records: Sequence[dict], schema: pa.Schema) -> pa.Table | tuple[int, dict, str]:
    """Records as an Arrow table, or the first misfit ``(index, record, reason)``."""
    names = set(schema.names)
    # from_pylist silently drops unknown keys and nulls missing ones: check exactly. Dicts
    # with no unknown keys and as many keys in all as the schema asks have exactly its keys
    # (C-level loops: this runs on every record an epoch writes).
    if not (set(map(type, records)) <= {dict} and set().union(*records) <= names
            and sum(map(len, records)) == len(records) * len(names)):
        for i, rec in enumerate(records):
            if type(rec) is not dict or rec.keys() != names:
                misfit = first_misfit(records[i:], schema) or (0, rec, "bad record")
                return i + misfit[0], misfit[1], misfit[2]
    try:
        table = pa.Table.from_pylist(list(records), schema=schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        bad = first_misfit(records, schema)
        if bad is not None:
            return bad
        raise
    for f in schema:  # from_pylist does not check that a NOT NULL column has values
        if not f.nullable and table[f.name].null_count:
            i = table[f.name].to_pylist().index(None)
            return i, records[i], f"{f.name!r} is null, but the flow requires a value"
    return table
