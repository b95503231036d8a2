"""Calling a stage's ``translate``: the one place a user function's failure becomes an
:class:`~strata.model.errors.EpochError` naming the stage, epoch, key and record.

Spark tasks, record-wise stages fused into another stage's job, and the reference
executor all call :func:`call_translate`, so a bad input fails the same way in every
execution mode.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from strata.model.emitter import Emitter, UnknownOutput
from strata.model.errors import OutputError, TranslateError

if TYPE_CHECKING:
    from strata.model.dataflow import Stage

RETURNED = ("translate returned a value; write records with out.write(flow, record) "
            "(a generator translate never runs its body)")


def call_translate(stage: Stage, epoch: int, key: Any, args: list[Iterator[dict]],
                   out: Emitter, *, group: Iterable[Iterable[dict]] = (),
                   has_key: bool = True) -> None:
    """Call ``stage.translate(key, *args, out=out)``.

    ``group`` (the group's records per flow, where known) and ``key`` (unless ``has_key``
    is false: a record-wise group has none) name the failure when ``translate`` writes to a
    flow it does not have (``OutputError``), raises (``TranslateError``, with the traceback
    as ``cause``) or returns a value (``OutputError``). They are looked at only then: this
    runs once per group of every epoch."""
    translate: Any = stage.translate  # declared to return None; a mistake may not
    try:
        result = translate(key, *args, out=out)
    except UnknownOutput as e:
        raise OutputError(str(e), flow=e.flow, **_where(stage, epoch, key, has_key, group)
                          ) from None
    except Exception as e:  # noqa: BLE001 - any user error stops the epoch cleanly
        raise TranslateError(f"{type(e).__name__}: {e}", cause=traceback.format_exc(),
                             **_where(stage, epoch, key, has_key, group)) from None
    if result is not None:
        raise OutputError(RETURNED, **_where(stage, epoch, key, has_key, group))


def _where(stage: Stage, epoch: int, key: Any, has_key: bool,
           group: Iterable[Iterable[dict]]) -> dict[str, Any]:
    record = next((r for recs in group for r in recs), None)
    return {"stage": stage.name, "epoch": epoch, "key": key, "has_key": has_key,
            "record": record, "has_record": record is not None}
