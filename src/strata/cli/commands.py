"""The ``strata`` command and its verbs that change or draw a home: ``run``, ``ingest``,
``query`` and ``graph`` (``status``, ``show`` and ``export`` are in
:mod:`strata.cli.inspection`). Each parses its options, calls the controller or the query
layer, and prints through :mod:`strata.cli.output`.

Only ``strata run`` starts Spark; ``ingest``, ``query`` and ``graph`` read the home's
catalog and files directly.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.text import Text

from strata.cli import output
from strata.cli.options import (
    CatalogOption,
    FileFormatOption,
    HomeOption,
    JsonOption,
    PipelineArg,
    catalog_of,
    existing_home,
    home_path,
)
from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.storage.home import Home

app = typer.Typer(
    name="strata",
    help="strata: stateful bulk-incremental dataflows on Apache Spark.\n\n"
         "A home directory holds a dataflow's catalog, state and flows: `strata run "
         "PIPELINE --home DIR` creates it and runs every runnable epoch, `strata ingest` "
         "appends input, `strata status` and `strata show` look inside, `strata graph` "
         "draws the dataflow.\n\n"
         "Exit codes: 0 done; 1 an error (the message says what and what to do); 2 a usage "
         "error; 75 the home is in use by another controller (retry later); 130 "
         "interrupted (Ctrl-C or SIGTERM; the next run finishes the epoch).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",
)
def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        import strata

        try:
            spark = version("pyspark")
        except PackageNotFoundError:
            spark = "not installed"
        typer.echo(f"strata {strata.__version__} (PySpark {spark}, Python "
                   f"{sys.version.split()[0]})")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """strata: stateful bulk-incremental dataflows on Apache Spark."""


# -- run -------------------------------------------------------------------------------


@app.command()
def run(
    pipeline: PipelineArg,
    home: HomeOption,
    master: Annotated[str | None, typer.Option(
        help="Spark master URL (spark://…, yarn, k8s://…). Default: the active Spark "
             "session, else $STRATA_MASTER, else local[*].")] = None,
    remote: Annotated[str | None, typer.Option(
        "--remote", metavar="sc://HOST:PORT",
        help="Run over a Spark Connect server instead of a classic session (default: "
             "$STRATA_REMOTE unless --master is given). Every kind of stage runs there "
             "(translate stages on DataFrames: spark.strata.translate.route).")] = None,
    mode: Annotated[Literal["direct", "blackbox"], typer.Option(
        help="Execution mode: direct (state stays partitioned, per-epoch work follows the "
             "increment) or blackbox (re-shuffles the whole state every epoch).")] = "direct",
    partitions: Annotated[int | None, typer.Option(
        "--partitions", min=1,
        help="State partitions of stages that have not run yet (default: Spark's "
             "parallelism, at least 2).")] = None,
    until_idle: Annotated[bool, typer.Option(
        "--until-idle/--follow",
        help="Stop when nothing is runnable (default), or keep one Spark session and "
             "process input as it arrives (from `strata ingest` or --watch) until Ctrl-C "
             "or SIGTERM, which stop it between epochs.")] = True,
    forever: Annotated[bool, typer.Option(
        "--forever", hidden=True, help="The old name of --follow.")] = False,
    watch: Annotated[Path | None, typer.Option(
        "--watch", metavar="DIR", file_okay=False,
        help="With --follow: a landing directory; a file dropped into DIR/FLOW/ is "
             "ingested as one increment and moved to DIR/.ingested/FLOW/ (rejected files "
             "to DIR/.rejected/FLOW/ with the reason). Write files under a .tmp name and "
             "rename them when complete.")] = None,
    max_epochs: Annotated[int | None, typer.Option(
        min=1, help="Stop after this many stage epochs.")] = None,
    poll: Annotated[float, typer.Option(
        min=0.05, help="With --follow: seconds between checks for new input.")] = 0.5,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object at the end (the epoch reports) and no "
                       "progress on stdout.")] = False,
    traceback: Annotated[bool, typer.Option(
        "--traceback", help="When an epoch fails in user code, print its traceback too."
    )] = False,
    py_files: Annotated[list[Path] | None, typer.Option(
        "--py-files", metavar="PATH",
        help="More Python code for the workers: a .py, .zip or .egg file or a directory "
             "(repeatable). The pipeline's own directory or package is shipped anyway.")
                        ] = None,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", metavar="KEY=VALUE",
        help="A Spark session conf for the run (repeatable), e.g. "
             "spark.strata.driverEpoch.maxRows=-1 to run every vectorized epoch as Spark "
             "tasks.")] = None,
    catalog_at: CatalogOption = None,
) -> None:
    """Run the dataflow PIPELINE over the home: every runnable stage epoch, until idle.

    Creates the home on first use (registering the dataflow's flows), so that
    `strata ingest` can then append input to it.
    """
    from strata.controller.controller import Controller
    from strata.pipeline import load_dataflow

    with output.reported(traceback):
        path = home_path(home, catalog_at)
        for extra in py_files or ():  # the driver imports them too, as with spark-submit
            folder = extra if extra.is_dir() or extra.suffix in (".zip", ".egg") else extra.parent
            sys.path.insert(0, str(folder.resolve()))
        dataflow = load_dataflow(pipeline)
        reports: list = []
        stopped = "idle"
        in_epoch: list[tuple[str, int]] = []
        console = output.err() if json_out else output.out()
        show_progress = not json_out or sys.stderr.isatty()
        t0 = time.perf_counter()
        if master and remote:
            raise StrataError("give either --master or --remote (Spark Connect), not both")
        with Controller(path, dataflow, master=master, remote=remote, mode=mode,
                        num_partitions=partitions, py_files=py_files or (),
                        spark_conf=_confs(conf or [])) as controller:
            width = max((len(n) for n in controller.units), default=1)
            status = console.status("checking for input…", spinner="dots")

            def on_start(stage: str, epoch: int) -> None:
                in_epoch[:] = [(stage, epoch)]
                starting = "" if controller.spark_started else " (starting Spark…)"
                status.update(f"[bold]{escape(stage)}[/] epoch {epoch} running{starting}")

            def on_epoch(report) -> None:
                in_epoch.clear()
                if not json_out:
                    line = Text(f"✓ {report.stage:<{width}}  epoch {report.epoch:<4} ",
                                style="green")
                    line.append(f" in: {output.flows_text(report.records_in)}  "
                                f"out: {output.flows_text(report.records_out)}  "
                                f"{report.seconds:.2f} s", style="default")
                    if report.recovered:
                        line.append("  (recovered: an interrupted epoch, finished)", style="yellow")
                    console.print(line)
                status.update("checking for input…")

            if show_progress:
                status.start()
            try:
                if until_idle and not forever:
                    reports += controller.run(max_epochs=max_epochs, on_epoch=on_epoch,
                                              on_start=on_start)
                    if max_epochs is not None and len(reports) >= max_epochs:
                        stopped = "max-epochs"
                else:
                    reports, stopped = _follow(controller, console, status, poll, watch,
                                               max_epochs, on_epoch, on_start, json_out)
            except KeyboardInterrupt:
                stopped = "interrupted"
            except Exception as e:
                if not type(e).__module__.startswith(("pyspark", "py4j")):
                    raise
                raise StrataError(output.spark_failure(e)) from None
            finally:
                status.stop()
        seconds = time.perf_counter() - t0
        if json_out:
            typer.echo(output.dumps({
                "home": path.root, "dataflow": dataflow.name, "epochs": len(reports),
                "reports": [r.to_json() for r in reports], "seconds": round(seconds, 3),
                "stopped": stopped,
            }))
        else:
            output.run_summary(console, path.root, dataflow, reports, seconds, stopped)
        if stopped == "interrupted" and in_epoch:
            stage, epoch = in_epoch[0]
            output.err().print(Text(f"interrupted during epoch {epoch} of {stage}; the next "
                              "`strata run` finishes it (nothing is lost or applied twice)",
                              style="yellow"))
            raise typer.Exit(output.EXIT_INTERRUPTED)


def _follow(controller, console, status, poll: float, watch: Path | None,
            max_epochs: int | None, on_epoch, on_start, json_out: bool) -> tuple[list, str]:
    """``strata run --follow``: SIGTERM or a first Ctrl-C stop it between epochs (a second
    Ctrl-C interrupts the epoch; the next run finishes it)."""
    import signal

    from strata.controller.follow import Landing, StopRequest, follow

    stop = StopRequest()

    def request_stop(signum, frame) -> None:
        # only the flag: a handler runs between any two bytecodes of the main thread,
        # which may hold a lock the handler would wait for
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    landing = Landing(watch, controller) if watch else None

    def on_landed(landed) -> None:
        if json_out:
            return
        if landed.error:
            output.err().print(Text(f"rejected {landed.file}: {landed.error}", style="red"))
        else:
            console.print(f"ingested {landed.file} into {landed.flow} as increment "
                          f"{landed.increment}")

    def on_idle() -> None:
        status.update(f"following: checking for new input every {poll:g} s (Ctrl-C or "
                      "SIGTERM stops)")

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM,
                                                                  signal.SIGINT)}
    try:
        reports = follow(controller, stop, poll=poll, landing=landing, max_epochs=max_epochs,
                         on_epoch=on_epoch, on_start=on_start, on_landed=on_landed,
                         on_idle=on_idle)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop.is_set():
        return reports, "stopped"
    return reports, "max-epochs"


@app.command()
def ingest(
    flow: Annotated[str, typer.Argument(metavar="FLOW", show_default=False,
                                        help="The external input flow to append to.")],
    home: HomeOption,
    paths: Annotated[list[Path] | None, typer.Argument(
        metavar="PATH", show_default=False,
        help="Files to append, together as one increment (checked against the flow's "
             "schema first; a bad file appends nothing).")] = None,
    from_table: Annotated[str | None, typer.Option(
        "--from-table", metavar="TABLE",
        help="Append a Spark table or view instead of files (starts Spark; with --master "
             "or $STRATA_MASTER for a cluster).")] = None,
    sql: Annotated[str | None, typer.Option(
        "--sql", metavar="QUERY",
        help="Append the rows of a Spark SQL query instead of files: a select over tables "
             "Spark knows (starts Spark).")] = None,
    master: Annotated[str | None, typer.Option(
        help="Spark master URL for --from-table/--sql (default: $STRATA_MASTER, else "
             "local[*]).")] = None,
    remote: Annotated[str | None, typer.Option(
        "--remote", metavar="sc://HOST:PORT",
        help="Read --from-table/--sql over a Spark Connect server instead (default: "
             "$STRATA_REMOTE unless --master is given).")] = None,
    fmt: FileFormatOption = None,
    end_frame: Annotated[bool, typer.Option(
        "--end-frame", help="Close the open frame after this increment (for consumers "
                            "with frame_by).")] = False,
    by_reference: Annotated[bool, typer.Option(
        "--by-reference",
        help="Take Parquet files in place instead of copying them into the home: their "
             "footers must match the flow's schema exactly. strata never changes or deletes "
             "them; they must stay unchanged while the increment is queued.")] = False,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Append the files PATH... (or a Spark table, or a Spark SQL query's rows) to the
    external input FLOW as one increment.

    Works while a controller runs; the next `strata run` (or the running one) reads it.
    """
    from strata.controller.ingest import ingest as do_ingest
    from strata.storage.catalog import IncrementKind

    with output.reported():
        path = existing_home(home, catalog_at)
        given = [x for x in (paths, from_table, sql) if x]
        if len(given) != 1:
            raise StrataError("give files to ingest, or one of --from-table TABLE and --sql "
                              "QUERY (exactly one source)")
        if by_reference and not paths:
            raise StrataError("--by-reference takes Parquet files (PATH...), not a Spark "
                              "table or query")
        if paths:
            n = do_ingest(path, flow, [str(p) for p in paths], fmt, end_frame=end_frame,
                          by_reference=by_reference)
        else:
            n = _ingest_from_spark(path, flow, from_table, sql, master, remote, end_frame)
        paths = paths or []
        with catalog_of(path) as catalog:
            records = next((s.increment.records for s in catalog.flow_increments(flow)
                            if s.kind is IncrementKind.INGEST and s.epoch == n), None)
            consumers = catalog.consumers(flow)
        if json_out:
            typer.echo(output.dumps({"flow": flow, "increment": n, "records": records,
                               "files": [str(p) for p in paths], "end_frame": end_frame,
                               "by_reference": by_reference, "consumers": consumers}))
            return
        count = f"{records:,}" if records is not None else "the"
        console = output.out()
        console.print(f"ingested {count} records into [bold]{escape(flow)}[/] as increment "
                      f"{n}" + (" (by reference)" if by_reference else "")
                      + (" (frame closed)" if end_frame else ""))
        if consumers:
            console.print(f"waiting for: {', '.join(consumers)}; `strata run PIPELINE --home "
                          f"{escape(str(home))}` processes it")
        else:
            console.print("no stage reads this flow; the increment is kept")


def _confs(pairs: list[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` options as a mapping."""
    confs = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise StrataError(f"--conf {pair!r}: write KEY=VALUE, e.g. "
                              "--conf spark.sql.shuffle.partitions=8")
        confs[key.strip()] = value
    return confs


def _ingest_from_spark(home: Home, flow: str, table: str | None, sql: str | None,
                       master: str | None, remote: str | None, end_frame: bool) -> int:
    from strata.controller.dataframes import ingest_dataframe
    from strata.physical.session import get_spark

    spark = get_spark(master, remote=remote)
    try:
        frame = spark.table(table) if table else spark.sql(sql or "")
    except Exception as e:
        if not type(e).__module__.startswith(("pyspark", "py4j")):
            raise
        what = f"table {table!r}" if table else f"query {sql!r}"
        raise StrataError(f"Spark cannot read {what}: {output.spark_failure(e)}") from None
    return ingest_dataframe(home, flow, frame, end_frame=end_frame)


# -- query -----------------------------------------------------------------------------
@app.command()
def query(
    sql: Annotated[str, typer.Argument(metavar="SQL", show_default=False,
                                       help="A SELECT over the home's flows.")],
    home: HomeOption,
    name: Annotated[str, typer.Option(help="The query's name (its stage; `strata show "
                                           "NAME` prints its answer).")],
    key: Annotated[list[str] | None, typer.Option(
        "--key", metavar="FLOW=COL[,COL]",
        help="A flow's unique key, which joins need (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Check the query and explain it without registering it.")] = False,
    allow_recompute: Annotated[bool, typer.Option(
        "--allow-recompute", help="If the query cannot be kept up to date incrementally "
        "(a many-to-many join), recompute it over all its input every run instead of "
        "refusing it.")] = False,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Replace a query registered under NAME before (its state, queues "
        "and epochs stay: change only what keeps its columns and inputs).")] = False,
    from_start: Annotated[bool, typer.Option(
        "--from-start", help="Also read the increments of its external input flows "
        "ingested before it is registered (still stored), oldest first, so that its "
        "answer covers them.")] = False,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Register a continuous query: its incremental form (h, ⊗ and a) is printed, and
    every later `strata run` of the home keeps its answer up to date (it sees the
    increments that arrive after it is registered; with --from-start, those stored
    before too). The query is compiled once, here; the home keeps the compiled stage. A
    query whose GROUP BY has WINDOW(time, range[, slide[, source]]) is a windowed query
    (`strata window add` sets its policies)."""
    with output.reported():
        from strata.physical.registration import compiled
        from strata.queries.programs import QueryProgram, VectorQueryProgram, add_query

        if re.search(r"\bWINDOW\s*\(", sql, re.I):
            from strata.cli.windows import _print, register_sql

            _print(register_sql(home_path(home, catalog_at), name, sql, dry_run=dry_run), json_out,
                   registered=not dry_run)
            return

        root = existing_home(home, catalog_at)
        keys: dict[str, list[str]] = {}
        for k in key or []:
            flow, _, cols = k.partition("=")
            if not flow or not cols:
                raise StrataError(f"--key {k!r}: write FLOW=COL or FLOW=COL1,COL2")
            keys[flow] = cols.split(",")
        with catalog_of(root) as catalog:
            flows = catalog.flows()
            registered = {r.name for r in catalog.registered_stages()}
            registered |= set(catalog.legacy_queries())
            taken = name in catalog.stages() or name in flows
            if taken and not (replace and name in registered):
                raise StrataError(f"the home already has a stage or flow named {name!r}"
                                  + ("; --replace replaces a registered query"
                                     if name in registered else ""))
            scratch = Dataflow("registration")
            for flow, info in flows.items():
                if flow != f"{name}_changes":
                    scratch.source(flow, info["schema"])
            stage = add_query(scratch, name, sql, keys=keys, allow_recompute=allow_recompute)
            program = stage.program
            # what add_query compiles: a group-by of one flow takes the vectorized route
            assert isinstance(program, QueryProgram | VectorQueryProgram)
            plan = program.inc
            explained = program.explain()
            backfilled = 0
            if not dry_run:
                backfilled = catalog.register_stage(
                    compiled(stage, sql), stage.input_names, replace=replace,
                    backfill=stage.input_names if from_start else ())
        if json_out:
            print(output.dumps({"name": name, "registered": not dry_run, "explain": explained,
                          "columns": plan.root.columns, "recomputed": plan.recompute,
                          "stored_increments_queued": backfilled}))
            return
        console = output.out()
        console.print(Text(explained))
        if not dry_run:
            console.print(f"registered query [bold]{escape(name)}[/]: `strata run PIPELINE "
                          f"--home {escape(str(home))}` computes it; `strata show {escape(name)}"
                          f" --home {escape(str(home))}` prints its answer")
            if from_start:
                console.print(f"it reads {backfilled} stored increment(s) first (an increment "
                              "every consumer has read is no longer stored)")


@app.command()
def graph(
    pipeline: PipelineArg,
    out: Annotated[Path, typer.Option(
        "--out", "-o", dir_okay=False,
        help="The picture to write: FILE.png, FILE.svg, FILE.pdf (need Graphviz's `dot`) "
             "or FILE.dot (the Graphviz source).")],
    legend: Annotated[bool, typer.Option(help="Explain the marks under the title.")] = True,
) -> None:
    """Draw the dataflow PIPELINE: stages, flows with their routing, state, cycles."""
    from strata.graph import render
    from strata.pipeline import load_dataflow

    with output.reported():
        dataflow = load_dataflow(pipeline)
        path = render(dataflow, out, legend=legend)
        output.out().print(f"wrote {escape(str(path))} ({len(dataflow.stages)} stages, "
                     f"{len(dataflow.flows)} flows)")
