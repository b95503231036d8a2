"""Spark Declarative Pipelines on strata: an SDP project (``spark-pipeline.yml`` and its
SQL and Python definitions) run as written, its materialized views kept up to date by
the change in their inputs (docs/sdp.md).

``load(spec, spark)`` reads and plans a project; ``refresh`` runs it once;
``describe`` says per view whether it is incremental and why not.
"""

from __future__ import annotations

from pathlib import Path

from strata.sdp.capture import TracingSession
from strata.sdp.definitions import Definition, load_definitions
from strata.sdp.plan import PipelinePlan, ViewPlan, plan_pipeline
from strata.sdp.refresh import RefreshReport, describe, refresh, table_location
from strata.sdp.spec import PipelineError, PipelineSpec, load_spec

__all__ = ["Definition", "PipelineError", "PipelinePlan", "PipelineSpec", "RefreshReport",
           "ViewPlan", "describe", "load", "refresh", "table_location"]


def load(spec_path: str | Path | None, *, warehouse: str | None = None) -> PipelinePlan:
    """Read the project whose spec is at ``spec_path`` (default: found from the working
    folder) and plan it; its tables go under ``warehouse`` (default: the spec's
    ``spark.sql.warehouse.dir``, else the session's). Python definitions that call
    PySpark's column functions need an active Spark session."""
    spec = load_spec(spec_path)
    definitions = load_definitions(spec, TracingSession(spec.configuration))
    plan = plan_pipeline(spec, definitions)
    plan.warehouse = warehouse
    return plan
