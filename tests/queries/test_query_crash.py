"""kill -9 inside query stages, restart, finish: the answers equal DuckDB's over all input,
every epoch's changes are delivered once, and no table file is left that the manifest does
not name.

Query epochs (``QueryProgram.run_epoch``) stage their table files, move them into
``state/<query>/tables/<name>/`` and then commit a manifest listing the live files; Spark
reads a table through its directory, so files an interrupted epoch moved but never
committed must be swept before the next read. The dataflow
(:mod:`tests.recovery.query_pipeline`) holds a group-by with ``avg`` and a join +
group-by whose join input tables are compacted (replaced) and appended to in epoch 2.

Each *chain* is a sequence of worker processes over one home, each killed with SIGKILL
at a crash point of :mod:`strata.faults` (counted per process). Every process first
recovers what the previous one left (re-runs or applies its interrupted epoch) and may
be killed in that recovery; after the last, this process runs the dataflow again
(``strata run``), which finishes it. A Spark start per process is the cost, so the crash
points share homes (two chains side by side) rather than having one home each.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from strata.controller import Controller
from strata.queries.spark import tables
from strata.storage import fs
from strata.storage.home import Home
from strata.storage.increments import read_records
from strata.storage.manifest import StateDir
from tests.queries.oracle import duckdb_answer, net_changes, normalized
from tests.recovery import query_pipeline
from tests.recovery.harness import QUICK_JVM, ingest_all, run_worker

# the crash chains run strata in subprocesses; the fixture takes `spark` dynamically
pytestmark = pytest.mark.spark

PIPELINE = "tests.recovery.query_pipeline"

# Query epochs in order: avg_by_x 1, revenue 1, avg_by_x 2, revenue 2 (query_pipeline).
# Per chain: (crash point, the epochs the killed process finished before it died there).
# Each chain's last process commits revenue 2, so this process only applies it.
CHAINS = {
    # the runner's points around the manifest switch, at query epochs over state
    "manifest": [
        # avg_by_x 2 moved its new group table in, wrote no manifest
        ("before-manifest:3", ["avg_by_x 1", "revenue 1"]),
        # re-ran that; revenue 2 (join tables compacted and appended to) has a manifest
        # but CURRENT still names epoch 1
        ("between-manifest-and-current:2", ["avg_by_x 2 (recovered)"]),
        # re-ran that, committed; the recovery's apply rolled back
        ("inside-apply:1", []),
    ],
    # the controller's: an epoch logged and not run, one committed and not applied; and a
    # commit whose state gc never ran
    "apply": [
        ("after-intent:1", []),  # avg_by_x 1 logged, not run (no Spark started)
        # re-ran that; avg_by_x 2, its stage's last, committed, no state gc
        ("after-manifest:3", ["avg_by_x 1 (recovered)", "revenue 1"]),
        # applied that; revenue 2 committed, not applied
        ("after-spark-commit:1", ["avg_by_x 2 (recovered)"]),
    ],
}
FINISH = ["revenue 2 (recovered)"]  # what the last run (here) does
# Not here: after-apply and gc-after-commit, after the epoch is applied: what they
# interrupt is the controller's increment gc, which no stage kind changes
# (tests/test_recovery.py kills at both).


def _chain(home: Path, points: list[tuple[str, list[str]]]) -> list[str]:
    """Run a worker process per crash point over ``home``, each killed there; a line per
    process for assertion messages."""
    ingest_all(home, PIPELINE)
    logs = []
    for point, finished in points:
        t0 = time.perf_counter()
        rc, out, err = run_worker(home, crash=point, pipeline=PIPELINE, jvm_options=QUICK_JVM)
        ran = [line.removeprefix("epoch ") for line in out.splitlines()
               if line.startswith("epoch ")]
        logs.append(f"killed at {point} after {time.perf_counter() - t0:.1f} s, having run "
                    f"{ran}")
        assert rc == -signal.SIGKILL, f"rc={rc}\n" + "\n".join(logs) + f"\n{err[-3000:]}"
        assert ran == finished, "\n".join(logs)  # killed in the epoch the comment says
    return logs


@pytest.fixture(scope="module")
def compaction():
    """Compact join tables here as the workers do (query_pipeline.setup)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tables, "COMPACT_FILES_PER_BUCKET",
                   query_pipeline.COMPACT_FILES_PER_BUCKET)
        yield


