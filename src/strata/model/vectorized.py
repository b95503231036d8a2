"""Vectorized translate: one call over many groups, as pandas DataFrames.

A vectorized translate ``fn(state, inputs) -> VectorResult`` is given the stored state
rows of a set of groups and each input flow's rows of those groups, all as DataFrames
carrying the key columns, and returns the rows to append to each output flow and the
*new state of every group it was given* (a group absent from ``VectorResult.state`` has
no state afterwards). It must be groupwise: its result for a set of groups is the union
of its results for each group alone. That is the whole semantics, and :func:`per_group`
makes it literal: called once per group through the ordinary translate contract, which
is what the reference executor (and every non-vectorized route) runs. The physical layer
calls ``fn`` once per partition instead (``docs/vectorized.md``). A function with the
attribute ``arrow = True`` is given, and returns, Arrow tables instead of DataFrames.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from strata.model.emitter import Emitter
from strata.model.schema import records_of


@dataclass(frozen=True)
class VectorResult:
    """What a vectorized translate returns: rows per output flow, and the new state."""

    outputs: Mapping[str, pd.DataFrame | pa.Table] = field(default_factory=dict)
    state: pd.DataFrame | pa.Table | None = None


VectorTranslate = Callable[[pd.DataFrame | None, Mapping[str, pd.DataFrame]], VectorResult]


class VectorError(ValueError):
    """A vectorized translate returned something that does not fit its stage."""

    def __init__(self, detail: str, flow: str | None = None) -> None:
        super().__init__(detail)
        self.flow = flow


@dataclass(frozen=True)
class VectorShape:
    """What a vectorized stage's frames look like: key columns and schemas."""

    keys: tuple[str, ...]
    inputs: tuple[tuple[str, pa.Schema], ...]  # input flow name, schema (stage order)
    outputs: Mapping[str, pa.Schema]
    state: pa.Schema | None

    def key_of(self, record: Mapping[str, Any]) -> Any:
        """A record's group key, as ``route_by`` gives it (a value, or a tuple)."""
        if len(self.keys) == 1:
            return record[self.keys[0]]
        return tuple(record[k] for k in self.keys)

    def tables(self, result: Any) -> tuple[dict[str, pa.Table], pa.Table | None]:
        """``result`` as Arrow tables of the declared schemas, or a :class:`VectorError`."""
        if not isinstance(result, VectorResult):
            raise VectorError(f"a vectorized translate must return a VectorResult, not "
                              f"{type(result).__name__}")
        outputs: dict[str, pa.Table] = {}
        for flow, frame in result.outputs.items():
            if flow not in self.outputs:
                raise VectorError(f"it returned rows for {flow!r}, which the stage does not "
                                  f"declare as an output (declared: {sorted(self.outputs)})",
                                  flow)
            outputs[flow] = _table(frame, self.outputs[flow], flow)
        if self.state is None:
            if result.state is not None:
                raise VectorError("it returned state, but the stage declares none", "state")
            return outputs, None
        if result.state is None:
            raise VectorError("it returned no state (VectorResult.state is None); return "
                              "the new state of every group it was given, an empty frame "
                              "to drop them all", "state")
        return outputs, _table(result.state, self.state, "state")


def _table(frame: Any, schema: pa.Schema, flow: str) -> pa.Table:
    arrow = isinstance(frame, pa.Table)  # a translate over Arrow (``arrow = True``)
    if not arrow and not isinstance(frame, pd.DataFrame):
        raise VectorError(f"rows for {flow!r} must be a pandas DataFrame, not "
                          f"{type(frame).__name__}", flow)
    columns = frame.column_names if arrow else frame.columns
    missing = [f.name for f in schema if f.name not in columns]
    if missing:
        raise VectorError(f"rows for {flow!r} lack the columns {missing} of its schema",
                          flow)
    try:
        if arrow:
            return frame.select(schema.names).cast(schema)
        return pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise VectorError(f"rows for {flow!r} do not fit its schema: {e}", flow) from None


def frame(records: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pd.DataFrame:
    """Records as the DataFrame a vectorized translate is given (Arrow's pandas types)."""
    return _arrow_table(records, schema).to_pandas()


def _arrow_table(records: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(list(records), schema=schema)


def per_group(fn: VectorTranslate, shape: VectorShape) -> Callable[..., None]:
    """``fn`` as an ordinary translate, called once per group: the semantics of a
    vectorized stage, run by the reference executor and every per-group route."""

    def translate(key: Any, *iterators: Any, out: Emitter) -> None:
        its = list(iterators)
        if key is None or (isinstance(key, tuple) and None in key):
            raise VectorError(f"the key columns {list(shape.keys)} of a vectorized stage "
                              "must not be null")
        given = _arrow_table if getattr(fn, "arrow", False) else frame
        state = given(list(its.pop(0)), shape.state) if shape.state is not None else None
        inputs = {name: given(list(it), schema)
                  for (name, schema), it in zip(shape.inputs, its, strict=True)}
        outputs, new_state = shape.tables(fn(state, inputs))
        for flow, table in outputs.items():
            for rec in records_of(table):
                out.write(flow, rec)
        if new_state is not None:
            for rec in records_of(new_state):
                if shape.key_of(rec) != key:
                    raise VectorError(f"it returned state for key {shape.key_of(rec)!r}, "
                                      "not one of the groups it was given", "state")
                out.state(rec)

    return translate
