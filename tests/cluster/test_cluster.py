"""strata on a Spark standalone cluster (scripts/local_cluster.sh) gives local mode's answers.

Every cluster run is a ``strata`` subprocess (``--master spark://…``); the local-mode
reference runs use the test session's in-process local Spark (the ``spark`` fixture).
The homes are in tmp_path on the local disk, which the workers share because they run
on this machine (on a real cluster the home must be on a shared filesystem).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import strata
from strata.physical.program import read_state
from strata.storage.home import Home
from tests.cluster.conftest import (
    driver_env,
    epochs_of,
    events,
    jsonl,
    local,
    records,
    sh,
    submit_args,
)

pytestmark = pytest.mark.cluster

HERE = Path(__file__).resolve().parent
URLCOUNT = HERE.parent / "pipelines" / "urlcount_pipeline.py"
SAMPLE = Path(strata.__file__).parent / "data" / "sample" / "urls"
QUERY = "SELECT url, COUNT(*) AS n FROM urls GROUP BY url"
# on the cluster every epoch runs as tasks on the workers, none in the driver
TASKS = ("--conf", "spark.strata.driverEpoch.maxRows=-1")


def _demo_outputs(home: Path) -> tuple[list, dict[int, list]]:
    state = sorted(read_state(Home(str(home)).stage("count")), key=lambda r: r["url"])
    flows = {}
    for d in sorted((home / "flows" / "counts").iterdir()):
        epoch = int(d.name.split("-")[1].lstrip("e"))
        flows[epoch] = sorted(pq.read_table(d).to_pylist(), key=lambda r: r["url"])
    return state, flows


@pytest.mark.slow  # the same URL count on the cluster: test_urlcount_on_the_cluster_equals_local
def test_demo_on_the_cluster_equals_local(cluster, spark, tmp_path):
    from strata import demo

    home = tmp_path / "cluster"
    done = subprocess.run([sys.executable, "-m", "strata.demo", "--master", cluster.master,
                           "--home", str(home)], env=driver_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "counts match a full recomputation" in done.stdout
    assert demo.main(["--home", str(tmp_path / "local")]) == 0
    state, flows = _demo_outputs(home)
    assert len(state) == 1987 and sorted(flows) == [1, 2, 3, 4]
    assert (state, flows) == _demo_outputs(tmp_path / "local")


def test_uri_home_with_the_catalog_elsewhere_equals_local(cluster, tmp_path):
    """A ``file://`` home (as a shared filesystem's URI would be given) with its catalog
    at a local path: the executors read and write the home's files at the URI, and the
    counts are local mode's over a plain-path home."""
    home, cat = f"file://{tmp_path}/uri", str(tmp_path / "catalog" / "c.sqlite")
    plain = tmp_path / "plain"
    days = [SAMPLE / "day-1.jsonl", SAMPLE / "day-2.jsonl"]
    for where in (("--home", home, "--catalog", cat), ("--home", plain)):
        local("run", URLCOUNT, *where)
        for day in days:
            local("ingest", "urls", day, *where)
    local("run", URLCOUNT, "--home", plain)
    ran = json.loads(sh("run", URLCOUNT, "--home", home, "--catalog", cat, "--master",
                        cluster.master, "--partitions", "4", "--json", *TASKS))
    assert ran["epochs"] == 2 and not (tmp_path / "uri" / "catalog.sqlite").exists()
    counts = sorted(jsonl(local("show", "counts", "--home", home, "--catalog", cat, "--all",
                                "--format", "jsonl")), key=lambda r: json.dumps(r, sort_keys=True))
    assert counts and counts == records(plain, "counts")


# -- the URL-count pipeline with a registered query, 3 increments in 2 runs -------------
def _tiny(tmp: Path) -> Path:
    lines = (SAMPLE / "day-3.jsonl").read_text().splitlines()[:20]
    (tmp / "tiny.jsonl").write_text("\n".join(lines) + "\n")
    return tmp / "tiny.jsonl"


