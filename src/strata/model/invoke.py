"""Calling a stage's ``translate``: where a user function's failure becomes an
:class:`~strata.model.errors.EpochError` naming the stage, epoch, key and record.

Record-wise stages fused into another stage's job and the reference executor call
:func:`call_translate`; the per-key loop of a Spark task or driver epoch calls translate
inline (a frame per key is a measurable share of an epoch) and builds its errors with
:func:`translate_failure` and :func:`returned_value`, which ``call_translate`` uses too,
so a bad input fails the same way in every execution mode.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from strata.model.emitter import Emitter, UnknownOutput
from strata.model.errors import EpochError, OutputError, TranslateError

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
    except Exception as e:  # noqa: BLE001 - any user error stops the epoch cleanly
        raise translate_failure(stage, epoch, key, e, group, has_key) from None
    if result is not None:
        raise returned_value(stage, epoch, key, group, has_key)


def translate_failure(stage: Stage, epoch: int, key: Any, error: Exception,
                      group: Iterable[Iterable[dict]] = (), has_key: bool = True
                      ) -> EpochError:
    """The error that stops the epoch when translate raised ``error`` for ``key``; call
    it inside the ``except`` block (a ``TranslateError`` carries the traceback). For hot
    loops that call translate inline rather than through :func:`call_translate`."""
    where = _where(stage, epoch, key, has_key, group)
    if isinstance(error, UnknownOutput):
        return OutputError(str(error), flow=error.flow, **where)
    return TranslateError(f"{type(error).__name__}: {error}", cause=traceback.format_exc(),
                          **where)


def returned_value(stage: Stage, epoch: int, key: Any,
                   group: Iterable[Iterable[dict]] = (), has_key: bool = True) -> EpochError:
    """The error that stops the epoch when translate returned a value for ``key``."""
    return OutputError(RETURNED, **_where(stage, epoch, key, has_key, group))


def _where(stage: Stage, epoch: int, key: Any, has_key: bool,
           group: Iterable[Iterable[dict]]) -> dict[str, Any]:
    record = next((r for recs in group for r in recs), None)
    return {"stage": stage.name, "epoch": epoch, "key": key, "has_key": has_key,
            "record": record, "has_record": record is not None}
