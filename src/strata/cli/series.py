"""``strata series``: register, list, explain, show and drop query series in a home."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from strata.cli import output
from strata.cli.inspection import print_records, show
from strata.cli.options import (
    CatalogOption,
    FileFormatOption,
    HomeOption,
    JsonOption,
    LimitOption,
    RecordsFormatOption,
    catalog_of,
    existing_home,
)
from strata.cli.series_explain import SHARED_SCAN, print_explain, scan_setting
from strata.model.errors import StrataError
from strata.storage.home import Home

app = typer.Typer(
    name="series",
    help="Query series: a query run again on every new segment (or every N) of a stream, "
         "over a window of its segments. All series on one stream run as one stage: "
         "per-segment partial results (views) are computed once, shared between series "
         "and merged per occurrence.",
    no_args_is_help=True,
)

SqlArg = Annotated[str, typer.Argument(metavar="SQL", show_default=False,
                                       help="A SELECT over the stream's tables.")]


@app.command()
def add(
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                        help="The series' name (also its output flow).")],
    sql: SqlArg,
    home: HomeOption,
    table: Annotated[list[str] | None, typer.Option(
        "--table", metavar="TABLE=STREAM[A:B]",
        help="Bind a table of the query to segments: `log=clicks` the newest segment, "
             "`yesterday=clicks[-1]` the one before, `week=clicks[-6:0]` the newest seven "
             "(repeatable; an unbound table is the newest segment of the flow of its "
             "name).")] = None,
    period: Annotated[int, typer.Option(
        min=1, help="Answer every N segments (7 for a weekly query over daily segments).")
                      ] = 1,
    plan: Annotated[Literal["auto", "views", "raw"], typer.Option(
        help="views: keep per-segment partial results and merge them; raw: aggregate the "
             "window's segments again at each occurrence; auto: the cheaper by the cost "
             "model, from the statistics of earlier segments.")] = "auto",
    lateness: Annotated[int, typer.Option(
        min=0, help="Take corrections of the newest N segments (`strata series correct`) "
                    "and re-emit this series' occurrences that read them, as changes to "
                    "the flow NAME_changes (0: corrections only reach later occurrences).")
                        ] = 0,
    shared_scan: Annotated[Literal["off", "on", "prefix", "reorder", "auto"] | None, typer.Option(
        "--shared-scan", show_default=False,
        help="How the stream's stage computes a new segment's stored views (for every "
             "series on the stream): off, a plan per view; on, one jumbo pass (one scan); "
             "prefix, one pass hashing the group key they share (one exchange); reorder, "
             "one grouping for the views with the same keys, their filters pulled above "
             "it; auto, the cheapest by the cost model. Default: the stream's setting, "
             "off for a new stream.")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Replace the series registered under NAME.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Check and explain the series without registering it.")] = False,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Register a query series; the next `strata run` answers it for every segment that
    is due, from the segments stored in the home on."""
    from strata.series import Series, registry

    with output.reported():
        tables = _bindings(table)
        new = Series(name, sql, tables, period, plan, lateness)
        with catalog_of(existing_home(home, catalog_at)) as catalog:
            stream = registry.stream_of(new, list(catalog.flows()))
            programs = registry.registered(catalog)
            names = {s.name: p.stream for p in programs.values() for s in p.series}
            if name in names and not replace:
                raise StrataError(f"series {name!r} is registered already (on "
                                  f"{names[name]!r}); --replace replaces it")
            if name in names and names[name] != stream:
                raise StrataError(f"series {name!r} runs on {names[name]!r}: drop it first "
                                  f"to move it to {stream!r}")
            if name not in names and name in catalog.flows():
                raise StrataError(f"the home has a flow named {name!r}; name the series "
                                  "otherwise")
            old = programs.get(stream)
            series = [s for s in (old.series if old else ()) if s.name != name] + [new]
            setting = SHARED_SCAN[shared_scan] if shared_scan else getattr(
                old, "shared_scan", False)
            if dry_run:
                from strata.series import SeriesProgram

                program = SeriesProgram(stream, _columns(catalog, stream), series, setting)
            else:
                program = registry.register(catalog, stream, series, setting)
        print_explain(program, name, json_out, registered=not dry_run)