def shuffle_per_epoch(dir_: Path) -> dict[str, dict[str, int]]:
    """From a Spark event log: shuffle bytes written/read per job description
    (``strata STAGE epoch N (kind)``), summed over the tasks of the jobs' stages."""
    stage_desc: dict[int, str] = {}
    per_stage: dict[int, Counter] = defaultdict(Counter)
    for e in events(dir_):
        if e["Event"] == "SparkListenerJobStart":
            desc = (e.get("Properties") or {}).get("spark.job.description") or "other"
            for s in e["Stage IDs"]:
                stage_desc.setdefault(s, desc)
        elif e["Event"] == "SparkListenerTaskEnd" and e.get("Task Metrics"):
            m = e["Task Metrics"]
            w, r = m.get("Shuffle Write Metrics", {}), m.get("Shuffle Read Metrics", {})
            per_stage[e["Stage ID"]]["write"] += w.get("Shuffle Bytes Written", 0)
            per_stage[e["Stage ID"]]["read"] += (r.get("Remote Bytes Read", 0)
                                                 + r.get("Local Bytes Read", 0))
    out: dict[str, Counter] = defaultdict(Counter)
    for s, c in per_stage.items():
        out[" ".join(stage_desc.get(s, "other").split()[:4])].update(c)
    return {k: dict(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def urlcount_homes(cluster, spark, tmp_path_factory):
    """The same increments through the URL-count pipeline and the query ``per_url``:
    run 1 reads day-1 and day-2 (two epochs), run 2 a tiny increment (20 records)."""
    tmp = tmp_path_factory.mktemp("urlcount")
    increments = [[SAMPLE / "day-1.jsonl", SAMPLE / "day-2.jsonl"], [_tiny(tmp)]]
    homes = {"cluster": tmp / "cluster", "local": tmp / "local"}
    runs: list[dict] = []
    for where, home in homes.items():
        # only the cluster runs need a process of their own (ingest and query need no Spark)
        local("run", URLCOUNT, "--home", home)  # creates the home; nothing to run yet
        local("query", QUERY, "--home", home, "--name", "per_url")
        for i, files in enumerate(increments, 1):
            for f in files:
                local("ingest", "urls", f, "--home", home)
            if where == "local":
                local("run", URLCOUNT, "--home", home, "--partitions", "4")
                continue
            log_dir = tmp / f"log_dir-{i}"
            log_dir.mkdir()
            env = driver_env(submit_args("spark.eventLog.enabled=true",
                                         f"spark.eventLog.dir=file://{log_dir}",
                                         "spark.eventLog.compress=false"))
            # on the cluster the query's epochs run as tasks on the workers (their shuffle
            # is measured below); locally, small, in the driver
            out = sh("run", URLCOUNT, "--home", home, "--master", cluster.master,
                     "--partitions", "4", "--json", *TASKS, env=env)
            runs.append({"report": json.loads(out), "shuffle": shuffle_per_epoch(log_dir)})
    return homes, runs


def test_urlcount_on_the_cluster_equals_local(urlcount_homes):
    homes, runs = urlcount_homes
    assert [r["report"]["epochs"] for r in runs] == [4, 2]  # count and per_url, per increment
    assert epochs_of(homes["cluster"]) == epochs_of(homes["local"]) == {"count": 3,
                                                                         "per_url": 3}
    counts = records(homes["cluster"], "counts")
    assert {r["_epoch"] for r in counts} == {1, 2, 3}
    assert counts == records(homes["local"], "counts")
    assert records(homes["cluster"], "count.state") == records(homes["local"], "count.state")


def test_query_on_the_cluster_equals_local(urlcount_homes, tmp_path):
    homes, _ = urlcount_homes
    answer = records(homes["cluster"], "per_url", history=False)
    assert answer == records(homes["local"], "per_url", history=False)
    seen = Counter(json.loads(line)["url"]
                   for f in (SAMPLE / "day-1.jsonl", SAMPLE / "day-2.jsonl", _tiny(tmp_path))
                   for line in f.read_text().splitlines() if line.strip())
    assert {r["url"]: r["n"] for r in answer} == seen


def test_state_is_not_shuffled_on_the_cluster(urlcount_homes):
    """Spark's own task metrics (the event log of each cluster run): an epoch shuffles
    about its increment, never the state it updates."""
    homes, runs = urlcount_homes
    shuffle = {**runs[0]["shuffle"], **runs[1]["shuffle"]}
    state = {(r["stage"], r["epoch"]): r["metrics"]["state_bytes_total"]
             for run in runs for r in run["report"]["reports"]}
    print("\nshuffle bytes per epoch on the cluster:", json.dumps(shuffle, indent=1))
    print("state bytes after each epoch:", state)
    e1, e2, e3 = (shuffle[f"strata count epoch {n}"]["write"] for n in (1, 2, 3))
    assert e1 > 0
    # epoch 2 reads as many records as epoch 1, and a state of epoch 1's size besides:
    # its shuffle follows the increment, not increment + state
    assert e2 < 1.5 * e1
    # epoch 3 reads 20 records into a state of ~2,000 URLs: it shuffles a sliver of what
    # moving the state would take (its URLs alone; the columnar state files are zstd-
    # compressed, so their size is no bound on a shuffle of the state's records)
    urls = sum(len(r["url"].encode()) for r in records(homes["cluster"], "count.state"))
    assert e3 < urls / 20 and e3 < e1 / 20
    q1, q3 = (shuffle[f"strata per_url epoch {n}"]["write"] for n in (1, 3))
    assert q3 < q1 / 10


def test_a_multi_module_pipeline_ships_its_code_to_the_workers(cluster, tmp_path):
    """The workers' Python has strata but not the pipeline's own modules: strata run
    ships the pipeline's source root (a sibling module and a package) with addPyFile."""
    pipeline = HERE.parent / "multimodule" / "pipeline.py"
    words = ["Apple", "pear", " apple", "Fig", "pear", "APPLE"]
    data, home = tmp_path / "words.jsonl", tmp_path / "home"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in words))
    env = driver_env()
    env.pop("PYTHONPATH")
    local("run", pipeline, "--home", home)
    local("ingest", "words", data, "--home", home)
    sh("run", pipeline, "--home", home, "--master", cluster.master, "--partitions", "2",
       *TASKS, env=env)
    counts = {r["word"]: r["count"] for r in records(home, "count.state")}
    assert counts == Counter(w.strip().lower() for w in words)


