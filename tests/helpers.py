"""Small helpers shared by tests: increments from records, fresh homes."""

from __future__ import annotations

import itertools
from pathlib import Path

from strata.model.dataflow import Flow
from strata.model.schema import to_table
from strata.storage.increments import Increment, write_table

_seq = itertools.count()


def increment(home: str | Path, flow: Flow, records: list[dict]) -> Increment:
    """Write ``records`` as one Parquet increment of ``flow`` under ``home/inbox``."""
    uri = f"{home}/inbox/{flow.name}-{next(_seq)}.parquet"
    return Increment((uri,), len(records), write_table(uri, to_table(records, flow.schema)))
