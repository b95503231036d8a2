"""Stages registered in a home by the CLI, kept compiled in the catalog.

``strata query`` compiles a query once into a stage with a program, and the catalog
keeps that stage *compiled*: its inputs, outputs, runnability and pickled program, with
the program class's :attr:`~strata.physical.program.StageProgram.format_version`. Every
later controller adds it to its dataflow as it is, without importing the layer that
compiled it and without compiling again. A stored version other than the class's
current one is refused with a message saying to register the stage again.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from strata.model.dataflow import Dataflow, Input, Stage
from strata.model.errors import StrataError
from strata.model.schema import to_ddl
from strata.physical.program import StageProgram, class_path, load_class
from strata.storage.catalog import RegisteredStage

P = TypeVar("P", bound=StageProgram)


@dataclass(frozen=True)
class _CompiledStage:
    """What is pickled: everything ``Dataflow.stage`` needs to add the stage again."""

    inputs: tuple[str, ...]
    outputs: dict[str, str]  # flow -> DDL
    program: StageProgram
    runnable: Any
    sources: dict[str, str] = field(default_factory=dict)  # flow -> DDL, declared if missing


def compiled(stage: Stage, description: str, sources: Mapping[str, str] | None = None
             ) -> RegisteredStage:
    """``stage`` (which carries a program) as the catalog keeps it; ``sources`` are
    external flows it reads that a dataflow it is attached to may not declare (name ->
    DDL)."""
    program = stage.program
    if not isinstance(program, StageProgram):
        raise StrataError(f"stage {stage.name!r} has no compiled program to register")
    spec = _CompiledStage(tuple(stage.input_names),
                          {f.name: to_ddl(f.schema) for f in stage.outputs},
                          program, stage.runnable, dict(sources or {}))
    cls = type(program)
    return RegisteredStage(stage.name, cls.kind, class_path(cls), cls.format_version,
                           pickle.dumps(spec, protocol=5), description)


def registered_program(reg: RegisteredStage) -> StageProgram:
    """The compiled program of the registered stage ``reg``."""
    return _load(reg).program


def registered_of_kind(stages: Iterable[RegisteredStage], cls: type[P]) -> dict[str, P]:
    """Stage name → the compiled program of each registered stage of ``cls``'s kind."""
    out: dict[str, P] = {}
    for reg in stages:
        if reg.kind == cls.kind:
            program = registered_program(reg)
            assert isinstance(program, cls)
            out[reg.name] = program
    return out


def attach(dataflow: Dataflow, reg: RegisteredStage) -> Stage:
    """Add the registered stage ``reg`` to ``dataflow`` as it was compiled."""
    spec = _load(reg)
    for flow, ddl in getattr(spec, "sources", {}).items():  # stages pickled before: none
        if flow not in dataflow.flows:
            dataflow.source(flow, ddl)
    return dataflow.stage(reg.name, None, program=spec.program,
                          inputs=[Input(f) for f in spec.inputs], outputs=spec.outputs,
                          runnable=spec.runnable)


def _load(reg: RegisteredStage) -> _CompiledStage:
    cls = load_class(reg.program, f"registered stage {reg.name!r}")
    if reg.version != cls.format_version:
        raise StrataError(
            f"{reg.kind} stage {reg.name!r} was registered in this home by another version "
            f"of strata (format {reg.version}, this one reads {cls.format_version}); "
            f"register it again (for a query: `strata query --replace --name {reg.name} "
            f"...`)")
    spec: _CompiledStage = pickle.loads(reg.spec)
    return spec
