"""``strata window``: register windowed queries, list them and show a result's C2."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from strata.cli import output
from strata.cli.options import (
    CatalogOption,
    HomeOption,
    JsonOption,
    catalog_of,
    existing_home,
    home_path,
)
from strata.model.errors import StrataError
from strata.storage.home import Home

app = typer.Typer(
    name="window",
    help="Windowed queries (iMR): sliding windows assembled from panes, each result with "
         "its C2 scoreboard (which source × pane cells it includes), released by latency, "
         "fidelity or failure eviction, with optional load shedding.",
    no_args_is_help=True,
)


def _fidelity(spec: str | None):
    from strata.windows import Fidelity

    if spec is None:
        return None
    kind, _, share = spec.partition("=")
    try:
        return Fidelity(kind.strip(), float(share))
    except ValueError:
        raise StrataError(f"--fidelity {spec!r}: write KIND=SHARE, e.g. spatial=0.75 (kinds: "
                          "fraction, spatial, temporal, whole_sources, whole_panes)") from None


@app.command()
def add(
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                        help="The query's name (its stage; results go to "
                                             "NAME_windows, scoreboards to NAME_c2).")],
    sql: Annotated[str, typer.Argument(
        metavar="SQL", show_default=False,
        help="A grouped query of one flow whose GROUP BY has WINDOW(time, range[, slide[, "
             "source]]), e.g. ... GROUP BY url, WINDOW(ts, '1 hour', '5 minutes', host).")],
    home: HomeOption,
    deadline: Annotated[str | None, typer.Option(
        help="Latency eviction: emit a window this long after its end (event time, e.g. "
             "'2 minutes') with the cells present.")] = None,
    fidelity: Annotated[str | None, typer.Option(
        metavar="KIND=SHARE", help="Fidelity eviction: emit when C2 meets it: fraction=0.9, "
                                   "spatial=0.75, temporal=0.5, whole_sources=0.75 or "
                                   "whole_panes=0.5 (docs/windows.md, C2).")] = None,
    failure_timeout: Annotated[str | None, typer.Option(
        help="Failure eviction: a source silent this long is failed and results go out "
             "without it.")] = None,
    lateness: Annotated[str, typer.Option(
        help="How long after a window's end late cells still refine it.")] = "0",
    disorder: Annotated[str, typer.Option(
        help="How far (event time) a source may send out of order: a cell is complete, "
             "and final, once its source has sent a time this far past the pane's end; "
             "later records for it are refused and counted (docs/windows.md, C2).")] = "0",
    source: Annotated[list[str] | None, typer.Option(
        "--source", help="A source the query expects (repeatable; others seen count too).")
                      ] = None,
    shed_budget: Annotated[float | None, typer.Option(
        help="Shed load when an epoch's estimated seconds exceed this.")] = None,
    shed_kind: Annotated[str, typer.Option(help="random, spatial or temporal.")] = "random",
    seed: Annotated[int, typer.Option(help="Seed of the shedding choices.")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check without registering.")
                       ] = False,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """Register a windowed query; every later `strata run` aggregates new records into
    panes once and emits the windows its eviction policy releases."""
    with output.reported():
        program = register_sql(home_path(home, catalog_at), name, sql, deadline=deadline,
                               fidelity=fidelity,
                               failure_timeout=failure_timeout, lateness=lateness,
                               disorder=disorder, sources=source or [], shed_budget=shed_budget,
                               shed_kind=shed_kind, seed=seed, dry_run=dry_run)
        _print(program, json_out, registered=not dry_run)


def register_sql(home: Path | str | Home, name: str, sql: str, *, deadline: str | None = None,
                 fidelity: str | None = None, failure_timeout: str | None = None,
                 lateness: str = "0", disorder: str = "0",
                 sources: list[str] | None = None,
                 shed_budget: float | None = None, shed_kind: str = "random", seed: int = 0,
                 dry_run: bool = False):
    """Compile and register a window query from SQL (``strata window add`` and
    ``strata query`` with a WINDOW clause)."""
    from strata.windows import Eviction, Shedding, from_sql, registry
    from strata.windows.panes import parse_duration

    with catalog_of(existing_home(home)) as catalog:
        query = from_sql(name, sql)
        flows = catalog.flows()
        if query.flow not in flows:
            raise StrataError(f"the home has no flow {query.flow!r}")
        columns = {f.name: t for f, t in _schema(flows[query.flow]["schema"])}
        time_type = columns.get(query.time, "bigint")

        def units(v: str | None) -> int | None:
            return None if v is None else parse_duration(v, time_type, allow_zero=True)

        from dataclasses import replace

        query = replace(query, eviction=Eviction(
            deadline=units(deadline), fidelity=_fidelity(fidelity),
            failure_timeout=units(failure_timeout), lateness=units(lateness) or 0),
            sources=tuple(sources or ()), disorder=units(disorder) or 0,
            shedding=Shedding(shed_budget, shed_kind, seed) if shed_budget else None)
        return registry.register(catalog, query, sql, dry_run=dry_run)


def _schema(ddl: str):
    from strata.model.schema import parse_ddl, type_ddl

    return [(f, type_ddl(f.type)) for f in parse_ddl(ddl)]


def _print(program, json_out: bool, registered: bool) -> None:
    plan, q = program.plan, program.plan.query
    info = {"name": q.name, "flow": q.flow, "registered": registered,
            "time": q.time, "source": q.source, "pane_width": plan.width,
            "windows": [{"range": s.range, "slide": s.slide, "panes": s.per_window,
                         "panes_per_slide": s.per_slide} for s in plan.specs],
            "invertible": plan.algebra.invertible, "eviction": q.eviction.describe(),
            "disorder": plan.disorder,
            "outputs": [program.result_flow, program.board_flow],
            "columns": plan.result_columns()}
    if json_out:
        typer.echo(output.dumps(info))
        return
    console = output.out()
    console.print(f"window query [bold]{escape(q.name)}[/] over {escape(q.flow)}: "
                  f"{program.describe()}")
    console.print(f"one pane store (panes of {plan.width} units of {escape(q.time)}) for "
                  f"{len(plan.specs)} window(s); windows slide by "
                  + ("combine + uncombine" if plan.algebra.invertible
                     else "Two-Stacks (an aggregate without an inverse)"))
    console.print(f"results → {program.result_flow}, scoreboards → {program.board_flow}"
                  + ("" if registered else " (dry run: not registered)"))


@app.command("list")
def list_(home: HomeOption, json_out: JsonOption = False,
          catalog_at: CatalogOption = None) -> None:
    """List the registered window queries."""
    from strata.windows import registry

    with output.reported():
        with catalog_of(existing_home(home, catalog_at)) as catalog:
            programs = registry.registered(catalog)
        rows = [{"name": n, "flow": p.plan.query.flow, "window": p.describe(),
                 "sql": p.plan.query.sql} for n, p in sorted(programs.items())]
        if json_out:
            typer.echo(output.dumps({"windows": rows}))
            return
        t = Table(title=f"{len(rows)} window quer{'y' if len(rows) == 1 else 'ies'}",
                  title_justify="left")
        for c in ("name", "flow", "window", "sql"):
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(r["name"], r["flow"], r["window"], r["sql"] or "")
        output.out().print(t)


@app.command()
def c2(
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                        help="A registered window query.")],
    home: HomeOption,
    window: Annotated[str | None, typer.Option(
        help="The window's start as `strata show NAME_windows` prints it (default: the "
             "newest window emitted).")] = None,
    png: Annotated[Path | None, typer.Option(help="Draw the scoreboard (sources × panes) "
                                                  "to this PNG.")] = None,
    json_out: JsonOption = False,
    catalog_at: CatalogOption = None,
) -> None:
    """The C2 scoreboard of one window result: every source × pane cell, with its status
    (data, empty, open, pending, skipped, failed) and record counts."""
    from strata.controller.inspection import open_home, read_records_of
    from strata.windows.rows import scoreboard_flow, scoreboards

    with output.reported():
        _, recs = read_records_of(open_home(existing_home(home, catalog_at)),
                                  scoreboard_flow(name), None, True)
        boards = scoreboards(recs)
        if not boards:
            raise StrataError(f"window query {name!r} has emitted no result yet")
        pick = list(boards)[-1] if window is None else next(
            (w for w in boards if str(w[0]) == window), None)
        if pick is None:
            raise StrataError(f"no emitted window starts at {window!r}; the newest: "
                              f"{', '.join(str(w[0]) for w in list(boards)[-5:])}")
        board = boards[pick]
        label = f"{pick[0]} – {pick[1]}"
        if png is not None:
            draw(board, str(png), f"{name}: window {label}")
        cells = [{"source": s, "pane_start": p, "status": c.status.value,
                  "records": c.records, "shed": c.shed}
                 for (s, p), c in sorted(board.cells.items(), key=lambda kv: str(kv[0]))]
        if json_out:
            typer.echo(output.dumps({"window_start": pick[0], "window_end": pick[1],
                                     "summary": board.summary(), "fraction": board.fraction,
                                     "spatial": board.spatial, "temporal": board.temporal,
                                     "cells": cells}))
            return
        t = Table(title=f"{name}, window {label}: {board.summary()}", title_justify="left")
        t.add_column("source")
        for p in board.panes:
            t.add_column(str(p), overflow="fold")
        for s in board.sources:
            t.add_row(s, *[f"{board.cells[(s, p)].status.value} {board.cells[(s, p)].records}"
                           for p in board.panes])
        output.out().print(t)


def draw(board, path: str, title: str) -> None:
    """The scoreboard as a sources × panes picture, one colour per cell status."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    from strata.windows.c2 import Status

    order, panes = list(Status), board.panes
    pane_labels = [str(p) for p in panes]
    colours = ["#2e7d32", "#9ccc65", "#e0e0e0", "#ffb74d", "#8e24aa", "#c62828"]
    grid = [[order.index(board.cells[(s, p)].status) for p in panes] for s in board.sources]
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(pane_labels) + 2),
                                    max(2, 0.4 * len(board.sources) + 1.5)))
    ax.imshow(grid, cmap=ListedColormap(colours), vmin=0, vmax=len(order) - 1,
              aspect="auto")
    ax.set_yticks(range(len(board.sources)), board.sources)
    ax.set_xticks(range(len(pane_labels)), pane_labels, rotation=60, ha="right", fontsize=7)
    for y, s in enumerate(board.sources):
        for x, p in enumerate(panes):
            n = board.cells[(s, p)].records
            if n:
                ax.text(x, y, str(n), ha="center", va="center", fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours]
    ax.legend(handles, [s.value for s in order], loc="upper left", bbox_to_anchor=(1, 1),
              fontsize=7)
    ax.set_title(f"{title}\n{board.summary()}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
