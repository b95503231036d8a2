"""Options and helpers shared by the verbs of the ``strata`` command (``--home``,
``--json``, record formats) and the home a verb works on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import typer
import typer.core

from strata import config
from strata.storage.home import Home


def _flags_without_a_type() -> None:
    """Rich help lists a flag (``--json``, ``--follow / --no-follow``, ``--help``) without a
    type: typer's rich panel prints every option's type, a flag's as ``<bool>``, though
    a flag takes no value (its plain help leaves the type out, as this does)."""
    typed = typer.core.TyperOption.display_type_rich
    if getattr(typed, "strata_flags", False):
        return

    def display_type_rich(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag or self.count else typed(self, ctx)

    display_type_rich.strata_flags = True  # type: ignore[attr-defined]
    # a method patched on the class; its context is the private click typer vendors
    # (typer._click.Context), which typer.Context subclasses
    typer.core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_flags_without_a_type()

HomeOption = Annotated[
    str,
    typer.Option("--home", envvar=config.HOME.name, show_envvar=True,
                 help="The strata home directory (catalog, state, flows): a local path or a "
                      "URI Spark and pyarrow both read (file:///…, hdfs://…, s3a://…)."),
]
CatalogOption = Annotated[
    str | None,
    typer.Option("--catalog", metavar="PATH", envvar=config.CATALOG.name, show_envvar=True,
                 help="A local (or mounted) path for the home's SQLite catalog, its lock "
                      "beside it (default: inside a local home; a home on hdfs:// or an "
                      "object store needs one)."),
]
PipelineArg = Annotated[
    str,
    typer.Argument(metavar="PIPELINE", show_default=False,
                   help="The dataflow: a FILE.py or a MODULE, optionally :ATTR (a Dataflow or "
                        "a function returning one); by default the `dataflow` attribute, the "
                        "only Dataflow, or `build_dataflow()`."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object (no tables).")]
RecordsFormatOption = Annotated[Literal["table", "jsonl"], typer.Option(
    "--format", help="A table, or one JSON record per line.")]
LimitOption = Annotated[int | None, typer.Option(
    min=0, help="Show at most N records (default: all for jsonl, 50 for a table).")]
FileFormatOption = Annotated[Literal["jsonl", "csv", "parquet"] | None, typer.Option(
    "--format", help="File format (default: from each file's extension).")]


def home_path(home: str | Path, catalog: str | None = None) -> Home:
    """``--home`` (and ``--catalog``): the home, which need not exist yet."""
    return Home(os.fspath(home), catalog)


def existing_home(home: str | Path | Home, catalog: str | None = None) -> Home:
    """``--home`` (and ``--catalog``); a clear error if it is not a strata home."""
    from strata.controller.inspection import open_home

    return open_home(Home(home, catalog) if isinstance(home, Home) else home_path(home, catalog))


def catalog_of(home: str | Home):
    """The catalog of the home at ``home`` (a context manager that closes it)."""
    from strata.storage.catalog import Catalog

    return Catalog(Home(home).catalog_path)
