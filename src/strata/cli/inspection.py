"""The verbs that look inside a home without starting Spark: ``strata status``,
``strata show`` and ``strata export``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from strata.cli import output
from strata.cli.commands import app
from strata.cli.options import (
    CatalogOption,
    HomeOption,
    JsonOption,
    LimitOption,
    RecordsFormatOption,
    home_path,
)
from strata.model.errors import StrataError


# -- status ----------------------------------------------------------------------------
@app.command()
def status(home: HomeOption, json_out: JsonOption = False,
           catalog_at: CatalogOption = None) -> None:
    """Show the home: epochs and state size per stage, queued input per connector, and
    the increments kept for each terminal flow."""
    with output.reported():
        from strata.controller.inspection import collect_status, open_home

        info = collect_status(open_home(home_path(home, catalog_at)))
        if json_out:
            typer.echo(output.dumps(info))
            return
        console = output.out()
        console.print(f"strata home [bold]{escape(info['home'])}[/]")
        t = Table(title="stages", title_justify="left")
        for col in ("stage", "kind", "epochs", "state", "partitions", "last run"):
            t.add_column(col, justify="right" if col in ("epochs", "state", "partitions")
                         else "left")
        for s in info["stages"]:
            kind = " ".join(x for x in (s["kind"], s["mode"] and f"({s['mode']})") if x)
            t.add_row(s["stage"], kind or "—", str(s["epochs"]), output.size(s["state_bytes"]),
                      str(s["partitions"] or "—"), output.when(s["last_run"]))
        console.print(t)
        for s in info["stages"]:
            if s["summary"]:
                console.print(Text(f"{s['stage']}: {s['summary']}"))
        t = Table(title="queued input (per flow and consuming stage)", title_justify="left")
        for col in ("flow", "consumer", "increments", "records", "not yet framed",
                    "open frame"):
            t.add_column(col, justify="left" if col in ("flow", "consumer") else "right")
        for c in info["connectors"]:
            t.add_row(c["flow"], c["consumer"], str(c["queued"]), f"{c['queued_records']:,}",
                      str(c["unframed"]), f"{c['open_frame_records']:,} records"
                      if c["open_frame_records"] else "—")
        console.print(t)
        if info["terminal_flows"]:
            t = Table(title="terminal flows (increments kept)", title_justify="left")
            for col in ("flow", "producer", "increments", "records", "size", "epochs"):
                t.add_column(col, justify="left" if col in ("flow", "producer", "epochs")
                             else "right")
            for f in info["terminal_flows"]:
                eps = f["epochs"]
                span = "—" if not eps else (str(eps[0]) if len(eps) == 1
                                            else f"{eps[0]}–{eps[-1]}")
                t.add_row(f["flow"], f["producer"] or "—", str(f["increments"]),
                          f"{f['records']:,}", output.size(f["bytes"]), span)
            console.print(t)
        if info["referenced_files"]:
            t = Table(title="files ingested by reference, still to be read (keep them "
                      "unchanged)", title_justify="left")
            t.add_column("flow")
            t.add_column("increment", justify="right")
            t.add_column("file", overflow="fold")  # whole paths, wrapped if need be
            for r in info["referenced_files"]:
                t.add_row(r["flow"], str(r["increment"]), r["file"])
            console.print(t)
        for u in info["unfinished_epochs"]:
            console.print(Text(f"unfinished epoch {u['epoch']} of {u['stage']} (interrupted "
                               "by a crash, an error or Ctrl-C): the next `strata run` "
                               "completes it", style="yellow"))


# -- show ------------------------------------------------------------------------------
@app.command()
def show(
    flow: Annotated[str, typer.Argument(
        metavar="FLOW", show_default=False,
        help="A flow name, a query's name for its current answer, or STAGE.state for a "
             "stage's current state.")],
    home: HomeOption,
    epoch: Annotated[int | None, typer.Option(
        help="The increment written in epoch N of the flow's producer (or ingest N).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="All stored increments, oldest first.")
                    ] = False,
    fmt: RecordsFormatOption = "table",
    limit: LimitOption = None,
    catalog_at: CatalogOption = None,
) -> None:
    """Print the records of FLOW's newest stored increment (or --epoch N, or --all), a
    query's current answer (FLOW = the query's name), or a stage's state (STAGE.state)."""
    with output.reported():
        if epoch is not None and all_:
            raise StrataError("give either --epoch N or --all, not both")
        from strata.controller.inspection import open_home, read_records_of

        title, recs = read_records_of(open_home(home_path(home, catalog_at)), flow, epoch, all_)
        print_records(title, recs, fmt, limit)


def print_records(title: str, recs: list[dict], fmt: str, limit: int | None,
                  columns: Sequence[str] = ()) -> None:
    """Records as a table (at most 50 unless ``limit``) or as JSON lines (``jsonl``);
    ``columns`` heads the table when there are no records to take them from."""
    if fmt == "jsonl":
        out = sys.stdout
        for rec in recs if limit is None else recs[:limit]:
            out.write(output.dumps(rec) + "\n")
        out.flush()
        return
    shown = recs[: 50 if limit is None else limit]
    table = Table(title=f"{title}: {len(recs):,} record{'s' if len(recs) != 1 else ''}",
                  title_justify="left")
    heads = list(columns)
    for rec in shown:
        heads += [c for c in rec if c not in heads]
    for c in heads:
        table.add_column(c, overflow="fold")
    for rec in shown:
        table.add_row(*[output.cell(rec.get(c)) for c in heads])
    console = output.out()
    # a table without columns prints nothing, not even its title
    console.print(table if heads else Text(str(table.title)))
    if len(recs) > len(shown):
        console.print(f"… {len(recs) - len(shown):,} more (--limit N, or --format jsonl)")


@app.command()
def export(
    target: Annotated[str, typer.Argument(
        metavar="FLOW", show_default=False,
        help="A flow, a query's name (its current answer) or STAGE.state.")],
    home: HomeOption,
    out: Annotated[Path, typer.Option(
        "--out", "-o", file_okay=False,
        help="The directory to write (a Parquet table: Spark, DuckDB, pandas and Trino "
             "read it).")],
    epoch: Annotated[int | None, typer.Option(
        help="Only the increment written in epoch N (or ingest N).")] = None,
    all_: Annotated[bool, typer.Option(
        "--all", help="All stored increments, with an _epoch column.")] = False,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Write FLOW's newest increment (or --epoch N, --all), a query's answer or a stage's
    state as a Parquet table for other tools."""
    with output.reported():
        if epoch is not None and all_:
            raise StrataError("give either --epoch N or --all, not both")
        from strata.controller.dataframes import export_parquet
        from strata.controller.inspection import open_home, read_table_of

        title, table = read_table_of(open_home(home_path(home, catalog_at)), target, epoch, all_)
        path = export_parquet(table, out)
        if json_out:
            typer.echo(output.dumps({"target": target, "what": title, "rows": table.num_rows,
                                     "path": path}))
            return
        output.out().print(f"wrote {title} ({table.num_rows:,} rows) to {escape(path)}")
