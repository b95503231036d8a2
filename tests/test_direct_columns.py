"""Tests of the columnar direct-mode state store against a dict model (no Spark)."""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.model.keys import encode_key
from strata.model.schema import records_of
from strata.storage import columnar_runs
from strata.storage.direct_columns import DirectColumns, StoreSpec, key_column
from strata.storage.machine_runs import MACHINE_RUNS, MachineRunCache
from strata.storage.partition_store import PartitionStore, RunInfo

BY_COLUMN = pa.schema([("k", pa.int64()), ("v", pa.int64())])
BY_PAIR = pa.schema([("a", pa.int64()), ("b", pa.string()), ("v", pa.int64())])


def pair_key(rec: dict) -> tuple[bytes, tuple]:
    key = (rec["a"], rec["b"])
    return encode_key(key), key


def store_of(root: str, runs, pair: bool) -> DirectColumns:
    if pair:
        return DirectColumns(root, 0, runs, BY_PAIR, None, pair_key)
    return DirectColumns(root, 0, runs, BY_COLUMN, "k", None)


def records(key, values: list[int], pair: bool) -> list[dict]:
    if pair:
        return [{"a": key[0], "b": key[1], "v": v} for v in values]
    return [{"k": key, "v": v} for v in values]


def check(s: DirectColumns, model: dict, absent: dict) -> None:
    """The store holds exactly ``model`` (enc -> (key, records)) without its tombstones."""
    live = {e: v for e, v in model.items() if v[1]}
    scanned = list(s.scan())
    assert len(scanned) == len({e for e, _, _ in scanned})
    assert {e: (k, sorted(r, key=repr)) for e, k, r in scanned} == {
        e: (k, sorted(r, key=repr)) for e, (k, r) in live.items()}
    wanted = {e: k for e, (k, _) in model.items()} | absent
    found = s.lookup(wanted)
    assert {e: (k, sorted(r, key=repr)) for e, (k, r) in found.items()} == {
        e: (k, sorted(r, key=repr)) for e, (k, r) in live.items()}
    assert s.lookup({}) == {}


INT_KEYS = st.one_of(st.none(), st.integers(-5, 30))
PAIR_KEYS = st.tuples(st.integers(0, 4), st.text(max_size=2))
VALUES = st.lists(st.integers(-9, 9), max_size=3)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), pair=st.booleans(), max_runs=st.integers(1, 4))
def test_matches_dict_model(tmp_path, data, pair, max_runs):
    root = str(tmp_path / uuid.uuid4().hex)
    keys = PAIR_KEYS if pair else INT_KEYS
    epochs = data.draw(st.lists(st.lists(st.tuples(keys, VALUES), max_size=15),
                                min_size=1, max_size=6))
    # keys of another type than the column's are absent, not errors: True is not 1
    absent = {encode_key(("absent", 0)): ("absent", 0)} if pair else {
        encode_key(True): True, encode_key("1"): "1", encode_key(2.0): 2.0}
    model: dict = {}
    runs: list[RunInfo] = []
    for i, epoch in enumerate(epochs):
        entries = {encode_key(k): (k, records(k, vs, pair)) for k, vs in epoch}
        s = store_of(root, runs, pair)
        run = s.write_run(f"r{i}", [(e, k, r) for e, (k, r) in entries.items()])
        runs = [RunInfo.from_json(json.loads(json.dumps(r.to_json())))
                for r in s.maybe_compact(f"r{i}c", [*runs, run], max_runs=max_runs)]
        s.delete_unreferenced(runs)
        model.update(entries)
        check(store_of(root, runs, pair), model, absent)  # runs kept in memory
        columnar_runs.RUN_CACHE.clear()
        check(store_of(root, runs, pair), model, absent)  # from the machine's copy
        columnar_runs.RUN_CACHE.clear()
        MACHINE_RUNS.clear()
        check(store_of(root, runs, pair), model, absent)  # from the files
    assert len(runs) <= max_runs or len(runs) == 1
    listed = sorted(os.listdir(os.path.join(root, "p00000"))) if runs else []
    assert listed == sorted(f"{r.run_id}.arrow" for r in runs)


