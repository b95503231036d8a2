"""Tests of the per-partition state store (no Spark)."""

from __future__ import annotations

import json
import os
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.model.keys import encode_key, hash64
from strata.storage import partition_store as store
from strata.storage.partition_store import PartitionStore, RunInfo, read_all


def ent(key, records):
    return encode_key(key), key, records


def files(root, p=0):
    d = os.path.join(root, f"p{p:05d}")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def check(s: PartitionStore, model: dict, missing=()) -> None:
    """The store holds exactly ``model`` (enc -> (key, records)), tombstones excluded."""
    live = {e: v for e, v in model.items() if v[1]}
    scanned = list(s.scan())
    assert len(scanned) == len({e for e, _, _ in scanned})
    assert {e: (k, r) for e, k, r in scanned} == live
    assert s.lookup([*model, *missing]) == live
    assert s.lookup([]) == {}


def roundtrip(runs):
    return [RunInfo.from_json(json.loads(json.dumps(r.to_json()))) for r in runs]


# keys of several types; 1, True and 1.0 are distinct groups
KEYS = st.one_of(
    st.integers(-3, 40),
    st.booleans(),
    st.floats(-2, 2, allow_nan=False, width=16),
    st.text(max_size=3),
    st.tuples(st.integers(0, 3), st.text(max_size=1)),
)
RECORDS = st.lists(
    st.fixed_dictionaries({"v": st.integers(), "s": st.text(max_size=4)}), max_size=3
)
EPOCH = st.lists(st.tuples(KEYS, RECORDS), max_size=20)


def apply_epochs(root, epochs, max_runs, frac, model):
    runs: list[RunInfo] = []
    for i, epoch in enumerate(epochs):
        entries = {encode_key(k): (k, r) for k, r in epoch}  # one entry per enc
        s = PartitionStore(root, 0, runs)
        run = s.write_run(f"r{i}", [(e, k, r) for e, (k, r) in entries.items()])
        assert run.entries == len(entries)
        runs = roundtrip(
            s.maybe_compact(f"r{i}", [*runs, run], max_runs=max_runs, base_fraction=frac)
        )
        s.delete_unreferenced(runs)
        model.update(entries)
        check(PartitionStore(root, 0, runs), model, missing=[encode_key(("absent", i))])
    return runs


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    epochs=st.lists(EPOCH, min_size=1, max_size=6),
    max_runs=st.integers(1, 4),
    frac=st.sampled_from([0.0, 0.3, 100.0]),
    partial_index=st.booleans(),
)
def test_matches_dict_model(tmp_path, epochs, max_runs, frac, partial_index):
    root = str(tmp_path / uuid.uuid4().hex)
    with pytest.MonkeyPatch.context() as mp:
        if partial_index:  # force the header/directory/bucket read path
            mp.setattr(store, "_SMALL_INDEX", 0)
            mp.setattr(store, "_DENSE_LOOKUP", 0)
        model: dict = {}
        runs = apply_epochs(root, epochs, max_runs, frac, model)
    assert len(runs) <= max(max_runs, 2)
    assert files(root) == sorted(f"{r.run_id}.{k}" for r in runs for k in ("data", "index"))


@pytest.mark.parametrize("fake", [lambda enc: 7, lambda enc: hash64(enc) % 4])
@pytest.mark.parametrize("partial_index", [False, True])
def test_hash_collisions(tmp_path, monkeypatch, fake, partial_index):
    monkeypatch.setattr(store, "hash64", fake)
    if partial_index:
        monkeypatch.setattr(store, "_SMALL_INDEX", 0)
        monkeypatch.setattr(store, "_DENSE_LOOKUP", 0)
    rng = random.Random(1)
    epochs = [
        [(rng.randrange(60), [{"v": rng.random()}] * rng.randrange(3)) for _ in range(40)]
        for _ in range(5)
    ]
    model: dict = {}
    apply_epochs(str(tmp_path), epochs, max_runs=3, frac=100.0, model=model)
    assert sum(1 for _, (_, r) in model.items() if r) > 10
    # and with one full merge at the end
    apply_epochs(str(tmp_path / "b"), epochs, max_runs=8, frac=0.0, model={})


def test_compaction(tmp_path):
    root = str(tmp_path)
    s = PartitionStore(root, 3, [])
    model = {e: (k, r) for e, k, r in (ent(i, [{"v": i}]) for i in range(200))}
    runs = [s.write_run("base", [(e, k, r) for e, (k, r) in model.items()])]
    for j in range(4):  # small epochs: updates, deletes (tombstones), inserts
        upd = [ent(i, [{"v": -i, "j": j}]) for i in range(j * 10, j * 10 + 5)]
        dels = [ent(i, []) for i in range(100 + j * 10, 100 + j * 10 + 5)]
        new = [ent(f"n{j}", [{"v": j}])]
        runs.append(s.write_run(f"e{j}", upd + dels + new))
        model.update({e: (k, r) for e, k, r in upd + dels + new})
    s.runs = runs
    before = sorted(s.scan())
    check(s, model)

    # count-triggered: only the newer runs are merged, the base stays
    minor = s.maybe_compact("m", runs, max_runs=3, base_fraction=10.0)
    assert [r.run_id for r in minor] == ["base", "m.m"]
    check(PartitionStore(root, 3, minor), model)
    assert minor[1].entries == 4 * 11  # tombstones kept: the base still holds those keys

    # nothing to do
    assert s.maybe_compact("x", minor, max_runs=3, base_fraction=10.0) == minor

    # size-triggered: everything into one run, shadowed entries and tombstones gone
    full = s.maybe_compact("f", minor, base_fraction=0.01)
    assert [r.run_id for r in full] == ["f.c"]
    live = sum(1 for _, r in model.values() if r)
    assert full[0].entries == live == 200 - 20 + 4
    s2 = PartitionStore(root, 3, full)
    assert sorted(s2.scan()) == before
    check(s2, model)
    assert s2.total_bytes < sum(r.data_bytes + r.index_bytes for r in runs)

    assert len(files(root, 3)) == 2 * (5 + 1 + 1)
    assert s2.delete_unreferenced(full) == 2 * 6
    assert files(root, 3) == ["f.c.data", "f.c.index"]
    assert s2.delete_unreferenced(full) == 0

    # deleting every key compacts to no runs at all
    gone = s2.write_run("g", [(e, k, []) for e, (k, r) in model.items()])
    assert s2.maybe_compact("h", [*full, gone], base_fraction=0.0) == []
    assert files(root, 3) == ["f.c.data", "f.c.index", "g.data", "g.index"]


