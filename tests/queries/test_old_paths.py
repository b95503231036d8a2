"""Homes written before the query layer was split into subpackages name its old module
paths: manifests name their program's class, registered stages are pickles naming the
classes of their objects (``strata.queries.moved``). Those paths still load, as the very
modules and classes at the new ones."""

from __future__ import annotations

import importlib
import inspect
import pickle
import subprocess
import sys

import pytest

from strata.physical.program import load_class
from strata.queries.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_module_at_its_new_one(old):
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_pickle_naming_a_class_at_its_old_path_loads_that_class(old):
    module = importlib.import_module(MOVED[old])
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if c.__module__ == module.__name__]
    for cls in classes:
        # protocol 0 names the class as text: "c<module>\n<name>\n"
        data = pickle.dumps(cls, protocol=0).replace(MOVED[old].encode(), old.encode())
        assert old.encode() in data
        assert pickle.loads(data) is cls


@pytest.mark.parametrize("program", ["program:QueryProgram", "vector_route:VectorQueryProgram",
                                     "iteration:IterationProgram", "recompute:RecomputeProgram"])
def test_a_manifest_naming_a_query_program_at_its_old_path_loads_it(program):
    from strata.queries import programs

    cls = load_class(f"strata.queries.{program}", "the state of stage 'q'")
    assert cls is getattr(programs, program.partition(":")[2])


def test_old_paths_load_in_a_fresh_process_before_anything_imported_the_layer():
    """As a controller reading a home does: its first import of the layer is an old path."""
    code = ("import pickle, sys\n"
            "from strata.physical.program import load_class\n"
            "assert 'strata.queries' not in sys.modules\n"
            "cls = load_class('strata.queries.program:QueryProgram', 'x')\n"
            "assert cls.__module__ == 'strata.queries.programs.program'\n"
            "scan = pickle.loads(b'cstrata.queries.algebra\\nScan\\np0\\n.')\n"
            "assert scan.__module__ == 'strata.queries.plan.algebra'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