@app.command("list")
def list_(home: HomeOption, json_out: JsonOption = False,
          catalog_at: CatalogOption = None) -> None:
    """List the registered series, by stream."""
    from strata.series import registry

    with output.reported():
        with catalog_of(existing_home(home, catalog_at)) as catalog:
            programs = registry.registered(catalog)
        rows: list[dict[str, Any]] = [{"name": s.name, "stream": p.stream, "period": s.period,
                 "lateness": s.lateness, "shared_scan": scan_setting(p),
                 "tables": {t: r.spec() for t, r in p.plans[s.name].schedule.tables.items()},
                 "first_occurrence": p.plans[s.name].schedule.first,
                 "views": len(p.plans[s.name].views), "sql": s.sql}
                for p in programs.values() for s in p.series]
        if json_out:
            typer.echo(output.dumps({"series": rows}))
            return
        t = Table(title=f"{len(rows)} series", title_justify="left")
        for c in ("name", "stream", "period", "lateness", "tables", "first", "views", "sql"):
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(r["name"], r["stream"], str(r["period"]), str(r["lateness"]),
                      ", ".join(f"{k}={v}" for k, v in r["tables"].items()),
                      str(r["first_occurrence"]), str(r["views"]), r["sql"])
        output.out().print(t)


@app.command()
def explain(name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                                 help="A registered series.")],
            home: HomeOption, json_out: JsonOption = False,
            catalog_at: CatalogOption = None) -> None:
    """How a series runs: the views it keeps per segment, which it shares with other
    series on its stream, and what each occurrence merges or joins."""
    from strata.series import registry

    with output.reported():
        from strata.series import series_stage_name
        from strata.storage.manifest import StateDir

        root = existing_home(home, catalog_at)
        with catalog_of(root) as catalog:
            program, _ = registry.find(catalog, name)
            recorded = _recorded(catalog, program, name)
        snap = StateDir(Home(root).stage(series_stage_name(program.stream))).current()
        choice = (snap.state or {}).get("choices", {}).get(name)
        from strata.series.cost import measured

        scan = (snap.state or {}).get("scan")
        if scan is not None:
            scan = {**scan, "measured": measured(snap.metrics)}
        print_explain(program, name, json_out, registered=True, choice=choice,
                      epoch=snap.epoch, scan=scan,
                      stats=(snap.state or {}).get("stats"), recorded=recorded)


@app.command("show")
def show_(
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                                 help="A registered series.")],
    home: HomeOption,
    occurrence: Annotated[int | None, typer.Option(
        help="The occurrence whose newest segment is N (default: the newest one).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every stored occurrence.")] = False,
    fmt: RecordsFormatOption = "table",
    limit: LimitOption = None,
    catalog_at: CatalogOption = None,
) -> None:
    """Print a series' answer at an occurrence, with the changes corrections of its
    segments re-emitted since (--all: every stored answer as written, by epoch)."""
    if all_:
        if occurrence is not None:
            with output.reported():
                raise StrataError("give either --occurrence N or --all, not both")
        show(name, home, all_=True, fmt=fmt, limit=limit, catalog_at=catalog_at)
        return
    from strata.series.answers import series_answer

    with output.reported():
        n, table = series_answer(existing_home(home, catalog_at), name, occurrence)
        print_records(f"{name} at occurrence {n}", table.to_pylist(), fmt, limit,
                      table.column_names)


