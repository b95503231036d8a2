"""The text of ``strata series explain`` (and ``add``'s): a series' plan, the statistics of its
views, the cost model's choice and how the stream's last epoch scanned its new segment."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.text import Text

from strata.cli import output

# --shared-scan: add_series' values
SHARED_SCAN: dict[str, bool | str] = {"off": False, "on": True, "prefix": "prefix",
                                      "reorder": "reorder", "auto": "auto"}


def print_explain(program, name: str, json_out: bool, registered: bool,
                  choice: dict | None = None, epoch: int = 0, scan: dict | None = None,
                  stats: dict | None = None, recorded: list[dict] | None = None) -> None:
    """Print the explanation of series ``name`` of ``program`` (a JSON object with
    ``json_out``), with what the home recorded of it when given."""
    from strata.series.normalize import explain as explain_plan

    plan = program.raw_plans[name] if choice and choice["plan"] == "raw" else \
        program.plans[name]
    lines = explain_plan(plan)
    operators = _view_statistics(plan, stats or {})
    lines += [f"view {fp} per segment: {s['rows']:,.0f} rows out of {s['rows_in']:,.0f} in "
              f"(selectivity {s['selectivity']:.4g}), {output.size(s['bytes_out'])} out of "
              f"{output.size(s['bytes_in'])} of its columns in"
              for fp, s in operators.items()]
    lines += _recorded_lines(recorded or [])
    lines += _choice_lines(choice, epoch)
    lines.append(f"stored views of a new segment of {program.stream}: --shared-scan "
                 f"{scan_setting(program)}")
    lines += scan_lines(scan)
    shared = {v.fingerprint: [s.name for s in program.series if s.name != name and any(
        w.fingerprint == v.fingerprint for w in program.plans[s.name].view_list())]
        for v in plan.view_list()}
    lines += [f"view {fp} is shared with {', '.join(others)}"
              for fp, others in shared.items() if others]
    if json_out:
        typer.echo(output.dumps({"name": name, "stream": program.stream,
                                 "registered": registered, "explain": lines,
                                 "plan": choice["plan"] if choice else "views",
                                 "estimates": choice["estimates"] if choice else {},
                                 "scan": scan or {}, "shared_scan": scan_setting(program),
                                 "statistics": operators,
                                 "recorded": recorded or [],
                                 "decomposed": plan.decomposed,
                                 "columns": plan.query.root.columns}))
        return
    console = output.out()
    console.print(Text("\n".join(lines)))
    if registered:
        console.print(f"series [bold]{escape(name)}[/] on {escape(program.stream)}: `strata "
                      f"run PIPELINE --home HOME` answers it; `strata series show "
                      f"{escape(name)} --home HOME` prints the newest answer")



def _choice_lines(choice: dict | None, epoch: int) -> list[str]:
    """What the cost model chose at the stream's last epoch, with its estimates."""
    if not choice:
        return ["plan: views (the cost model chooses once segments have been read)"]
    how = "forced by the series" if choice.get("forced") else "the cost model's choice"
    lines = [f"plan at segment {epoch}: {choice['plan']} ({how})"]
    for plan, est in sorted(choice["estimates"].items()):
        lines.append(f"  {plan}: estimated I/O per period {output.size(est['io'])} (read "
                     f"{output.size(est['read'])}, shuffled {output.size(est['shuffled'])}, "
                     f"written {output.size(est['written'])})")
    if not choice["estimates"]:
        lines.append("  (no statistics of its views yet)")
    return lines


def _recorded_lines(recorded: list[dict]) -> list[str]:
    """The newest epoch's recorded statistics, a line per operator."""
    if not recorded:
        return []
    newest = max(r["epoch"] for r in recorded)
    rows = [r for r in recorded if r["epoch"] == newest]
    segment = max((r["segment"] for r in rows if r["segment"] is not None), default=None)
    lines = [f"recorded in the catalog, epoch {newest}"
             + ("" if segment is None else f" (segment {segment})") + ":"]
    for r in rows:
        took = "" if r["seconds"] is None else f", {r['seconds']:.2f} s"
        read = "" if r["rows_in"] is None else f"{r['rows_in']:,} rows in, "
        lines.append(f"  {r['operator']}: {read}{r['rows_out']:,} rows out, "
                     f"{output.size(r['bytes_out'])} written{took}")
    return lines


def _view_statistics(plan, stats: dict) -> dict[str, dict]:
    """Per stored view of ``plan`` the stage has statistics of, its figures per segment
    (exponential averages over the segments read): rows and bytes in and out, and its
    selectivity (rows out over rows in)."""
    from strata.series.cost import view_columns

    out = {}
    for v in plan.view_list():
        fp = v.fingerprint
        if fp not in stats.get("rows", {}) or fp not in stats.get("views", {}):
            continue
        out[fp] = {"rows_in": stats["segment_rows"], "rows": stats["rows"][fp],
                   "selectivity": stats["selectivity"][fp],
                   "bytes_in": sum(stats["columns"].get(c, 0.0) for c in view_columns(v)),
                   "bytes_out": stats["views"][fp]}
    return out


def scan_setting(program) -> str:
    """The stream stage's ``shared_scan``, as ``--shared-scan`` names it."""
    value = getattr(program, "shared_scan", False)
    return next(k for k, v in SHARED_SCAN.items() if v == value and type(v) is type(value))


def scan_lines(scan: dict | None) -> list[str]:
    """How the stream's last epoch computed the new segment's stored partial views: the
    estimated I/O of the epoch under both scan plans, and what Spark measured."""
    if not scan:
        return []
    lines = []
    ran = scan.get("plan") or ("shared" if scan["shared"] else "separate")
    if scan.get("arrow"):
        lines.append(f"scan of the last segment: none, the driver held its rows from the "
                     f"ingest: {scan['arrow']} view(s) computed from them in Arrow")
    elif scan.get("views", 0) >= 2:
        how = {"shared": "one jumbo pass", "separate": "a plan per view",
               "prefix": "one pass exchanging rows on their shared group key",
               "reordered": "one grouping on their shared keys, filters pulled above it"
               }[ran]
        why = "set by the stage" if scan.get("forced") else "the cost model's choice"
        lines.append(f"scan of the last segment: {scan['views']} stored partial views in "
                     f"{how} ({why})")
    rows = [(f"estimated, {plan}" + (" (ran)" if plan == ran else ""), est)
            for plan, est in sorted(scan.get("estimates", {}).items())]
    if scan.get("measured"):
        got = scan["measured"]
        rows.append(("measured by Spark", {**got, "io": sum(got.values())}))
    for label, io in rows:
        # a session with Parquet's vectored reads on does not count them (spark_io)
        read = output.size(io["read"]) if "read" in io else "not measured"
        total = output.size(io["io"]) + ("" if "read" in io else " besides reads")
        lines.append(f"  last epoch's I/O, {label}: {total} (read {read}, shuffled "
                     f"{output.size(io['shuffled'])}, written {output.size(io['written'])})")
    return lines
