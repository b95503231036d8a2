"""Options and helpers shared by the verbs of the ``strata`` command (``--home``,
``--json``, record formats) and the home a verb works on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from strata import config
from strata.storage.home import Home

HomeOption = Annotated[
    Path,
    typer.Option("--home", envvar=config.HOME.name, show_envvar=True, file_okay=False,
                 help="The strata home directory (catalog, state, flows)."),
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


def home_path(home: Path) -> str:
    """``--home`` as an absolute path (it need not exist yet)."""
    return str(home.expanduser().resolve())


def existing_home(home: Path) -> str:
    """``--home`` as an absolute path; a clear error if it is not a strata home."""
    from strata.controller.inspection import open_home

    return open_home(home_path(home)).root


def catalog_of(home: str):
    """The catalog of the home at ``home`` (a context manager that closes it)."""
    from strata.storage.catalog import Catalog

    return Catalog(Home(home).catalog_path)
