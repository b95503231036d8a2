"""Columnar direct-mode state of per-group translate stages.

A partition's state is a list of :class:`~strata.storage.columnar_runs.ColumnarRuns` runs:
Arrow IPC files with zstd buffers, the state schema's columns and ``__dead`` tombstone rows.
What identifies a key in a run depends on the state's ``route_by``:

* one field of an integer, string, binary or boolean column: that column itself. Its
  values compare exactly as route keys do, so no extra bytes are stored;
* anything else (several fields, a function, a float column): an extra ``__enc`` column
  with each record's canonical key encoding (``strata.model.keys``).

Lookups and scans are whole-run, vectorized membership tests; records become Python
dicts only for the keys the epoch reads (inner grouping) or for every stored key (outer
grouping, which calls translate on all of them). Compared with the record-granular
indexed store (``partition_store.py``), the state is about eight times smaller on disk
and outer scans decode no per-key pickles, but an inner lookup reads whole runs rather
than the epoch's entries (``docs/architecture.md``, "Direct-mode state stores").
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strata.model.keys import encode_column
from strata.model.schema import records_of
from strata.storage.columnar_runs import ColumnarRuns
from strata.storage.partition_store import Entry, PartitionStore, RunInfo

ENC = "__enc"
KeyOf = Callable[[dict], tuple[bytes, Any]]
_EXACT_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string,
                pa.types.is_binary, pa.types.is_large_binary, pa.types.is_boolean)


def key_column(schema: pa.Schema, route_by: Any) -> str | None:
    """The state column that is the key itself, if the state is routed by one such field."""
    if not isinstance(route_by, str) or route_by not in schema.names:
        return None
    kind = schema.field(route_by).type
    return route_by if any(test(kind) for test in _EXACT_TYPES) else None


STORES = ("columns", "indexed")


@dataclass(frozen=True)
class StoreSpec:
    """Which direct-mode store a stage's runs are in, and how to read them from the files
    alone: ``"columns"`` (this module) or ``"indexed"`` (``partition_store.py``, whose
    inner lookups read only the epoch's entries). A home keeps the store it began with."""

    format: str = "columns"
    schema: str = ""  # columns: the state schema, IPC-serialized, base64
    column: str | None = None  # columns: the key column; None: an ``__enc`` column

    @classmethod
    def for_state(cls, fmt: str, schema: pa.Schema, route_by: Any) -> StoreSpec:
        """The spec of a new home's store for a state of ``schema`` routed by ``route_by``."""
        if fmt == "indexed":
            return cls("indexed")
        blob = base64.b64encode(schema.serialize().to_pybytes()).decode()
        return cls("columns", blob, key_column(schema, route_by))

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema)))

    def open(self, root: str, partition: int, runs: Sequence[RunInfo],
             key_of: KeyOf | None = None) -> DirectColumns | PartitionStore:
        """The store of ``partition``'s ``runs``; ``key_of`` is the state's route (without
        it, keys of ``__enc``-keyed runs read as None)."""
        if self.format == "indexed":
            return PartitionStore(root, partition, runs)
        return DirectColumns(root, partition, runs, self.arrow_schema, self.column, key_of)


