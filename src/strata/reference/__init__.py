"""A plain-Python reference executor of the model: the oracle for every other mode."""

from strata.reference.executor import ReferenceExecutor, RefState, run_stage_epoch

__all__ = ["ReferenceExecutor", "RefState", "run_stage_epoch"]
