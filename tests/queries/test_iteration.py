"""Iterative queries with the diffusion scheme: k-means against numpy, PageRank against
a plain-Python loop of the same definition, and the refusals that guard them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from strata import Dataflow
from strata.config import ARROW, QUERY_DRIVER_ROWS
from strata.controller.controller import Controller
from strata.queries import NotIncrementalError, QueryError, add_query, iterate, table
from strata.queries.arrow import arrow_step

SEEDS = [(0, 2.5, 2.5), (1, 2.5, 7.5), (2, 7.5, 2.5), (3, 7.5, 7.5)]
PAGERANK_STEP = (
    "SELECT e.dst AS node, 0.15 + 0.85 * sum(x.rank / d.deg) AS rank FROM edges e "
    "JOIN ranks x ON e.src = x.node "
    "JOIN (SELECT src, count(*) AS deg FROM edges GROUP BY src) d ON e.src = d.src "
    "GROUP BY e.dst")


@pytest.fixture(params=["arrow", "spark", "checkpoints"])
def steps_in(request, spark, monkeypatch):
    """Run a test's steps with the Arrow path on (counting the operators it ran) and
    off, or off with ``driverRows`` 1, so that a step's moves are checkpointed on the
    executors, not brought to the driver (the next step then does not try); the Arrow
    run must have taken the path. Each test picks two (a cut costs a job or two on
    Spark's path, so each variant adds seconds)."""
    taken: dict[str, int] = {}
    for name in ("mapped", "nearest", "lifted", "renamed", "merged", "keyed", "moves",
                 "with_lineage"):
        real = getattr(arrow_step, name)

        def counted(*args, _real=real, _name=name):
            out = _real(*args)
            if out is not None:
                taken[_name] = taken.get(_name, 0) + 1
            return out
        monkeypatch.setattr(arrow_step, name, counted)
    spark.conf.set(ARROW.name, str(request.param == "arrow").lower())
    if request.param == "checkpoints":
        spark.conf.set(QUERY_DRIVER_ROWS.name, "1")
    yield SimpleNamespace(arrow=request.param == "arrow", where=request.param, taken=taken)
    spark.conf.unset(ARROW.name)
    spark.conf.unset(QUERY_DRIVER_ROWS.name)
    if request.param == "arrow":
        assert taken, "no step operator ran in Arrow"
    else:
        assert not taken


def kmeans_query(times: int = 10, tolerance: float = 1e-9, points: str = "points"):
    p, c = table(points, alias="p"), table("centroids", alias="c")
    step = (p.join_nearest(c, "(p.x - c.x) * (p.x - c.x) + (p.y - c.y) * (p.y - c.y)")
            .group_by("c.k").agg(x="avg(p.x)", y="avg(p.y)"))
    return iterate("centroids", "k int, x double, y double", "k",
                   init="SELECT k, x, y FROM seeds", step=step, times=times,
                   tolerance=tolerance)


def numpy_kmeans(x: np.ndarray, y: np.ndarray, steps: int) -> np.ndarray:
    c = np.array([[sx, sy] for _, sx, sy in SEEDS])
    for _ in range(steps):
        a = np.argmin((x[:, None] - c[None, :, 0]) ** 2 + (y[:, None] - c[None, :, 1]) ** 2,
                      axis=1)
        c = np.array([[x[a == k].mean(), y[a == k].mean()] if (a == k).any() else c[k]
                      for k in range(len(c))])
    return c


@pytest.mark.parametrize("steps_in", ["arrow", "spark"], indirect=True)
def test_kmeans_centroids_match_recomputation_after_every_increment(spark, tmp_path,
                                                                     steps_in):
    df = Dataflow("km")
    df.source("points", "x double, y double")
    df.source("seeds", "k int, x double, y double")
    add_query(df, "kmeans", kmeans_query())
    rng = np.random.default_rng(3)
    xs, ys = [], []
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("seeds", [{"k": k, "x": x, "y": y} for k, x, y in SEEDS])
        for n in (600, 100, 100):
            x = rng.choice([3.0, 7.0], n) + rng.uniform(-1, 1, n)
            y = rng.choice([3.0, 7.0], n) + rng.uniform(-1, 1, n)
            xs.append(x)
            ys.append(y)
            c.ingest("points", [{"x": float(a), "y": float(b)} for a, b in zip(x, y, strict=True)])
            c.run()
            got = sorted((r["k"], r["x"], r["y"]) for r in c.answer("kmeans").to_pylist())
            want = numpy_kmeans(np.concatenate(xs), np.concatenate(ys), 10)
            assert [k for k, _, _ in got] == [0, 1, 2, 3]
            assert np.abs(np.array([[gx, gy] for _, gx, gy in got]) - want).max() < 1e-2
    if steps_in.arrow:  # points are assigned and their groups lifted in the driver
        assert all(steps_in.taken.get(f) for f in ("nearest", "lifted", "merged", "moves")), \
            steps_in.taken


def pagerank_continued(batches: list[list[tuple[int, int]]], times: int,
                       ) -> list[dict[int, float]]:
    """The iteration's definition in plain Python: ranks carry over between increments;
    new sources start at 0.15; each increment runs ``times`` steps, a step giving every
    node with in-links 0.15 + 0.85·Σ rank(u)/outdeg(u) (others keep their value)."""
    edges: set[tuple[int, int]] = set()
    rank: dict[int, float] = {}
    out = []
    for batch in batches:
        edges |= set(batch)
        deg: dict[int, int] = {}
        for s, _ in edges:
            deg[s] = deg.get(s, 0) + 1
            rank.setdefault(s, 0.15)
        for _ in range(times):
            new: dict[int, float] = {}
            for s, d in edges:
                new[d] = new.get(d, 0.0) + rank[s] / deg[s]
            rank = {**rank, **{d: 0.15 + 0.85 * v for d, v in new.items()}}
        out.append(dict(rank))
    return out


@pytest.mark.parametrize("steps_in", ["arrow", "checkpoints"], indirect=True)
def test_pagerank_follows_its_definition_across_increments(spark, tmp_path, steps_in):
    """Each increment continues the loop from the last answer, touching only what the new
    links change and what those changes reach; the answers equal the plain-Python loop."""
    df = Dataflow("pr")
    df.source("edges", "src bigint, dst bigint")
    times = 2 if steps_in.where == "checkpoints" else 5  # a job or two per cut: fewer steps
    add_query(df, "pagerank", iterate(
        "ranks", "node bigint, rank double", "node",
        init="SELECT src AS node, 0.15 AS rank FROM edges", step=PAGERANK_STEP,
        times=times))
    rng = np.random.default_rng(5)
    n = 30
    edges = {(i, (i + 1) % n) for i in range(n)}  # a ring, so the walk mixes
    edges |= {(int(a), int(b)) for a, b in rng.integers(0, n, (60, 2)) if a != b}
    batches = [sorted(edges)]
    for _ in range(2):  # new links, some to and from new pages
        new = {(int(a), int(b)) for a, b in rng.integers(0, n + 5, (10, 2)) if a != b}
        batches.append(sorted(new - edges))
        edges |= new
    want = pagerank_continued(batches, times)
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        for batch, expected in zip(batches, want, strict=True):
            c.ingest("edges", [{"src": s, "dst": d} for s, d in batch])
            c.run()
            got = {r["node"]: r["rank"] for r in c.answer("pagerank").to_pylist()}
            assert set(got) == set(expected)
            assert max(abs(got[k] - expected[k]) for k in got) < 1e-9
    if steps_in.arrow:  # ranks are joined with the stored links, summed and merged in Arrow
        assert all(steps_in.taken.get(f) for f in ("with_lineage", "lifted", "merged",
                                                   "moves")), steps_in.taken


def test_iteration_refusals_name_the_problem():
    df = Dataflow("bad")
    df.source("points", "x double, y double")
    df.source("seeds", "k int, x double, y double")
    df.source("deleting", "x double, y double, _mult bigint")
    with pytest.raises(NotIncrementalError) as e:  # outside an iteration
        add_query(df, "q", "SELECT s.k, count(*) AS n FROM points p JOIN seeds s ON "
                  "NEAREST(p.x - s.x) GROUP BY s.k")
    assert "nearest join" in str(e.value) and "iterate()" in str(e.value)
    with pytest.raises(NotIncrementalError) as e:
        add_query(df, "q", kmeans_query(points="deleting"))
    assert "'deleting' has deletes" in str(e.value)
    df2 = Dataflow("bad2")
    df2.source("points", "x double, y double")
    df2.source("seeds", "k int, x double, y double")
    with pytest.raises(QueryError) as e:
        add_query(df2, "q", iterate(
            "centroids", "k int, x double, y double", "k", init="SELECT k, x, y FROM seeds",
            step="SELECT x, y, 1 AS k FROM centroids"))
    assert "must GROUP BY the iterate's key" in str(e.value)
    with pytest.raises(QueryError) as e:
        iterate("c", "k int", "id", init="SELECT 1", step="SELECT 1")
    assert "key ['id'] is not among its columns" in str(e.value)


def test_explain_shows_the_loop_and_the_diffusion():
    df = Dataflow("km")
    df.source("points", "x double, y double")
    df.source("seeds", "k int, x double, y double")
    text = add_query(df, "kmeans", kmeans_query()).program.explain()
    assert "up to 10 steps per increment" in text
    assert "right outer join into an overlay" in text
    assert "older rows keep their assignment" in text
