"""A query step's rows: an Arrow table the driver holds, or a Spark DataFrame.

An iteration's steps and a small epoch pass small tables from one operator to the next;
the driver holds them as Arrow and the operators of :mod:`strata.queries.arrow.arrow_step` and
:mod:`strata.queries.arrow.driver_rows` combine them without a Spark job. Where an operator
needs Spark (an expression Arrow does not evaluate here, a large table) it asks for
:meth:`Rows.frame`, which turns held rows into a local DataFrame once, when first
asked: a step's tables that only Arrow reads never make that trip (about 10–40 ms each,
dozens of times per step; docs/performance.md, "Iteration steps"). This type is the
seam between the two paths (docs/architecture.md, "The driver's rows and Spark's"): a
caller asks :meth:`Rows.arrow` and falls back to the frame when it is None.
"""

from __future__ import annotations

import functools
import threading

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType


class Rows:
    """Rows with a Spark ``schema``: held by the driver (:meth:`of_arrow`) or a Spark
    DataFrame (:meth:`of_frame`). Immutable: operations make new relations."""

    __slots__ = ("spark", "_schema", "_table", "_frame", "_lock")

    def __init__(self, spark: SparkSession, schema: StructType | None,
                 table: pa.Table | None, frame: DataFrame | None) -> None:
        self.spark = spark
        self._schema, self._table, self._frame = schema, table, frame
        self._lock = threading.Lock()  # an epoch's writes plan in threads (frames.run_all)

    @classmethod
    def of_arrow(cls, spark: SparkSession, table: pa.Table, schema: StructType) -> Rows:
        """Rows the driver holds: ``table``, whose columns are ``schema``'s."""
        return cls(spark, schema, table, None)

    @classmethod
    def of_frame(cls, df: DataFrame | Rows) -> Rows:
        """The rows of Spark DataFrame ``df`` (a relation is returned as it is)."""
        if isinstance(df, Rows):
            return df
        return cls(df.sparkSession, None, None, df)

    @property
    def schema(self) -> StructType:
        if self._schema is None:
            assert self._frame is not None
            self._schema = self._frame.schema
        return self._schema

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def is_held(self) -> bool:
        """Whether the driver holds the rows as Arrow."""
        return self._table is not None

    @property
    def num_rows(self) -> int | None:
        """How many rows, if the driver holds them; else None (not known here)."""
        return None if self._table is None else self._table.num_rows

    def arrow(self) -> pa.Table | None:
        """The rows as Arrow if the driver holds them; else None."""
        return self._table

    def frame(self) -> DataFrame:
        """The rows as a Spark DataFrame: held rows become a local DataFrame, made once
        when first asked for."""
        if self._frame is None:
            with self._lock:
                if self._frame is None:
                    assert self._table is not None
                    self._frame = self.spark.createDataFrame(
                        _nonempty_batches(self._table), schema=self.schema)
        return self._frame


@functools.lru_cache(maxsize=1024)
def spark_type(sql_type: str) -> DataType:
    """The Spark type of ``sql_type`` (DDL of a type or of a struct's fields), parsed once
    (Spark parses it in the JVM; a step asks for a table's schema every time)."""
    return DataType.fromDDL(sql_type)


def _nonempty_batches(table: pa.Table) -> pa.Table:
    """``table`` without its empty record batches: PySpark's ``createDataFrame`` of an
    Arrow table whose first batches are empty gives no rows at all (PySpark 4.1;
    ``tests/queries/test_driver_rows.py``)."""
    batches = [b for b in table.to_batches() if b.num_rows]
    if not batches:  # no rows: one empty chunk per column (PySpark cannot convert a
        return table.schema.empty_table()  # nested column of no chunks)
    return pa.Table.from_batches(batches, schema=table.schema)