@pytest.fixture(scope="module")
def chains(request, tmp_path_factory, compaction):
    """Both chains, side by side, then each finished here: name -> (home, logs)."""
    root = tmp_path_factory.mktemp("query-crash")
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {name: pool.submit(_chain, root / name, points)
                for name, points in CHAINS.items()}
        spark = request.getfixturevalue("spark")  # starts meanwhile, if this runs alone
        logs = {name: run.result() for name, run in runs.items()}
    for name in CHAINS:  # `strata run` again, in this process on the test session's Spark
        t0 = time.perf_counter()
        with Controller(root / name, query_pipeline.build_dataflow(), spark=spark,
                        num_partitions=2) as c:
            ran = [f"{r.stage} {r.epoch}{' (recovered)' if r.recovered else ''}"
                   for r in c.run()]
        logs[name].append(f"then here in {time.perf_counter() - t0:.1f} s: {ran}")
        assert ran == FINISH, "\n".join(logs[name])
    return {name: (root / name, logs[name]) for name in CHAINS}


def _inputs() -> dict[str, list[dict]]:
    seen: dict[str, list[dict]] = {f: [] for f in query_pipeline.SOURCES}
    for flow, records, _ in query_pipeline.batches():
        seen[flow] += records
    return seen


def _controller(home: Path) -> Controller:
    return Controller(home, query_pipeline.build_dataflow())  # reads only: starts no Spark


@pytest.mark.parametrize("chain", CHAINS)
def test_answers_equal_duckdb_and_each_epoch_is_delivered_once(chains, chain):
    home, logs = chains[chain]
    seen = _inputs()
    with _controller(home) as c:
        assert not c.catalog.unapplied()
        for query, (sql, _) in query_pipeline.QUERIES.items():
            got = normalized(tuple(r.values()) for r in c.answer(query).to_pylist())
            assert got == duckdb_answer(sql, seen, query_pipeline.SOURCES), (query, logs)
            assert c.catalog.stage_row(query).epochs == 2, (query, logs)
            changes = f"{query}_changes"
            assert [e for e, _ in c.stored_increments(changes)] == [1, 2], (query, logs)
            assert net_changes(c.read_flow(changes).to_pylist()) == got, (query, logs)


@pytest.mark.parametrize("chain", CHAINS)
def test_no_file_is_left_that_the_manifest_does_not_name(chains, chain):
    home, logs = chains[chain]
    with _controller(home) as c:
        for query in query_pipeline.QUERIES:
            sd = StateDir(Home(c.home).stage(query))
            snap = sd.current()
            assert snap.epoch == 2, (query, logs)
            tables = sd.layout.tables_root
            stored = {fs.join(tables, t, f) for t in fs.list_dir(tables)
                      for f in fs.list_dir(fs.join(tables, t))}
            named = {f for t in snap.state["tables"].values() for f in t["files"]}
            assert stored == named, (query, sorted(stored ^ named), logs)
            assert sorted(fs.list_dir(sd.root)) == [
                "CURRENT", f"manifest-{snap.epoch:08d}.json", "tables"], (query, logs)
            dirs = {f.rsplit("/", 1)[0] for _, inc in c.stored_increments(f"{query}_changes")
                    for f in inc.files}
            out = {d for d in Home(c.home).output_dirs() if f"/{query}_changes/" in d}
            assert out == dirs, (query, logs)


def test_chains_end_in_the_same_state_and_changes(chains):
    """Different crash histories, the same result: each epoch's changes and every table's
    rows (after compaction and appends) are equal across the chains."""
    def result(home: Path) -> dict:
        with _controller(home) as c:
            changes = {q: [(e, sorted(map(repr, read_records(inc.files))))
                           for e, inc in c.stored_increments(f"{q}_changes")]
                       for q in query_pipeline.QUERIES}
            state = {q: sorted(map(repr, c.state_records(q))) for q in query_pipeline.QUERIES}
        return {"changes": changes, "state": state}

    first, *others = [result(home) for home, _ in chains.values()]
    for other in others:
        assert other == first
