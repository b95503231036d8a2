"""A dataflow as a picture (Graphviz): ``to_dot`` builds it, ``render`` writes it.

- stages are boxes; a stateful stage has a double border, its state grouping and
  route key in the box, and a green self-loop for the state;
- record-wise stages are rounded boxes (with the stage whose job they are fused into);
- external inputs are blue ellipses; terminal flows (no consumer: their increments
  are kept) are cylinders;
- every other flow is an edge from its producer to each consumer, labelled with the
  flow name and the consumer's ``route_by`` (columns, or the function's name;
  "broadcast" when the function returns ``ALL``), ``order_by`` and ``frame_by``;
- loopback flows (a stage reading its own output) are blue dashed self-loops, and
  the back edges that close a cycle are red and dashed.

``.dot``/``.gv`` output needs only this module; ``.png``, ``.svg`` and ``.pdf`` need
the Graphviz ``dot`` program.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import graphviz

from strata.model.dataflow import Dataflow, Input, Stage
from strata.model.errors import StrataError
from strata.model.schema import to_ddl

SOURCE_FORMATS = ("dot", "gv")
BINARY_FORMATS = ("png", "svg", "pdf")

STATE_COLOR = "darkgreen"
LOOPBACK_COLOR = "blue3"
BACK_EDGE_COLOR = "red3"
SOURCE_FILL = "lightblue"
OUTPUT_FILL = "lightyellow"
STATE_FILL = "honeydew"


def describe_key(spec: str | Sequence[str] | Callable | None) -> str | None:
    """A short text for a ``route_by``/``order_by``/``frame_by`` spec."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec
    if callable(spec):
        name = getattr(spec, "__name__", None) or type(spec).__name__
        return "λ" if name == "<lambda>" else f"{name}()"
    return "(" + ", ".join(spec) + ")"


def routing_kind(spec: Any) -> str | None:
    """"broadcast"/"multicast" when a route_by function refers to ALL/All/Multicast."""
    code = getattr(spec, "__code__", None)
    if code is None:
        return None
    names: set[str] = set()
    stack = [code]
    while stack:  # nested functions and comprehensions have their own code objects
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    if names & {"ALL", "All"}:
        return "broadcast"
    if "Multicast" in names:
        return "multicast"
    return None


def _input_lines(inp: Input) -> list[str]:
    lines = []
    route = describe_key(inp.route_by)
    if route:
        kind = routing_kind(inp.route_by)
        lines.append(f"by {route}" + (f" · {kind}" if kind else ""))
    order = describe_key(inp.order_by)
    if order:
        lines.append(f"order {order}")
    frame = describe_key(inp.frame_by)
    if frame:
        lines.append(f"framed by {frame}")
    return lines


def _html(lines: Sequence[str], bold_first: bool = True, size: int = 10) -> str:
    """An HTML-like Graphviz label: the first line bold, the rest small."""
    out = []
    for i, line in enumerate(lines):
        text = html.escape(line)
        if i == 0 and bold_first:
            out.append(f"<B>{text}</B>")
        else:
            out.append(f'<FONT POINT-SIZE="{size}">{text}</FONT>')
    return "<" + "<BR/>".join(out) + ">"