def url_entries(n: int, seed: int, start: int = 0) -> list:
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        url = f"http://site{i % 997}.example.com/page/{i}"
        recs = [{"url": url, "count": rng.randrange(10**6)} for _ in range(1 + (i % 3 == 0))]
        out.append(ent(url, recs))
    return out


def test_inner_lookup_reads_little(tmp_path, monkeypatch):
    root = str(tmp_path)
    data = url_entries(50_000, seed=0)
    s = PartitionStore(root, 0, [])
    s.runs = [s.write_run("r0", data)]
    assert s.runs[0].index_bytes > store._SMALL_INDEX  # the partial-index path is exercised
    rng = random.Random(42)
    sample = rng.sample(data, 500)  # 1% of the keys
    probe = [e for e, _, _ in sample] + [encode_key(f"missing{i}") for i in range(20)]
    got = s.lookup(probe)
    assert got == {e: (k, r) for e, k, r in sample}
    ratio = s.bytes_read / s.total_bytes
    print(f"inner 1% lookup, 1 run: read {s.bytes_read} of {s.total_bytes} bytes = {ratio:.4f}")
    assert ratio <= 0.05

    # an epoch later: a second (small) run holding 1% updated keys
    upd = [(e, k, [{**r[0], "count": -1}]) for e, k, r in rng.sample(data, 500)]
    s.runs.append(s.write_run("r1", upd))
    model = {e: (k, r) for e, k, r in data} | {e: (k, r) for e, k, r in upd}
    sample = rng.sample(sorted(model), 500)
    s.bytes_read = 0
    assert s.lookup(sample) == {e: model[e] for e in sample}
    ratio2 = s.bytes_read / s.total_bytes
    print(f"inner 1% lookup, 2 runs: read {s.bytes_read} of {s.total_bytes} bytes = {ratio2:.4f}")
    assert ratio2 <= 0.05

    # the work of looking up a fixed number of keys does not grow with the state size
    small = PartitionStore(root, 1, [])
    small_data = url_entries(5_000, seed=1)
    small.runs = [small.write_run("r0", small_data)]
    monkeypatch.setattr(store, "_SMALL_INDEX", 0)
    small.lookup([e for e, _, _ in rng.sample(small_data, 200)])
    big = PartitionStore(root, 0, s.runs[:1])
    big.lookup([e for e, _, _ in rng.sample(data, 200)])
    assert big.bytes_read < 1.5 * small.bytes_read

    # a scan reads (about) everything: all the data files, no index
    s.bytes_read = 0
    assert sorted(s.scan()) == sorted((e, k, r) for e, (k, r) in model.items())
    assert 0.8 * s.total_bytes <= s.bytes_read <= s.total_bytes


def test_crash_safety(tmp_path):
    root = str(tmp_path)
    s = PartitionStore(root, 0, [])
    run = s.write_run("ok", [ent(i, [{"v": i}]) for i in range(1000)])
    assert files(root) == ["ok.data", "ok.index"]
    d = tmp_path / "p00000"
    assert (d / "ok.data").stat().st_size == run.data_bytes
    assert (d / "ok.index").stat().st_size == run.index_bytes

    def failing():
        yield from (ent(i, [{"v": i}]) for i in range(100))
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        s.write_run("bad", failing())
    with pytest.raises(Exception):  # noqa: B017 - unpicklable record, fails mid-write
        s.write_run(
            "bad2", [ent(i, [{"v": i}]) for i in range(100)] + [ent("x", [{"f": lambda: 0}])]
        )
    assert files(root) == ["ok.data", "ok.index"]
    with pytest.raises(ValueError):
        s.write_run("dup", [ent(1, [{}]), ent(1, [{"v": 2}])])
    s.runs = [run]
    assert len(list(s.scan())) == 1000

    # a temporary left by a crashed writer is garbage-collected
    (d / "dead.data.tmp-123").write_bytes(b"junk")
    assert s.delete_unreferenced([run]) == 1
    assert files(root) == ["ok.data", "ok.index"]


def test_read_all_and_empty(tmp_path):
    root = str(tmp_path)
    assert PartitionStore(root, 0, []).lookup([b"x"]) == {}
    assert list(PartitionStore(root, 0, []).scan()) == []
    parts = {}
    expect = []
    for p in range(3):
        s = PartitionStore(root, p, [])
        es = [ent((p, i), [{"v": i}]) for i in range(p * 5)]
        parts[p] = [s.write_run("a", es), s.write_run("b", [])]
        expect += es
    assert sorted(read_all(root, parts)) == sorted(expect)
    assert PartitionStore(root, 0, parts[0]).total_bytes == sum(r.nbytes for r in parts[0])
