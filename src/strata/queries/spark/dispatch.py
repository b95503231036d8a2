"""Where a query's rows are computed: in the driver as Arrow, or by Spark.

The one place the query layer (and the series and window stages built on it) decides
between the two paths of docs/architecture.md, "The driver's rows and Spark's": whether
an epoch runs in the driver (:func:`epoch_mode`; an increment alone:
:func:`driver_increment`), whether operators may run in Arrow at all
(:func:`arrow_steps`), and the limits every step asks before it brings rows to the
driver (:func:`driver_rows`, :func:`driver_table_rows`, :func:`held_segment_rows`).
The limits are session confs declared in :mod:`strata.config` (docs/configuration.md);
the physical layer's own programs (translate, vectorized) bound their driver epochs
with :mod:`strata.physical.small_epochs`, which this module uses for the same epoch
limit. What is decided here travels as :class:`~strata.queries.arrow.rows.Rows`: held rows
or a Spark DataFrame, each operator trying Arrow on held rows first.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol, TypeVar

from pyspark.sql import SparkSession

from strata import config
from strata.physical.program import EpochContext
from strata.physical.small_epochs import conf_of, driver_epoch_rows
from strata.physical.vectorized import arrow_enabled

T = TypeVar("T")


class Tables(Protocol):
    """What choosing an epoch's path asks of its state tables (a
    :class:`~strata.queries.spark.tables.QueryTables`)."""

    def small(self, limit: int) -> bool: ...


class EvalMode(Enum):
    """How an :class:`~strata.queries.spark.evaluator.Evaluator` merges changes into state."""

    EPOCH = "epoch"
    """One pass: a group-by merges its changes with its whole state (a full outer join),
    join inputs are appended, and results used twice are cached."""
    DIFFUSION = "diffusion"
    """An iteration's steps: a group-by merges only the groups a step touches (a right
    outer join with the state, the paper's diffusion) into an overlay, join inputs are
    held back, and :meth:`Evaluator.flush` merges everything into the tables once."""
    DRIVER = "driver"
    """One pass over a small increment and small state, as a diffusion of one step: the
    driver reads the increment and the tables with pyarrow and runs the operators in
    Arrow where it can (Spark where it cannot), then :meth:`Evaluator.flush` stages the
    tables (docs/performance.md, "Small epochs in the driver")."""


def arrow_steps(spark: SparkSession) -> bool:
    """Whether operators over held rows may run in Arrow: Spark's ANSI mode (whose
    semantics Arrow follows here) is on and ``spark.strata.arrow`` is not ``false``."""
    return ((spark.conf.get("spark.sql.ansi.enabled", "true") or "true").lower() == "true"
            and arrow_enabled(spark))


def _conf(where: SparkSession | EpochContext, setting: config.Setting[T]) -> T:
    """``setting`` of a session, or of an epoch's (an epoch error naming its stage when
    the value does not parse)."""
    if isinstance(where, EpochContext):
        return conf_of(where, setting)
    return config.conf(where, setting)


def driver_rows(where: SparkSession | EpochContext) -> int:
    """``spark.strata.query.driverRows``: the most rows a step's result, an increment or
    an epoch's output brings to the driver as Arrow (more stay with Spark)."""
    return _conf(where, config.QUERY_DRIVER_ROWS)


def driver_may_hold(where: SparkSession | EpochContext, rows: int) -> bool:
    """Whether what ``rows`` rows make (an epoch's input records, say) is worth trying to
    bring to the driver: at most ``driverRows`` of them, which 0 turns off. A try that
    finds too many rows has computed them all for nothing."""
    most = driver_rows(where)
    return most > 0 and rows <= most


def driver_table_rows(where: SparkSession | EpochContext) -> int:
    """``spark.strata.query.driverTableRows``: the most rows of a committed state table
    the driver reads as Arrow."""
    return _conf(where, config.QUERY_TABLE_ROWS)


def held_segment_rows(ctx: EpochContext) -> int:
    """``spark.strata.series.heldSegmentRows``: the most rows of a series segment whose
    views the driver computes from the rows it holds (``-1``: never)."""
    return _conf(ctx, config.HELD_SEGMENT_ROWS)


def epoch_mode(ctx: EpochContext, tables: Tables, mode: EvalMode,
               driver_epochs: bool) -> EvalMode:
    """How a query epoch is evaluated: in the driver (:attr:`EvalMode.DRIVER`) when the
    program allows it (``driver_epochs``, in :attr:`EvalMode.EPOCH` ``mode``), Arrow
    steps are on, the increment has at most ``spark.strata.query.driverRows`` records
    (and at most ``spark.strata.driverEpoch.maxRows``) and every state table at most
    ``spark.strata.query.driverTableRows`` rows; else ``mode``."""
    if mode is not EvalMode.EPOCH or not driver_epochs or not driver_increment(ctx):
        return mode
    if not tables.small(driver_table_rows(ctx)):
        return mode
    return EvalMode.DRIVER


def driver_increment(ctx: EpochContext) -> bool:
    """Whether the driver reads an epoch's increment and runs its operators in Arrow:
    Arrow steps are on and the increment has at most ``spark.strata.query.driverRows``
    records (and at most ``spark.strata.driverEpoch.maxRows``). Query epochs also ask
    their state's size (:func:`epoch_mode`); a window stage's pane store decides its own
    (``docs/windows.md``)."""
    limit = min(driver_rows(ctx), driver_epoch_rows(ctx))
    return arrow_steps(ctx.spark) and ctx.input_records <= limit
