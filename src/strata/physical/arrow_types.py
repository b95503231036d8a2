"""Spark types as Arrow types and back, with one answer in every supported PySpark.

PySpark's converters (``pyspark.sql.pandas.types``) changed between 4.0 and 4.3: 4.0's
``to_arrow_type`` and ``to_arrow_schema`` take ``timestamp_utc`` (UTC by default), later
ones a keyword-only ``timezone`` that a ``TimestampType`` requires, and the default of
``prefer_timestamp_ntz`` in ``from_arrow_type``/``from_arrow_schema`` turned from False
to True. strata stores timestamps as UTC instants and ``timestamp_ntz`` as naive ones
(``model/schema.py``), so this module builds the nested types and the timestamps itself
and asks PySpark only what every version answers alike: a leaf type, with no option one
way and ``prefer_timestamp_ntz`` the other (docs/architecture.md, "The driver's rows and
Spark's").
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas import types as pandas_types
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    StructField,
    StructType,
    TimestampType,
    UserDefinedType,
)


def arrow_type(dt: DataType) -> pa.DataType:
    """The Arrow type of Spark type ``dt``: timestamps in UTC, lists and maps with
    PySpark's field names (``element``, ``key``, ``value``) and Spark's nullability."""
    if isinstance(dt, TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(dt, ArrayType):
        return pa.list_(pa.field("element", arrow_type(dt.elementType), dt.containsNull))
    if isinstance(dt, MapType):
        return pa.map_(pa.field("key", arrow_type(dt.keyType), nullable=False),
                       pa.field("value", arrow_type(dt.valueType), dt.valueContainsNull))
    if isinstance(dt, StructType):
        return pa.struct(_fields(dt))
    if isinstance(dt, UserDefinedType):
        return arrow_type(dt.sqlType())
    # a leaf that is not a timestamp: the one-argument call means the same in every version
    return pandas_types.to_arrow_type(dt)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of Spark ``schema`` (:func:`arrow_type` of each column)."""
    return pa.schema(_fields(schema))


def _fields(struct: StructType) -> list[pa.Field]:
    return [pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in struct.fields]


def spark_type(at: pa.DataType) -> DataType:
    """The Spark type of Arrow type ``at``: a naive timestamp is ``timestamp_ntz``, one
    with a time zone ``timestamp``; a list's and a map's values are nullable as their
    Arrow fields are (PySpark 4.0 made them all nullable)."""
    if pa.types.is_list(at) or pa.types.is_large_list(at) or pa.types.is_fixed_size_list(at):
        return ArrayType(spark_type(at.value_type), at.value_field.nullable)
    if pa.types.is_map(at):
        return MapType(spark_type(at.key_type), spark_type(at.item_type),
                       at.item_field.nullable)
    if pa.types.is_struct(at) and not any(f.metadata for f in at):
        # (a struct whose fields carry metadata is PySpark's encoding of a variant)
        return StructType([StructField(f.name, spark_type(f.type), f.nullable) for f in at])
    if pa.types.is_dictionary(at):
        return spark_type(at.value_type)
    return pandas_types.from_arrow_type(at, prefer_timestamp_ntz=True)


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of Arrow ``schema`` (:func:`spark_type` of each column)."""
    return StructType([StructField(f.name, spark_type(f.type), f.nullable) for f in schema])