@app.command()
def correct(
    stream: Annotated[str, typer.Argument(metavar="STREAM", show_default=False,
                                          help="The stream whose segment to replace.")],
    segment: Annotated[int, typer.Argument(metavar="SEGMENT", show_default=False,
                                           help="The segment's number (1 = the first).")],
    home: HomeOption,
    paths: Annotated[list[Path] | None, typer.Argument(
        metavar="PATH...", show_default=False, exists=True, dir_okay=False,
        help="Files with the segment's rows, all of them (checked against the stream's "
             "schema; a bad file appends nothing).")] = None,
    empty: Annotated[bool, typer.Option(
        "--empty", help="Empty the segment (no PATH): its rows were all wrong.")] = False,
    fmt: FileFormatOption = None,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Replace a segment the stream's series have read with the rows of PATH... (or
    empty it with --empty): the next `strata run` recomputes its views and re-emits, as
    changes, the occurrences whose windows contain it (for series with a lateness
    reaching it)."""
    from strata.controller.ingest import append_table, checked_external_flow
    from strata.controller.readers import read_source
    from strata.model.schema import to_arrow_schema
    from strata.series import registry
    from strata.series.corrections import correction

    with output.reported():
        root = existing_home(home, catalog_at)
        with catalog_of(root) as catalog:
            layout = Home(root)
            if bool(paths) == empty:
                raise StrataError("give the segment's new rows as PATH..., or --empty "
                                  "to empty it (one of the two)")
            side = registry.check_correction(catalog, layout, stream, segment)
            schema = to_arrow_schema(checked_external_flow(layout, catalog, stream))
            rows = (schema.empty_table() if empty else
                    read_source([str(p) for p in paths or []], schema, fmt, stream,
                                exact_types=True))
            n = append_table(layout, catalog, side, correction(rows, segment, empty=empty))
        if json_out:
            typer.echo(output.dumps({"stream": stream, "segment": segment, "flow": side,
                                     "increment": n, "records": rows.num_rows,
                                     "emptied": empty}))
            return
        what = "emptied" if empty else f"replaced by {rows.num_rows:,} records"
        output.out().print(f"segment {segment} of [bold]{escape(stream)}[/] {what} "
                           f"(increment {n} of {escape(side)}); the next `strata run` "
                           "re-emits the occurrences that read it")


@app.command()
def drop(name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                                 help="A registered series.")],
         home: HomeOption, catalog_at: CatalogOption = None) -> None:
    """Stop answering a series (its stored answers stay; views only it read are
    collected after the next run)."""
    from strata.series import registry

    with output.reported():
        with catalog_of(existing_home(home, catalog_at)) as catalog:
            program, _ = registry.find(catalog, name)
            registry.register(catalog, program.stream,
                              [s for s in program.series if s.name != name])
        output.out().print(f"dropped series [bold]{escape(name)}[/]")


@app.command("query")
def query(
    sql: SqlArg,
    home: HomeOption,
    table: Annotated[list[str] | None, typer.Option(
        "--table", metavar="TABLE=STREAM[A:B]",
        help="Bind a table of the query to segments, as for `series add` (an unbound "
             "table is the newest segment of the flow of its name).")] = None,
    newest: Annotated[int | None, typer.Option(
        min=1, help="The window's newest segment (default: the last one the stream's "
                    "series stage read).")] = None,
    master: Annotated[str | None, typer.Option(
        help="Spark master URL (default: $STRATA_MASTER, else local[*]).")] = None,
    remote: Annotated[str | None, typer.Option(
        "--remote", metavar="sc://HOST:PORT",
        help="Run over a Spark Connect server instead (default: $STRATA_REMOTE unless "
             "--master is given).")] = None,
    fmt: RecordsFormatOption = "table",
    limit: LimitOption = None,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Answer a one-off query over a stream's segments, reading the per-segment views its
    series keep where they match and the kept raw segments otherwise (and say which)."""
    from strata.physical.session import get_spark
    from strata.series import Series, registry
    from strata.series.adhoc import ad_hoc

    with output.reported():
        tables = _bindings(table)
        root = existing_home(home, catalog_at)
        with catalog_of(root) as catalog:
            stream = registry.stream_of(Series("ad hoc", sql, tables), list(catalog.flows()))
        spark = get_spark(master, remote=remote)
        answer, sources = ad_hoc(root, spark, stream, sql, tables, newest)
        try:
            recs = [r.asDict(recursive=True) for r in answer.collect()]
        except Exception as e:
            if not type(e).__module__.startswith(("pyspark", "py4j")):
                raise
            raise StrataError(f"ad hoc query over {stream!r}: Spark failed: "
                              f"{output.spark_failure(e)}") from None
        if json_out:
            typer.echo(output.dumps({"stream": stream, "sources": sources,
                                     "columns": answer.columns, "records": recs}))
            return
        print_records(f"ad hoc query over {stream}", recs, fmt, limit, answer.columns)
        if fmt == "table":
            output.out().print(Text("\n".join(sources)))