def run_here_and_on_cluster(cluster, pipeline: Path, tmp_path: Path,
                            files: list[tuple[str, Path]], setup: tuple = (), first: int = 1
                            ) -> dict[str, Path]:
    """Two homes, ``cluster`` and ``local``: register ``pipeline`` in each (then the CLI
    command ``setup``, if any), ingest the ``first`` ``(flow, file)`` pairs and run, then
    ingest the rest and run again (an epoch per file; the second run starts from the first's stored
    state), on the cluster (`strata run` given ``TASKS``) or in local mode. Two cluster
    runs, not one per file: each starts a driver and executors. Returns the homes."""
    homes = {"cluster": tmp_path / "cluster", "local": tmp_path / "local"}
    for where, home in homes.items():
        local("run", pipeline, "--home", home)
        if setup:
            local(*setup, "--home", home)
        for batch in (files[:first], files[first:]):
            for flow, path in batch:
                local("ingest", flow, path, "--home", home)
            if where == "local":
                local("run", pipeline, "--home", home)
            else:
                sh("run", pipeline, "--home", home, "--master", cluster.master, *TASKS)
    return homes


def test_a_window_query_and_a_vectorized_stage_on_the_cluster_equal_local(cluster, tmp_path):
    """One pipeline, two kinds of stage, run on the cluster and in local mode, epoch by
    epoch (one home: each cluster run starts a driver and executors):

    - a vectorized stage (its function in the pipeline file, shipped by value; the epoch
      a DataFrame job with mapInArrow) over the sample days: the same counts per epoch and
      the same columnar state;
    - a window query (SQL with WINDOW) and its C2 flow over increments with late and
      held-back records.

    On the cluster the epochs run as tasks on the workers; locally (small) in the driver."""
    import random

    from tests.windows.weblog import DDL, SQL, increments, write

    pipeline = tmp_path / "two_kinds.py"
    pipeline.write_text((HERE.parent / "pipelines" / "vectorized_pipeline.py").read_text()
                        + f"dataflow.source('log', {DDL!r})\n")
    windowed = SQL.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 6, 2, host)")
    raw = increments(random.Random(31), 3, epochs=3, span=6)
    days = sorted(SAMPLE.glob("day-*.jsonl"))
    logs = [write(tmp_path, batch) for batch in raw]
    homes = run_here_and_on_cluster(
        cluster, pipeline, tmp_path,
        [("urls", days[0]), ("log", logs[0]), *(("urls", d) for d in days[1:]),
         *(("log", f) for f in logs[1:])], first=2,
        setup=("window", "add", "w", windowed, "--deadline", "0", "--lateness", "6"))
    assert epochs_of(homes["cluster"]) == epochs_of(homes["local"]) == {
        "count": len(days), "w": len(raw)}
    for target in ("w_windows", "w_c2", "counts", "count.state"):
        got = records(homes["cluster"], target)
        assert got and got == records(homes["local"], target), target
    expected = Counter(json.loads(line)["url"] for day in days
                       for line in day.read_text().splitlines() if line.strip())
    assert {r["url"]: r["count"] for r in records(homes["cluster"], "count.state")} == expected
