"""``strata pipelines``: run a Spark Declarative Pipelines project with strata, its
materialized views refreshed by the change in their inputs (docs/sdp.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from strata.cli import output
from strata.cli.options import JsonOption

app = typer.Typer(
    name="pipelines",
    help="Spark Declarative Pipelines (spark-pipeline.yml with SQL and Python definitions) "
         "run by strata: materialized views and streaming tables kept up to date "
         "incrementally where their queries allow, refreshed in full where not, published "
         "where spark-pipelines puts them.",
    no_args_is_help=True,
)

SpecOption = Annotated[Path | None, typer.Option(
    "--spec", metavar="PATH", dir_okay=False,
    help="The pipeline spec (default: spark-pipeline.yml in this folder or above).")]
MasterOption = Annotated[str | None, typer.Option(
    help="Spark master URL (default: $STRATA_MASTER, else local[*]).")]


def _load(spec: Path | None, master: str | None, warehouse: str | None = None, *,
          spark_needed: bool = True) -> tuple[Any, Any]:
    """The session (the spec's ``spark.sql.*`` settings applied, as spark-pipelines
    does) and the planned project. Without ``spark_needed`` (checking, explaining) a
    session starts only for Python definitions, whose column functions need one."""
    from strata import sdp
    from strata.physical.session import get_spark
    from strata.sdp.spec import load_spec

    loaded = load_spec(spec)
    spark = None
    if spark_needed or any(f.suffix == ".py" for f in loaded.files()):
        spark = get_spark(master)
        for key, value in loaded.configuration.items():
            if key.startswith("spark.sql.") and key != "spark.sql.warehouse.dir":
                spark.conf.set(key, value)
    return spark, sdp.load(spec, warehouse=warehouse)


@app.command()
def run(
    spec: SpecOption = None,
    full_refresh: Annotated[list[str] | None, typer.Option(
        "--full-refresh", metavar="VIEW",
        help="Recompute these views from their sources (comma-separated or repeated); "
             "strata rebuilds its state of the pipeline from the sources.")] = None,
    full_refresh_all: Annotated[bool, typer.Option(
        "--full-refresh-all", help="Recompute every view from the sources.")] = False,
    master: MasterOption = None,
    warehouse: Annotated[str | None, typer.Option(
        metavar="URI", help="Where the tables go (default: the spec's "
                            "spark.sql.warehouse.dir, else Spark's).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Refresh every view: new source files are taken in, views change by the change."""
    from strata import sdp

    with output.reported():
        spark, plan = _load(spec, master, warehouse)
        names = [n.strip() for v in full_refresh or () for n in v.split(",") if n.strip()]
        console = output.err() if json_out else output.out()
        status = console.status("refreshing…", spinner="dots")
        show = not json_out or sys.stderr.isatty()
        if show:
            status.start()
        try:
            report = sdp.refresh(plan, spark, full_refresh=names,
                                 full_refresh_all=full_refresh_all,
                                 progress=lambda m: status.update(escape(m)))
        finally:
            status.stop()
        if json_out:
            typer.echo(output.dumps(report.to_json()))
            return
        if report.rebuilt:
            console.print(f"[yellow]rebuilt from the sources:[/] {escape(report.rebuilt)}")
        taken = ", ".join(f"{f}: {n}" for f, n in report.new_files.items())
        console.print(f"new files: {taken or '-'}; {report.epochs} epochs")
        for name, what in report.published.items():
            console.print(f"✓ {name}  ({what['mode']}"
                          + (f", {what['rows']} rows" if "rows" in what else "") + ")")
        console.print(f"done in {report.seconds:.1f} s")


@app.command("dry-run")
def dry_run(spec: SpecOption = None, master: MasterOption = None,
            json_out: JsonOption = False) -> None:
    """Read and check the project (files, queries, dependencies, policies); run nothing."""
    from strata import sdp

    with output.reported():
        _, plan = _load(spec, master, spark_needed=False)
        views = sdp.describe(plan)
        if json_out:
            typer.echo(output.dumps({"ok": True, "views": [v["name"] for v in views]}))
        else:
            output.out().print(f"ok: {len(views)} views and tables, "
                               f"{sum(v['incremental'] for v in views)} incremental")


@app.command()
def explain(spec: SpecOption = None, master: MasterOption = None,
            json_out: JsonOption = False) -> None:
    """Per view: incremental or not and why, its sources, and h/⊗/a of its query."""
    from strata import sdp

    with output.reported():
        _, plan = _load(spec, master, spark_needed=False)
        views = sdp.describe(plan)
        if json_out:
            typer.echo(output.dumps({"views": views}))
            return
        table = Table("view", "kind", "policy", "refresh", "reads", "defined")
        for v in views:
            how = "incremental" if v["incremental"] else f"full: {v['why_full']}"
            table.add_row(v["name"], v["kind"], v["policy"], escape(how),
                          ", ".join(v["reads"]), v["defined"])
        console = output.out()
        console.print(table)
        for v in views:
            if v["explain"]:
                console.print(f"\n[bold]{escape(v['name'])}[/]\n{escape(v['explain'])}")
