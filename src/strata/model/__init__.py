"""The logical model of strata: dataflows, stages, flows, routing and state."""

from strata.model.dataflow import STATE, Dataflow, Flow, Input, Stage, State
from strata.model.emitter import Emitter
from strata.model.errors import (
    DataflowError,
    EpochError,
    OutputError,
    RouteError,
    SchemaError,
    StrataError,
    TranslateError,
)
from strata.model.helpers import keyed_update, recordwise
from strata.model.keys import encode_key
from strata.model.routing import ALL, NONE, All, Multicast

__all__ = [
    "keyed_update", "recordwise",
    "ALL", "NONE", "STATE", "All", "Dataflow", "DataflowError", "Emitter", "EpochError", "Flow",
    "Input", "Multicast", "OutputError", "RouteError", "SchemaError", "Stage", "State",
    "StrataError", "TranslateError", "encode_key",
]