def back_edges(dataflow: Dataflow) -> set[tuple[str, str]]:
    """Stage pairs (producer, consumer) whose flow closes a cycle.

    A depth-first walk downstream from the stages fed by external inputs (then any
    stage not reached yet), in declaration order: an edge to a stage still on the
    walk's path goes back.
    """
    succ: dict[str, list[str]] = {s: [] for s in dataflow.stages}
    for f in dataflow.flows.values():
        if f.producer is None:
            continue
        for c in dataflow.consumers(f.name):
            if c.name != f.producer and c.name not in succ[f.producer]:
                succ[f.producer].append(c.name)
    fed = [s.name for s in dataflow.stages.values()
           if any(dataflow.flows[n].external for n in s.input_names)]
    roots = fed + [s for s in dataflow.stages if s not in fed]
    state: dict[str, int] = {}  # 1 on the path, 2 done
    back: set[tuple[str, str]] = set()
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(succ[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    return back


def _fused_into(dataflow: Dataflow) -> dict[str, str]:
    """Record-wise stage → the stage whose job runs it (when fused)."""
    try:
        from strata.physical.fusion import plan

        units = plan(dataflow)
    except Exception:  # noqa: BLE001  (the picture must not fail on a planning problem)
        return {}
    return {m: u.stage.name for u in units for m in u.fusion.members}


def _stage_label(stage: Stage, fused_into: str | None) -> str:
    lines = [stage.name]
    if stage.program is not None:  # a compiled stage (a query, say) keeps its own state
        describe = getattr(stage.program, "describe", None)
        lines.append(describe() if callable(describe) else stage.program.kind)
    elif stage.state is not None:
        st = stage.state
        lines.append(f"state: {st.grouping}, by {describe_key(st.route_by)}")
        if st.order_by is not None:
            lines.append(f"state order {describe_key(st.order_by)}")
    elif stage.is_recordwise:
        lines.append("record-wise" + (f", fused into {fused_into}" if fused_into else ""))
    if stage.runnable is not None:
        lines.append(f"runnable: {describe_key(stage.runnable)}")
    return _html(lines)


def to_dot(dataflow: Dataflow, *, legend: bool = True) -> graphviz.Digraph:
    """The dataflow as a Graphviz digraph (see the module docstring for the notation)."""
    g = graphviz.Digraph(dataflow.name, comment=f"strata dataflow {dataflow.name}")
    g.attr(rankdir="LR", fontname="Helvetica", labelloc="t", nodesep="0.4", ranksep="0.7",
           label=_html([f"dataflow {dataflow.name}"]))
    g.attr("node", fontname="Helvetica", fontsize="12")
    g.attr("edge", fontname="Helvetica", fontsize="10")
    ids = {name: f"stage{i}" for i, name in enumerate(dataflow.stages)}
    fused = _fused_into(dataflow)
    back = back_edges(dataflow)
    used = {"stateful": False, "loopback": False, "back": False, "output": False,
            "source": False}

    for name, stage in dataflow.stages.items():
        attrs: dict[str, str] = {"shape": "box", "tooltip": f"stage {name}"}
        if stage.state is not None:
            used["stateful"] = True
            attrs.update(peripheries="2", style="filled", fillcolor=STATE_FILL)
        elif stage.is_recordwise:
            attrs.update(style="rounded")
        g.node(ids[name], _stage_label(stage, fused.get(name)), **attrs)
        if stage.state is not None:
            st = stage.state
            g.edge(ids[name], ids[name], label=_html(["state", st.grouping], bold_first=False),
                   color=STATE_COLOR, fontcolor=STATE_COLOR, penwidth="1.5",
                   tooltip=f"state of {name}: {to_ddl(st.arrow_schema)}")

    for fi, (fname, flow) in enumerate(dataflow.flows.items()):
        consumers = dataflow.consumers(fname)
        ddl = to_ddl(flow.schema)
        if flow.producer is None:  # external input
            used["source"] = True
            node = f"input{fi}"
            g.node(node, _html([fname, "input"]), shape="ellipse", style="filled",
                   fillcolor=SOURCE_FILL, tooltip=f"external input {fname}: {ddl}")
            for c in consumers:
                lines = _input_lines(c.input(fname))
                g.edge(node, ids[c.name], label=_html(lines, bold_first=False) if lines else "",
                       tooltip=f"{fname}: {ddl}", **_broadcast_style(c.input(fname)))
            continue
        producer = ids[flow.producer]
        if not consumers:
            used["output"] = True
            node = f"output{fi}"
            g.node(node, _html([fname, "output"]), shape="cylinder", style="filled",
                   fillcolor=OUTPUT_FILL, tooltip=f"terminal flow {fname}: {ddl}")
            g.edge(producer, node, tooltip=f"{fname}: {ddl}")
            continue
        for c in consumers:
            inp = c.input(fname)
            label = _html([fname, *_input_lines(inp)])
            attrs = {"tooltip": f"{fname}: {ddl}", **_broadcast_style(inp)}
            if c.name == flow.producer:
                used["loopback"] = True
                attrs.update(color=LOOPBACK_COLOR, fontcolor=LOOPBACK_COLOR, style="dashed")
            elif (flow.producer, c.name) in back:
                used["back"] = True
                attrs.update(color=BACK_EDGE_COLOR, fontcolor=BACK_EDGE_COLOR, style="dashed",
                             constraint="false")
            g.edge(producer, ids[c.name], label=label, **attrs)

    if legend:
        _legend(g, f"dataflow {dataflow.name}", used)
    return g


def _broadcast_style(inp: Input) -> dict[str, str]:
    return {"penwidth": "2.5"} if routing_kind(inp.route_by) == "broadcast" else {}


def _legend(g: graphviz.Digraph, title: str, used: dict[str, bool]) -> None:
    """The title, with one small line explaining the marks the picture uses."""
    items = []
    if used["stateful"]:
        items.append((STATE_COLOR, "double border + green loop: stateful stage, its state"))
    if used["loopback"]:
        items.append((LOOPBACK_COLOR, "blue dashed loop: loopback flow"))
    if used["back"]:
        items.append((BACK_EDGE_COLOR, "red dashed: flow closing a cycle"))
    if used["output"]:
        items.append(("gray25", "cylinder: terminal flow (increments kept)"))
    line = " &#183; ".join(f'<FONT COLOR="{c}">{html.escape(t)}</FONT>' for c, t in items)
    rows = f"<TR><TD><B>{html.escape(title)}</B></TD></TR>"
    if items:
        rows += f'<TR><TD><FONT POINT-SIZE="9">{line}</FONT></TD></TR>'
    g.attr(label=f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1">{rows}</TABLE>>')


def render(dataflow: Dataflow, out_path: str | os.PathLike, *, legend: bool = True) -> Path:
    """Write the picture of ``dataflow`` to ``out_path``; the format is its suffix.

    ``.dot``/``.gv`` write the Graphviz source; ``.png``/``.svg``/``.pdf`` run the
    ``dot`` program (StrataError if it is not installed).
    """
    out = Path(out_path)
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in SOURCE_FORMATS + BINARY_FORMATS:
        raise StrataError(
            f"cannot tell the picture format of {str(out)!r}: use a file ending in "
            + ", ".join(f".{f}" for f in SOURCE_FORMATS + BINARY_FORMATS))
    g = to_dot(dataflow, legend=legend)
    if out.parent and not out.parent.exists():
        raise StrataError(f"directory {out.parent} does not exist")
    if fmt in SOURCE_FORMATS:
        out.write_text(g.source, encoding="utf-8")
        return out
    if shutil.which("dot") is None:
        raise StrataError(
            f"writing .{fmt} needs the Graphviz `dot` program, which is not installed: "
            "install Graphviz (e.g. `apt-get install graphviz`, `brew install graphviz`) "
            "or write the source with --out FILE.dot")
    try:
        data = g.pipe(format=fmt)
    except (graphviz.ExecutableNotFound, graphviz.CalledProcessError,
            subprocess.CalledProcessError) as e:
        raise StrataError(f"Graphviz could not render {out}: {e}") from None
    out.write_bytes(data)
    return out
