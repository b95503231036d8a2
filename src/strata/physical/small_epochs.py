"""Small epochs run in the driver: the session confs that bound them.

Any program may run an epoch whose input and state are small in the driver process,
with the same code and the same files as its Spark tasks, skipping the job, the
pickling and the shuffle (``docs/architecture.md``, "Small epochs in the driver").
Two session confs bound every program's choice; a program may bound it further:

``spark.strata.driverEpoch.maxRows``
    the most input records such an epoch has (``-1``: every epoch runs as Spark tasks);
``spark.strata.driverEpoch.maxStateBytes``
    the most bytes of committed state it may read.
"""

from __future__ import annotations

from typing import TypeVar

from strata import config
from strata.model.errors import EpochError
from strata.physical.program import EpochContext

T = TypeVar("T")


def driver_epoch_rows(ctx: EpochContext) -> int:
    """``spark.strata.driverEpoch.maxRows`` of ``ctx``'s session."""
    return conf_of(ctx, config.DRIVER_EPOCH_ROWS)


def fits_driver(ctx: EpochContext, rows: int, state_bytes: int,
                max_rows: int | None = None) -> bool:
    """Whether an epoch of ``rows`` input records reading ``state_bytes`` of state runs
    in the driver: within both session confs and the program's own ``max_rows``."""
    limit = driver_epoch_rows(ctx)
    if max_rows is not None:
        limit = min(limit, max_rows)
    return rows <= limit and state_bytes <= conf_of(ctx, config.DRIVER_EPOCH_STATE_BYTES)


def conf_of(ctx: EpochContext, setting: config.Setting[T]) -> T:
    """Session conf ``setting`` (docs/configuration.md) of ``ctx``'s session; an epoch
    error naming the stage when its value does not parse."""
    try:
        return config.conf(ctx.spark, setting)
    except config.SettingError as e:
        raise EpochError(str(e), stage=ctx.stage.name, epoch=ctx.epoch) from None