class DirectColumns:
    """The columnar runs of state partition ``partition`` of a translate stage.

    ``column`` is the key column (None: an ``__enc`` column is kept) and ``key_of(record)
    -> (enc, key)`` the state's route; the interface matches the indexed store's.
    """

    def __init__(self, root: str, partition: int, runs: Sequence[RunInfo],
                 schema: pa.Schema, column: str | None, key_of: KeyOf | None) -> None:
        self.schema, self.column, self.key_of = schema, column, key_of
        stored = schema if self.column else schema.append(pa.field(ENC, pa.binary()))
        self.store = ColumnarRuns(root, partition, runs, stored, [self.column or ENC])

    @property
    def bytes_read(self) -> int:
        """Bytes of the runs read so far (lookups, scans and compaction)."""
        return self.store.bytes_read

    @property
    def bytes_from_machine(self) -> int:
        """Stored bytes of the runs found in the machine's decoded copy instead of read."""
        return self.store.bytes_from_machine

    def _keys_table(self, keys: Iterable[tuple[bytes, Any]]) -> pa.Table:
        """The key column(s) of ``(enc, key)`` pairs, as the runs store them."""
        if self.column is None:
            return pa.table({ENC: pa.array([enc for enc, _ in keys], pa.binary())})
        kind = self.schema.field(self.column).type
        values = [key for _, key in keys]
        try:
            column = pa.array(values, kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # a key of another type than the column's is in no run: leave it out
            column = pa.array([v for v in values if _fits(v, kind)], kind)
        return pa.table({self.column: column})

    def _grouped(self, table: pa.Table, wanted: Mapping[bytes, Any] | None
                 ) -> dict[bytes, tuple[Any, Sequence[dict]]]:
        """``enc -> (key, records)`` of ``table``'s rows (only the ``wanted`` encs)."""
        found: dict[bytes, tuple[Any, Any]] = {}  # records: a list or a 1-tuple
        if self.column is None:
            encs = table[ENC].to_pylist()
            records = records_of(table.drop_columns([ENC]))
            pairs: Iterator[tuple[bytes, Any, dict]] = (
                (enc, None, rec) for enc, rec in zip(encs, records, strict=True))
        else:
            column = table.column(self.column)
            encs, keys, records = encode_column(column), column.to_pylist(), records_of(table)
            if wanted is None:  # a scan: one record per key is the common case, built in
                # bulk with no Python per key (each key's records a 1-tuple, not a list)
                bulk: dict = dict(zip(encs, zip(keys, zip(records), strict=True), strict=True))
                if len(bulk) == len(records):
                    return bulk
            pairs = zip(encs, keys, records, strict=True)
        for enc, key, rec in pairs:
            if wanted is not None and enc not in wanted:
                continue  # the column matched a key of another type (1 and True)
            group = found.get(enc)
            if group is None:
                if self.column is None and wanted is not None:
                    key = wanted[enc]
                elif self.column is None and self.key_of is not None:
                    key = self.key_of(rec)[1]
                found[enc] = (key, [rec])
            else:
                group[1].append(rec)
        return found

    def lookup(self, keys: Mapping[bytes, Any]) -> dict[bytes, tuple[Any, Sequence[dict]]]:
        """``enc -> (key, records)`` for the live keys among ``keys`` (``enc -> key``)."""
        if not keys or not self.store.runs:
            return {}
        return self._grouped(self.store.lookup(self._keys_table(keys.items())), keys)

    def scan(self) -> Iterator[Entry]:
        """Every live ``(enc, key, records)`` of the partition."""
        for enc, (key, records) in self.live().items():
            yield enc, key, list(records)

    def live(self) -> dict[bytes, tuple[Any, Sequence[dict]]]:
        """Every live key of the partition: ``enc -> (key, records)``; the records are a
        list or a tuple (read-only either way)."""
        return self._grouped(self.store.scan(), None)

    def write_run(self, run_id: str, entries: Iterable[Entry]) -> RunInfo:
        """A new run of ``entries`` (empty records: a tombstone), not committed."""
        live: list[dict] = []
        encs: list[bytes] = []
        dead: list[tuple[bytes, Any]] = []
        for enc, key, records in entries:
            if records:
                live += records
                encs += [enc] * len(records)
            else:
                dead.append((enc, key))
        table = pa.Table.from_pylist(live, schema=self.schema)
        if self.column is None:
            table = table.append_column(ENC, pa.array(encs, pa.binary()))
        return self.store.write_run(run_id, table, self._keys_table(dead) if dead else None)

    def write_table(self, run_id: str, live: pa.Table, dead: Sequence[tuple[bytes, Any]] = ()
                    ) -> RunInfo:
        """A new run of the records of ``live`` (already of the state schema) and tombstones
        for the ``(enc, key)`` pairs in ``dead``; only for a store keyed by its key column."""
        assert self.column is not None, "an __enc-keyed store needs write_run"
        return self.store.write_run(run_id, live, self._keys_table(dead) if dead else None)

    def maybe_compact(self, run_id: str, runs: Sequence[RunInfo], *, max_runs: int = 8
                      ) -> list[RunInfo]:
        """The run list to commit in place of ``runs`` (see ``ColumnarRuns``)."""
        return self.store.maybe_compact(run_id, runs, max_runs=max_runs)

    def delete_unreferenced(self, keep: Sequence[RunInfo]) -> int:
        """Delete this partition's files not belonging to ``keep`` (no writer running)."""
        return self.store.delete_unreferenced(keep)


def _fits(value: Any, kind: pa.DataType) -> bool:
    try:
        pa.array([value], kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return False
    return True
