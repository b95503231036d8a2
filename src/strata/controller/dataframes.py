"""Spark DataFrames in and out of a home: a DataFrame appended as one increment, and a
home's flows and query answers as temporary views or Parquet tables for other tools."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.controller.ingest import checked_external_flow, staging_token
from strata.controller.readers import IngestError
from strata.faults import crashpoint
from strata.model.schema import to_arrow_schema
from strata.physical import arrow_types
from strata.storage import fs
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.increments import Increment

# Widening casts a DataFrame column may need to fit a flow's column; anything else must
# match exactly (a silent narrowing or parse would change the data).
_WIDER = {
    (pa.int8(), pa.int16()), (pa.int8(), pa.int32()), (pa.int8(), pa.int64()),
    (pa.int16(), pa.int32()), (pa.int16(), pa.int64()), (pa.int32(), pa.int64()),
    (pa.float32(), pa.float64()), (pa.int32(), pa.float64()), (pa.int16(), pa.float64()),
}


def fitted(df: DataFrame, schema: pa.Schema, flow: str) -> DataFrame:
    """``df``'s columns in ``schema``'s order and types; IngestError naming every column
    that is missing, extra or of a type that does not fit."""
    have = {f.name: f.dataType for f in df.schema.fields}
    missing = [n for n in schema.names if n not in have]
    extra = [n for n in have if n not in schema.names]
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    if extra:
        problems.append(f"extra column(s) {', '.join(extra)}")
    columns = []
    for field in schema:
        if field.name not in have:
            continue
        try:
            got = arrow_types.arrow_type(have[field.name])
        except (TypeError, NotImplementedError):
            got = None
        if got == field.type:
            columns.append(F.col(field.name))
        elif got is not None and (got, field.type) in _WIDER:
            columns.append(F.col(field.name).cast(arrow_types.spark_type(field.type)))
        else:
            problems.append(f"column {field.name!r} is {have[field.name].simpleString()}, "
                            f"the flow's is {field.type}")
    if problems:
        raise IngestError(f"the DataFrame does not fit flow {flow!r} ({schema}): "
                          f"{'; '.join(problems)}. Nothing was ingested.")
    return df.select(*columns)


def ingest_dataframe(home: Home, flow: str, df: DataFrame, *, end_frame: bool = False,
                     catalog: Catalog | None = None) -> int:
    """Append the rows of ``df`` to external input ``flow`` as one increment, atomically:
    Spark writes them to a staging directory, and the increment exists once the catalog
    records it (a failed or killed write leaves nothing the home reads; the sweep removes
    the staged files). Returns the increment's number."""
    own = catalog is None
    catalog = catalog or Catalog(home.catalog_path)
    try:
        ddl = checked_external_flow(home, catalog, flow)
        staged = home.incoming_dir(flow, staging_token())
        fitted(df, to_arrow_schema(ddl), flow).write.mode("error").parquet(staged)
        files = sorted(fs.join(staged, n) for n in fs.list_dir(staged)
                       if n.startswith("part-") and n.endswith(".parquet"))
        records = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        nbytes = sum(fs.size_of(f) for f in files)
        crashpoint("ingest-before-commit")
        return catalog.record_ingest(flow, Increment(tuple(files), records, nbytes), end_frame)
    finally:
        if own:
            catalog.close()


def export_parquet(table: pa.Table, directory: str | os.PathLike[str]) -> str:
    """Write ``table`` as a Parquet table directory (one file) other tools can read."""
    target = os.fspath(directory)
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, "part-00000.parquet")
    tmp = path + ".tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path