def test_a_machine_reads_a_run_from_storage_once(tmp_path, monkeypatch):
    """Runs never change, so a process keeps those it wrote or read (up to a budget) and
    the machine keeps a decoded copy: a later store of the same runs, in this process or
    another of the machine, reads nothing from storage, and gives the same."""
    root = str(tmp_path)
    entries = [(encode_key(k), k, records(k, [k * 2], False)) for k in range(2_000)]
    run = store_of(root, [], False).write_run("r0", entries)
    wanted = {encode_key(k): k for k in range(0, 2_000, 100)}
    want = {encode_key(k): (k, [{"k": k, "v": k * 2}]) for k in range(0, 2_000, 100)}
    written = store_of(root, [run], False)  # this process wrote it
    assert written.lookup(wanted) == want and written.bytes_read == 0
    assert written.bytes_from_machine == 0
    columnar_runs.RUN_CACHE.clear()  # another process of the machine: the shared copy
    peer, warm = store_of(root, [run], False), store_of(root, [run], False)
    assert peer.lookup(wanted) == want and peer.bytes_read == 0
    assert peer.bytes_from_machine == run.data_bytes
    assert warm.lookup(wanted) == want and warm.bytes_read == warm.bytes_from_machine == 0
    columnar_runs.RUN_CACHE.clear()
    MACHINE_RUNS.clear()  # a process of another machine: read once, then from memory
    cold, warm = store_of(root, [run], False), store_of(root, [run], False)
    assert cold.lookup(wanted) == want and cold.bytes_read == run.data_bytes > 0
    assert warm.lookup(wanted) == want and warm.bytes_read == 0
    # STRATA_RUN_CACHE_MB=0 and STRATA_MACHINE_RUN_CACHE_MB=0: storage every time
    monkeypatch.setenv("STRATA_RUN_CACHE_MB", "0")  # read at each use
    monkeypatch.setenv("STRATA_MACHINE_RUN_CACHE_MB", "0")
    columnar_runs.RUN_CACHE.clear()
    MACHINE_RUNS.clear()
    for _ in range(2):
        again = store_of(root, [run], False)
        assert again.lookup(wanted) == want and again.bytes_read == run.data_bytes
    assert not columnar_runs.RUN_CACHE and not os.listdir(MACHINE_RUNS.directory)


def test_machine_cache_evicts_least_recently_used(tmp_path):
    """Past its budget the machine's cache drops the files used longest ago; a hit
    counts as a use; a table over a quarter of the budget is not kept."""
    table = pa.table({"k": pa.array(range(10_000), pa.int64())})
    cache = MachineRunCache(str(tmp_path / "machine"), budget=int(table.nbytes * 4.2))
    for i, name in enumerate("abcd"):  # four files fit, five do not
        assert cache.put(name, table)
        os.utime(cache._path(name), (i + 1, i + 1))
    assert cache.get("a") == table  # "a" used last now, "b" the oldest
    assert cache.put("e", table)
    assert cache.get("b") is None
    assert all(cache.get(name) == table for name in "acde")
    assert not cache.put("big", pa.concat_tables([table] * 2))
    assert cache.get("big") is None
    assert MachineRunCache(str(tmp_path / "off"), budget=0).put("a", table) is False


