"""Spark types as Arrow types and back (strata.physical.arrow_types): the same answer
in every supported PySpark, whose own converters changed their options between 4.0 and
4.3 (docs/architecture.md, "The driver's rows and Spark's")."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from strata.physical import arrow_types

F = StructField
SPARK = StructType([
    F("s", StringType()), F("n", LongType(), False), F("i", IntegerType()),
    F("d", DoubleType()), F("b", BinaryType()), F("day", DateType()),
    F("at", TimestampType()), F("local", TimestampNTZType()), F("dec", DecimalType(12, 3)),
    F("ats", ArrayType(TimestampType(), False)),
    F("m", MapType(StringType(), ArrayType(TimestampNTZType()))),
    F("st", StructType([F("x", TimestampType()), F("y", ArrayType(IntegerType()), False)])),
    F("none", NullType())])
UTC = pa.timestamp("us", tz="UTC")
ARROW = pa.schema([
    ("s", pa.string()), pa.field("n", pa.int64(), False), ("i", pa.int32()),
    ("d", pa.float64()), ("b", pa.binary()), ("day", pa.date32()), ("at", UTC),
    ("local", pa.timestamp("us")), ("dec", pa.decimal128(12, 3)),
    ("ats", pa.list_(pa.field("element", UTC, False))),
    ("m", pa.map_(pa.field("key", pa.string(), False),
                  pa.field("value", pa.list_(pa.field("element", pa.timestamp("us")))))),
    ("st", pa.struct([("x", UTC), pa.field("y", pa.list_(pa.int32()), False)])),
    ("none", pa.null())])


def test_spark_schema_to_arrow_has_utc_timestamps_at_any_depth():
    assert arrow_types.arrow_schema(SPARK) == ARROW
    assert arrow_types.arrow_type(SPARK["st"].dataType) == ARROW.field("st").type


def test_arrow_schema_to_spark_keeps_naive_timestamps_ntz():
    assert arrow_types.spark_schema(ARROW) == SPARK
    assert arrow_types.spark_type(pa.timestamp("us")) == TimestampNTZType()
    assert arrow_types.spark_type(UTC) == TimestampType()


def test_nullability_of_list_and_map_values_survives_the_way_back():
    spark = StructType([F("a", ArrayType(LongType(), False)),
                        F("m", MapType(StringType(), LongType(), False))])
    assert arrow_types.spark_schema(arrow_types.arrow_schema(spark)) == spark
