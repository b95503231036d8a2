"""What each operator of a series stage's epoch did, for the catalog.

Per epoch the stage reports one record per view it computed and stored (rows of its
segment in, the view's rows out, the bytes of the columns it reads in, the view's bytes
out) and one per answer it wrote (the rows of the window's views in, the answer's rows
and bytes out), each with the seconds of the Spark job that computed it. The controller
records them in the catalog's ``operator_stats`` table (docs/series.md, "Statistics").
The cost model plans from the stage's own exponential averages of the same figures,
committed with its views (:func:`strata.series.cost.folded`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.series.cost import view_columns
from strata.series.normalize import View
from strata.storage.increments import Increment
from strata.storage.operator_stats import OperatorStats


@dataclass
class EpochNotes:
    """What an epoch's jobs noted as they ran: the series answered (and those skipped,
    their windows' views missing), the answers the driver wrote, the rows of each
    answer's window's views, each job's seconds (by view, ``"pass"`` or series), and
    the bytes the driver read from storage (by view table)."""

    answered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    by_driver: set[str] = field(default_factory=set)
    rows_in: dict[str, float | None] = field(default_factory=dict)
    seconds: dict[Any, float] = field(default_factory=dict)
    driver_read: dict[str, int] = field(default_factory=dict)


def timed(fn: Callable[[], object], label: Any, seconds: dict) -> Callable[[], None]:
    """``fn``, noting how long it ran in ``seconds[label]``."""
    def run() -> None:
        t0 = time.perf_counter()
        fn()
        seconds[label] = round(time.perf_counter() - t0, 4)
    return run


def view_operator(fingerprint: str) -> str:
    return f"view {fingerprint}"


def answer_operator(series: str) -> str:
    return f"answer {series}"


def epoch_operators(n: int, wanted: Mapping[tuple[str, int], View],
                    written: Mapping[str, Mapping[str, dict]],
                    segments: Mapping[int, Increment], columns: Mapping[str, float],
                    outputs: Mapping[str, Increment], rows_in: Mapping[str, float | None],
                    seconds: Mapping[Any, float]) -> list[dict]:
    """The operator records of epoch ``n`` (segment ``n``), as JSON: the views ``written``
    (their definitions in ``wanted``; ``columns`` the new segment's bytes per column) and
    the answers in ``outputs`` (``rows_in``: their windows' view rows, None if not all
    known). ``seconds`` has the jobs' times by ``(fingerprint, segment)``, ``"pass"``
    for the views of the shared pass, and the series' names."""
    out = []
    for fp, by_segment in sorted(written.items()):
        for j, entry in sorted(by_segment.items(), key=lambda kv: int(kv[0])):
            view, segment = wanted.get((fp, int(j))), segments.get(int(j))
            read = sum(columns.get(c, 0.0) for c in view_columns(view)) \
                if view is not None and int(j) == n else None
            took = seconds.get((fp, int(j)), seconds.get("pass") if "branch" in entry else None)
            out.append(OperatorStats(
                view_operator(fp), int(j), segment.records if segment else None,
                entry["records"], None if read is None else round(read), entry["bytes"],
                took).to_json())
    for name, inc in sorted(outputs.items()):
        rows = rows_in.get(name)
        out.append(OperatorStats(answer_operator(name), n,
                                 None if rows is None else round(rows), inc.records, None,
                                 inc.bytes, seconds.get(name)).to_json())
    return out