def test_machine_cache_ignores_a_directory_others_can_write(tmp_path):
    """Files another user could have planted are never mapped: the cache turns off."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cache = MachineRunCache(str(shared), budget=1 << 20)
    assert not cache.put("a", pa.table({"k": [1]})) and cache.get("a") is None


def test_key_column_rule():
    schema = pa.schema([("s", pa.string()), ("i", pa.int32()), ("f", pa.float64()),
                        ("b", pa.bool_()), ("t", pa.timestamp("us"))])
    assert [key_column(schema, c) for c in ("s", "i", "b")] == ["s", "i", "b"]
    # floats (0.0 == -0.0 in Arrow, not as route keys), other types, several fields and
    # functions are kept by their encoded key instead
    assert key_column(schema, "f") is None
    assert key_column(schema, "t") is None
    assert key_column(schema, ["s", "i"]) is None
    assert key_column(schema, lambda r: r["s"]) is None
    assert key_column(schema, "absent") is None


def test_spec_round_trips_and_reads_from_files_alone(tmp_path):
    schema = pa.schema([("k", pa.string()), ("m", pa.map_(pa.string(), pa.int64()))])
    spec = StoreSpec.for_state("columns", schema, "k")
    again = StoreSpec(**json.loads(json.dumps(spec.__dict__)))
    assert again == spec and again.arrow_schema == schema and again.column == "k"
    writer = spec.open(str(tmp_path), 2, [])
    rec = {"k": "x", "m": {"a": 1}}
    run = writer.write_run("r0", [(encode_key("x"), "x", [rec])])
    assert list(again.open(str(tmp_path), 2, [run]).scan()) == [(b"sx", "x", [rec])]
    assert isinstance(StoreSpec.for_state("indexed", schema, "k").open(str(tmp_path), 0, []),
                      PartitionStore)


_MAP = pa.map_(pa.string(), pa.int64())


@pytest.mark.parametrize(("kind", "cell", "record"), [
    (_MAP, [("a", 1), ("b", 2)], {"a": 1, "b": 2}),
    (pa.list_(_MAP), [[("a", 1)]], [{"a": 1}]),
    (pa.struct([("m", _MAP), ("n", pa.int64())]), {"m": [("a", 1)], "n": 3},
     {"m": {"a": 1}, "n": 3}),
    (pa.list_(pa.int64()), [1, 2], [1, 2]),
    (pa.struct([("x", pa.float64())]), {"x": 0.5}, {"x": 0.5}),
    (pa.map_(pa.string(), _MAP), [("o", [("i", 5)]), ("p", None)], {"o": {"i": 5}, "p": None}),
    (pa.list_(pa.struct([("m", _MAP)])), [{"m": None}, {"m": [("a", 1)]}],
     [{"m": None}, {"m": {"a": 1}}]),
])
def test_records_read_maps_as_dicts_at_any_depth(kind, cell, record):
    table = pa.table({"k": ["x"], "v": pa.array([cell], kind)})
    assert records_of(table) == [{"k": "x", "v": record}]
    assert records_of(table.to_batches()[0]) == [{"k": "x", "v": record}]


def test_a_map_with_a_key_twice_is_refused():
    table = pa.table({"v": pa.array([[("a", 1), ("a", 2)]], _MAP)})
    with pytest.raises(KeyError, match="twice"):
        records_of(table)


def test_state_is_small_on_disk(tmp_path):
    """The URL-count state: a string key and a count, against the same rows in Parquet."""
    import pyarrow.parquet as pq

    n = 20_000
    rows = [{"url": f"http://example.com/page/{i * 7919 % 100_003}", "count": i % 13}
            for i in range(n)]
    schema = pa.schema([("url", pa.string()), ("count", pa.int64())])
    s = DirectColumns(str(tmp_path), 0, [], schema, "url", None)
    run = s.write_run("r0", [(encode_key(r["url"]), r["url"], [r]) for r in rows])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "same.parquet")
    parquet = os.path.getsize(tmp_path / "same.parquet")
    assert run.nbytes <= 1.5 * parquet, (run.nbytes, parquet)


@pytest.mark.parametrize("pair", [False, True])
def test_tombstone_masks_older_run(tmp_path, pair):
    key = (1, "a") if pair else 1
    enc = encode_key(key)
    s = store_of(str(tmp_path), [], pair)
    first = s.write_run("r0", [(enc, key, records(key, [5, 6], pair))])
    dead = s.write_run("r1", [(enc, key, [])])
    assert dead.tombstones == 1
    assert store_of(str(tmp_path), [first, dead], pair).lookup({enc: key}) == {}
    assert list(store_of(str(tmp_path), [first, dead], pair).scan()) == []
    assert store_of(str(tmp_path), [first], pair).lookup({enc: key}) == {
        enc: (key, records(key, [5, 6], pair))}


def test_machine_cache_drops_a_damaged_file(tmp_path):
    """A file that is not a whole Arrow IPC file is a miss, and is replaced."""
    table = pa.table({"k": [1, 2, 3]})
    cache = MachineRunCache(str(tmp_path / "machine"), budget=1 << 20)
    assert cache.put("a", table)
    with open(cache._path("a"), "r+b") as f:
        f.truncate(10)
    assert cache.get("a") is None
    assert cache.put("a", table) and cache.get("a") == table


@pytest.mark.parametrize("chunks", [0, 1])
def test_member_of_a_table_of_no_rows(chunks):
    """A two-column membership test of no rows (no keys stored yet: a column of one empty
    chunk, or of none) is an empty mask; is_in answers a ChunkedArray of no chunks there,
    on which pyarrow 18's indices_nonzero segfaulted (docs/vectorized.md, "Columnar state
    runs")."""
    import pyarrow.compute as pc

    t = pa.table({"k": pa.array([1, 2], pa.int64()), "s": ["a", "b"]})
    none = t.schema.empty_table() if chunks else t.filter(pc.equal(t["k"], 99))
    assert none["k"].num_chunks == chunks
    assert columnar_runs.member(none, ["k", "s"], t).to_pylist() == []
    assert columnar_runs.member(t, ["k", "s"], none).to_pylist() == [False, False]
    assert columnar_runs.member(t, ["k", "s"], t.slice(1)).to_pylist() == [False, True]
