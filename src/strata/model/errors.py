"""Errors strata raises to users. Each names where the problem is and what to do."""

from __future__ import annotations

import reprlib
from typing import Any

_abridge = reprlib.Repr()
_abridge.maxstring = 120
_abridge.maxother = 120
_abridge.maxdict = 8
_abridge.maxlist = 8


def abridged(value: Any) -> str:
    """A short ``repr`` of a record or key, for error messages."""
    return _abridge.repr(value)


class StrataError(Exception):
    """Base class of all errors strata reports to users."""


class DataflowError(StrataError):
    """The dataflow definition is invalid (found before anything runs)."""


class EpochError(StrataError):
    """A stage epoch failed; the committed state and outputs are unchanged.

    Carries where it happened: ``stage``, ``epoch``, and where known ``flow``, ``key``
    and ``record`` (abridged in the message).
    """

    kind = "epoch failed"
    hint = "Fix the stage or its input and run the epoch again; nothing was committed."

    def __init__(
        self,
        detail: str,
        *,
        stage: str,
        epoch: int,
        flow: str | None = None,
        key: Any = None,
        record: Any = None,
        has_key: bool = False,
        has_record: bool = False,
        cause: str | None = None,
    ) -> None:
        self.detail, self.stage, self.epoch, self.flow = detail, stage, epoch, flow
        self.key, self.record, self.cause = key, record, cause
        where = [f"stage {stage!r}", f"epoch {epoch}"]
        if flow is not None:
            where.append(f"flow {flow!r}")
        if has_key:
            where.append(f"key {abridged(key)}")
        msg = f"{self.kind} in {', '.join(where)}: {detail}"
        if has_record:
            msg += f"\n  record: {abridged(record)}"
        if cause:
            msg += f"\n  cause: {cause.strip().splitlines()[-1] if cause.strip() else cause}"
        msg += f"\n  {self.hint}"
        self._fields = {
            "detail": detail, "stage": stage, "epoch": epoch, "flow": flow, "key": key,
            "record": record, "has_key": has_key, "has_record": has_record, "cause": cause,
        }
        super().__init__(msg)

    def to_dict(self) -> dict[str, Any]:
        """Plain fields, to carry the error from a Spark task back to the driver."""
        return {"class": type(self).__name__, **self._fields}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> EpochError:
        d = dict(d)
        cls = _ERROR_CLASSES.get(d.pop("class"), EpochError)
        return cls(d.pop("detail"), **d)


class TranslateError(EpochError):
    """The user's ``translate`` raised an exception."""

    kind = "translate raised"
    hint = "Fix translate (the traceback is in .cause); the epoch was not committed."


class RouteError(EpochError):
    """A ``route_by``/``order_by`` function failed or returned an unusable key."""

    kind = "routing failed"
    hint = (
        "Make route_by/order_by handle this record (or filter it upstream); "
        "nothing was committed."
    )


class SchemaError(EpochError):
    """A record does not fit the declared schema of its flow."""

    kind = "record does not fit the schema"
    hint = "Fix the record or the flow's declared schema; nothing was committed."


class OutputError(EpochError):
    """``translate`` wrote to a flow the stage does not declare, or misused ``out``."""

    kind = "bad output"
    hint = "Declare the flow in the stage's outputs or write to a declared one."


_ERROR_CLASSES = {
    c.__name__: c for c in (EpochError, TranslateError, RouteError, SchemaError, OutputError)
}
