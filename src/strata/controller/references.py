"""Increments that reference Parquet files in place instead of copying them.

A segment that lands as Parquet already has the layout strata stores: ingesting it by
reference checks the file's footer against the flow's schema (column names and order,
and types) and records the file itself as the increment, so it is read once, by the
stages that use it, and only the columns they need (docs/architecture.md, "Ingest by
reference").

strata never writes or deletes a referenced file. The file must stay as it was while an
increment lists it: before an epoch reads one, :func:`check_referenced` compares the
files' size with the increment's, recorded at ingest, and stops the epoch, naming the
files, if one is gone or they have changed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from strata.controller.readers import IngestError, format_of
from strata.model.errors import StrataError
from strata.storage import fs
from strata.storage.home import Home
from strata.storage.increments import Increment


def referenced_increment(home: Home, paths: Sequence[str | os.PathLike[str]],
                         schema: pa.Schema, flow: str, fmt: str | None = None) -> Increment:
    """The increment of Parquet ``paths`` taken in place, after checking each footer
    against ``schema`` (IngestError, naming the file and column, if one does not fit)."""
    if not paths:
        raise IngestError(f"nothing to ingest into {flow!r}: give at least one file")
    uris, records, size = [], 0, 0
    for p in paths:
        uri = os.fspath(p)
        uri = fs.normalize(uri)
        if home.owns(uri):
            raise IngestError(f"{uri} is inside the home {home.root}, whose files strata "
                              "manages and deletes: keep files ingested by reference "
                              "outside it")
        if format_of(uri, fmt) != "parquet":
            raise IngestError(f"{uri}: only Parquet files can be ingested by reference; "
                              "ingest other formats without --by-reference (they are "
                              "converted and copied into the home)")
        filesystem, path = fs.resolve(uri)
        info = filesystem.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise IngestError(f"no such file: {uri}")
        try:
            meta = pq.read_metadata(path, filesystem=filesystem)
        except (pa.ArrowException, OSError) as e:
            raise IngestError(f"{uri}: not a readable Parquet file ({e})") from None
        _check_schema(uri, meta.schema.to_arrow_schema(), schema, flow)
        _check_values(uri, meta, schema, flow)
        uris.append(uri)
        records += meta.num_rows
        size += info.size
    return Increment(tuple(uris), records, size)


def _check_schema(uri: str, got: pa.Schema, want: pa.Schema, flow: str) -> None:
    fix = ("Ingest it without --by-reference (its rows are then cast and copied into the "
           "home), or write the file with the flow's schema.")
    if got.names != want.names:
        raise IngestError(f"{uri}: columns {got.names} are not those of flow {flow!r}, "
                          f"{want.names} (by reference, names and order must match). {fix}")
    for g, w in zip(got, want, strict=True):
        if not g.type.equals(w.type):
            raise IngestError(f"{uri}, column {w.name!r}: the file's type {g.type} is not "
                              f"flow {flow!r}'s type {w.type}. {fix}")


def check_referenced(home: Home, stage: str, epoch: int,
                     inputs: Mapping[str, Sequence[Increment]]) -> None:
    """Before epoch ``epoch`` of ``stage`` reads ``inputs``: the files of every increment
    ingested by reference (files outside the home) are all there, with the bytes they
    had at ingest (the increment's size is theirs)."""
    for flow, increments in inputs.items():
        for inc in increments:
            if not inc.files or all(home.owns(f) for f in inc.files):
                continue
            where = f"stage {stage!r}, epoch {epoch}, flow {flow!r}"
            fix = ("strata reads such files in place: put them back as they were and run "
                   "again. Nothing was committed.")
            now = 0
            for uri in inc.files:
                filesystem, path = fs.resolve(uri)
                info = filesystem.get_file_info(path)
                if info.type != pafs.FileType.File:
                    raise StrataError(f"{where}: {uri}, ingested by reference, is gone. {fix}")
                now += info.size
            if now != inc.bytes:
                raise StrataError(f"{where}: {', '.join(inc.files)}, ingested by reference "
                                  f"with {inc.bytes} bytes, now hold {now}: changed since "
                                  f"ingest. {fix}")


def _check_values(uri: str, meta: pq.FileMetaData, want: pa.Schema, flow: str) -> None:
    """A NOT NULL column of the flow has a value in every row: by the footer's null
    counts (a column chunk without them is read)."""
    leaves = [meta.schema.column(j).path for j in range(meta.num_columns)]
    for f in want:
        if f.nullable:
            continue
        i = leaves.index(f.name)  # a flat column (the event time, the source)
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(i).statistics
            nulls = stats.null_count if stats is not None and stats.has_null_count else None
            if nulls is None:
                fsys, path = fs.resolve(uri)
                nulls = pq.ParquetFile(path, filesystem=fsys).read_row_group(
                    g, columns=[f.name]).column(0).null_count
            if nulls:
                raise IngestError(f"{uri}, row group {g}, column {f.name!r}: {nulls} null(s), "
                                  f"but flow {flow!r} requires a value (a stage reading it "
                                  "needs one): give every record one, or drop those "
                                  "records, and ingest the file again. Nothing was ingested.")