def _bindings(table: list[str] | None) -> dict[str, str]:
    """``--table TABLE=STREAM[A:B]`` options as a mapping."""
    tables = {}
    for t in table or []:
        key, _, spec = t.partition("=")
        if not key or not spec:
            raise StrataError(f"--table {t!r}: write TABLE=STREAM, TABLE=STREAM[-1] or "
                              "TABLE=STREAM[-6:0]")
        tables[key.strip()] = spec.strip()
    return tables


def _columns(catalog, stream: str) -> dict[str, str]:
    from strata.model.schema import parse_ddl, type_ddl

    return {f.name: type_ddl(f.type) for f in parse_ddl(catalog.flows()[stream]["schema"])}


@app.command()
def simulate(
    trace: Annotated[Path, typer.Argument(metavar="TRACE", exists=True, dir_okay=False,
                                          help="A trace (JSON; `strata series trace` "
                                               "writes one).")],
    json_out: JsonOption = False,
) -> None:
    """Replay a trace of query series with the real planner and report the bytes read and
    written with and without sharing (sizes from the trace: an analytic model)."""
    import json

    from strata.series.simulate import simulate as run

    with output.reported():
        try:
            data = json.loads(trace.read_text())
        except json.JSONDecodeError as e:
            raise StrataError(f"{trace}: not JSON ({e})") from None
        result = run(data)
        if json_out:
            typer.echo(output.dumps(result))
            return
        raw, shared = result["without_sharing"], result["with_sharing"]
        t = Table(title=f"{result['series']} series on {result['streams']} streams, "
                        f"{result['days']} segments each", title_justify="left")
        for c in ("", "read", "written", "total"):
            t.add_column(c)
        for name, io in (("without sharing", raw), ("with sharing", shared)):
            t.add_row(name, output.size(int(io["read"])), output.size(int(io["written"])),
                      output.size(int(io["read"] + io["written"])))
        console = output.out()
        console.print(t)
        console.print(f"I/O saved by sharing: {result['io_saving']:.1%} "
                      f"({result['views_written']:,} views written)")


@app.command()
def trace(
    out: Annotated[Path, typer.Argument(metavar="OUT", dir_okay=False,
                                        help="Where to write the trace (JSON).")],
    series: Annotated[int, typer.Option(min=1, help="How many series.")] = 1000,
    streams: Annotated[int, typer.Option(min=1, help="How many streams.")] = 50,
    days: Annotated[int, typer.Option(min=1, help="Segments per stream.")] = 28,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 1,
) -> None:
    """Write a synthetic trace shaped like the paper's: power-law stream popularity, 75%
    recurring series (67% daily, 15% weekly), windows of 1-7 segments."""
    import json

    from strata.series.simulate import generate_trace

    with output.reported():
        out.write_text(json.dumps(generate_trace(series, streams, days, seed), indent=1))
        output.out().print(f"wrote {escape(str(out))} ({series} series on {streams} streams)")


def _recorded(catalog, program, name: str, epochs: int = 7) -> list[dict]:
    """The catalog's statistics of the series' views and answer over the stream stage's
    last ``epochs`` epochs."""
    from strata.series import series_stage_name
    from strata.series.statistics import answer_operator, view_operator

    plan = program.plans[name]
    wanted = [view_operator(v.fingerprint) for v in plan.view_list()] + [
        answer_operator(name)]
    return catalog.operator_stats(series_stage_name(program.stream), wanted, epochs)
