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
)

__version__ = "0.1.0"

__all__ = [
    "ALL", "NONE", "STATE", "All", "Dataflow", "DataflowError", "Emitter", "EpochError", "Flow",
    "Input", "Multicast", "OutputError", "RouteError", "SchemaError", "Stage", "State",
    "StrataError", "TranslateError",
]
