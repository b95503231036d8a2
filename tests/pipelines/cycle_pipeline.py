"""A dataflow with a cycle, a loopback flow, a broadcast parameter and a record-wise stage.

Label propagation (connected components by minimum label), for ``strata graph`` tests::

    edges ─► clean (record-wise) ─► propagate (state) ─► changes ─► collect ─► labels
                                     ▲ └─ messages (loopback) ─┘     │
                                     └────────── updates ◄───────────┘  (cycle)
    params ─(broadcast)─► collect
"""

from strata import ALL, Dataflow, Input, State

NODE_LABEL = "node long, label long"


def clean(key, edges, *, out):
    for e in edges:
        if e["src"] != e["dst"]:
            out.write("clean_edges", e)


def propagate(node, state, edges, messages, updates, *, out):
    prev = next(state, None)
    label = min([m["label"] for m in messages] + [u["label"] for u in updates]
                + [prev["label"] if prev else node])
    new = {"node": node, "label": label}
    out.state(new)
    if prev is None or label < prev["label"]:
        out.write("changes", new)
        for e in edges:
            out.write("messages", {"node": e["dst"], "label": label})


def everyone(record):
    return ALL


def collect(node, changes, params, *, out):
    limit = next(params, {"max_label": 1 << 62})["max_label"]
    for c in changes:
        out.write("labels", c)
        if c["label"] <= limit:
            out.write("updates", c)


def build_dataflow() -> Dataflow:
    df = Dataflow("components")
    edges = df.source("edges", "src long, dst long")
    params = df.source("params", "max_label long")
    messages = df.flow("messages", NODE_LABEL)
    updates = df.flow("updates", NODE_LABEL)
    changes = df.flow("changes", NODE_LABEL)
    df.stage("clean", clean, inputs=[edges], outputs={"clean_edges": "src long, dst long"})
    df.stage(
        "propagate", propagate,
        inputs=[Input("clean_edges", route_by="src"), Input(messages, route_by="node"),
                Input(updates, route_by="node", order_by="label")],
        outputs=[messages, changes],
        state=State(NODE_LABEL, route_by="node"),
    )
    df.stage(
        "collect", collect,
        inputs=[Input(changes, route_by="node"), Input(params, route_by=everyone)],
        outputs=[updates, df.flow("labels", NODE_LABEL)],
    )
    return df
