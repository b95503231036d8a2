"""The controller: connectors, framing, scheduling, durable epochs, recovery."""

from strata.controller.controller import Controller, EpochReport
from strata.controller.ingest import ingest
from strata.controller.lock import HomeLockedError
from strata.controller.readers import IngestError

__all__ = ["Controller", "EpochReport", "HomeLockedError", "IngestError", "ingest"]
