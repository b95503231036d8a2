"""Incremental maintenance of a join-aggregate view under inserts and deletes.

Two relations arrive as change logs: ``r`` = R(k, a) and ``s`` = S(k, b), each record
carrying ``op`` = +1 (insert one copy of the row) or -1 (delete one copy). R and S are
multisets (bags): the current R is every (k, a) with its net multiplicity. The view is,
exactly (``VIEW_SQL``)::

    SELECT R.k, count(*) AS n, sum(S.b) AS total, max(R.a) AS max_a
    FROM R JOIN S ON R.k = S.k
    GROUP BY R.k

The dataflow is one stateful stage keyed by ``k``::

    r (route: k) ─┐                                   ┌─► view     {k, n, total, max_a, deleted}
                  ├─► maintain (state: bags, inner) ──┤
    s (route: k) ─┘        runnable_any               └─► rejects  {rel, k, value, missing}

- The state per key is the multiset of R's ``a`` values and of S's ``b`` values
  (``value -> multiplicity`` maps). For a key with both sides non-empty the view row is
  ``n = |R_k|·|S_k|``, ``total = |R_k|·Σ S_k.b``, ``max_a = max R_k.a``; counts and sums
  alone would do for ``n`` and ``total``, but ``max`` under deletes needs the bag.
- Each epoch applies the net change of every (k, value) and writes the key's view row to
  ``view`` only when it changed. When a group disappears (one side became empty) it writes
  a deletion marker ``{k, n: 0, total: null, max_a: null, deleted: true}``. The latest
  record per ``k`` in ``view`` is therefore the view (keys whose latest is a marker are
  absent).
- A delete of a row that is not there is not applied: it goes to ``rejects``.
- State grouping is *inner* (an epoch reads the state of the changed keys only) and a key
  whose two bags are empty leaves the state. Runnability is ``runnable_any``: an increment
  of R or of S alone can run (the view is consistent after every epoch, whatever the mix).

Run with ``strata run examples/joinview/pipeline.py --home DIR`` (see README.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from strata import Dataflow, Emitter, Input, State
from strata.model.runnability import runnable_any

VIEW_SQL = """
SELECT R.k, count(*) AS n, sum(S.b) AS total, max(R.a) AS max_a
FROM R JOIN S ON R.k = S.k
GROUP BY R.k
"""

R_SCHEMA = "k bigint, a bigint, op int"
S_SCHEMA = "k bigint, b bigint, op int"
VIEW_SCHEMA = "k bigint, n bigint, total bigint, max_a bigint, deleted boolean"
REJECTS_SCHEMA = "rel string, k bigint, value bigint, missing bigint"
# the bags of one key: value -> multiplicity (> 0)
BAGS_SCHEMA = "k bigint, r map<bigint, bigint>, s map<bigint, bigint>"


def view_row(k: int, r: Counter, s: Counter) -> dict | None:
    """The view's row for ``k`` from the two bags, or None when the join is empty there."""
    if not r or not s:
        return None
    r_rows, s_rows = sum(r.values()), sum(s.values())
    return {"k": k, "n": r_rows * s_rows, "total": r_rows * sum(b * m for b, m in s.items()),
            "max_a": max(r), "deleted": False}


def apply_changes(k: int, rel: str, bag: Counter, changes: Iterator[dict], column: str,
                  out: Emitter) -> None:
    """Add the net multiplicity of each value; reject deletes of copies that are not there."""
    net: Counter = Counter()
    for rec in changes:
        net[rec[column]] += rec["op"]
    for value, d in sorted(net.items()):
        m = bag[value] + d
        if m < 0:
            out.write("rejects", {"rel": rel, "k": k, "value": value, "missing": -m})
            m = 0
        if m:
            bag[value] = m
        else:
            bag.pop(value, None)


def maintain(k: int, state: Iterator[dict], r: Iterator[dict], s: Iterator[dict], *,
             out: Emitter) -> None:
    """Called for each key with changes in R or S this epoch (inner grouping)."""
    prev = next(state, None)
    # a map column reads back as (key, value) pairs
    r_bag = Counter(dict(prev["r"])) if prev else Counter()
    s_bag = Counter(dict(prev["s"])) if prev else Counter()
    before = view_row(k, r_bag, s_bag)
    apply_changes(k, "r", r_bag, r, "a", out)
    apply_changes(k, "s", s_bag, s, "b", out)
    after = view_row(k, r_bag, s_bag)
    if after != before:
        out.write("view", after if after is not None else
                  {"k": k, "n": 0, "total": None, "max_a": None, "deleted": True})
    if r_bag or s_bag:  # otherwise the key leaves the state
        out.state({"k": k, "r": dict(r_bag), "s": dict(s_bag)})


def build_dataflow() -> Dataflow:
    df = Dataflow("joinview")
    r = df.source("r", R_SCHEMA)
    s = df.source("s", S_SCHEMA)
    df.stage(
        "maintain", maintain,
        inputs=[Input(r, route_by="k"), Input(s, route_by="k")],
        outputs={"view": VIEW_SCHEMA, "rejects": REJECTS_SCHEMA},
        state=State(BAGS_SCHEMA, route_by="k", grouping="inner"),
        runnable=runnable_any,
    )
    return df
