"""The controller: connectors, framing, runnability, scheduling, durable epochs, recovery."""

from strata.controller.controller import Controller, EpochReport, HomeLockedError, ingest
from strata.controller.readers import IngestError

__all__ = ["Controller", "EpochReport", "HomeLockedError", "IngestError", "ingest"]
