"""strata: stateful bulk-incremental dataflows on Apache Spark."""

from strata.model import (
    ALL,
    NONE,
    STATE,
    All,
    Dataflow,
    DataflowError,
    Emitter,
    EpochError,
    Flow,
    Input,
    Multicast,
    OutputError,
    RouteError,
    SchemaError,
    Stage,
    State,
    StrataError,
    TranslateError,
    keyed_update,
    recordwise,
)

__version__ = "0.1.0"

__all__ = [
    "keyed_update", "recordwise",
    "ALL", "NONE", "STATE", "All", "Dataflow", "DataflowError", "Emitter", "EpochError", "Flow",
    "Input", "Multicast", "OutputError", "RouteError", "SchemaError", "Stage", "State",
    "StrataError", "TranslateError",
]
