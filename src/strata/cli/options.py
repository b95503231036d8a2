"""Options and helpers shared by the verbs of the ``strata`` command (``--home``,
``--json``, record formats) and the home a verb works on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
import typer.core

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
    typer.core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_without_a_type()

HomeOption = Annotated[
    Path,
    typer.Option("--home", envvar="STRATA_HOME", show_envvar=True, file_okay=False,
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
