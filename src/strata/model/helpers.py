"""Typed helpers for the common shapes of ``translate``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from strata.model.emitter import Emitter

Record = dict[str, Any]


def recordwise(
    fn: Callable[[Record], Record | Iterable[Record] | None], output: str
) -> Callable[..., None]:
    """A translate for a one-input record-wise stage from ``fn(record)``.

    ``fn`` returns a record, an iterable of records, or ``None`` (filtered out);
    results are written to ``output``.
    """

    def translate(key: Any, records: Iterator[Record], *, out: Emitter) -> None:
        for rec in records:
            res = fn(rec)
            if res is None:
                continue
            if isinstance(res, dict):
                out.write(output, res)
            else:
                for r in res:
                    out.write(output, r)

    translate.__name__ = translate.__qualname__ = getattr(fn, "__name__", "recordwise")
    translate.__module__ = getattr(fn, "__module__", __name__)
    return translate


def keyed_update(
    update: Callable[[Any, Record | None, list[list[Record]]], Record | None],
    output: str | None = None,
) -> Callable[..., None]:
    """A translate for a stage that keeps at most one state record per key.

    ``update(key, previous_state_or_None, [records of input 1, input 2, …])`` returns
    the new state record (written to state, and to ``output`` when it changed) or
    ``None`` to delete the key's state.
    """

    def translate(key: Any, state: Iterator[Record], *inputs: Iterator[Record],
                  out: Emitter) -> None:
        prev = next(state, None)
        new = update(key, prev, [list(i) for i in inputs])
        if new is None:
            return
        out.state(new)
        if output is not None and new != prev:
            out.write(output, new)

    translate.__name__ = translate.__qualname__ = getattr(update, "__name__", "keyed_update")
    translate.__module__ = getattr(update, "__module__", __name__)
    return translate
