# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
# The oldest dependency versions strata supports (pyproject.toml's lower bounds)
OLDEST := .venv-oldest
OLDEST_STAMP := $(OLDEST)/.installed-$(shell cat pyproject.toml constraints-oldest.txt | cksum | cut -d' ' -f1)

.PHONY: setup demo test test-fast test-slow test-oldest lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@scripts/setup_system.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else \
	  "error: strata needs Python 3.11 (found %d.%d); set PYTHON=/path/to/python3.11" % sys.version_info[:2])'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -c constraints.txt -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

setup: $(STAMP)

# The oldest supported versions (constraints-oldest.txt) in their own venv, and a subset of the
# suite there, a few minutes in CI (.ci/run; docs/testing.md, "The oldest versions"): the Arrow
# and type conversions that differ between versions (no Spark), then one test per kind of stage
# (translate, vectorized, query, series, window), a DataFrame's ingest, timestamps as keys,
# Spark Connect and the standalone cluster.
OLDEST_TESTS := tests/test_arrow_types.py tests/test_direct_columns.py tests/test_increments.py \
  tests/test_controller.py::test_flows_read_as_arrow_pandas_and_spark \
  tests/test_vectorized.py::test_a_key_of_two_columns_equals_the_reference \
  'tests/queries/test_shapes.py::test_vectorized_route_changes_equal_the_general_plans[tasks]' \
  tests/series/test_series_stage.py::test_set_operation_and_outer_join_series_equal_duckdb \
  tests/windows/test_window_stage.py::test_random_windows_equal_duckdb_over_their_c2_cells \
  tests/test_dataframes.py::test_widening_casts_are_applied \
  tests/queries/test_time_keys.py::test_time_keys_in_a_query_and_a_series_equal_duckdb \
  tests/test_connect.py::test_a_translate_stage_runs_over_spark_connect_like_on_classic_spark \
  tests/cluster/test_cluster.py::test_urlcount_on_the_cluster_equals_local

$(OLDEST_STAMP): pyproject.toml constraints-oldest.txt
	@scripts/setup_system.sh
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/pip install -q --upgrade pip
	$(OLDEST)/bin/pip install -q -c constraints-oldest.txt -e . pytest pytest-timeout hypothesis duckdb networkx scipy pyyaml
	@rm -f $(OLDEST)/.installed-*
	@touch $(OLDEST_STAMP)

test-oldest: $(OLDEST_STAMP)
	$(OLDEST)/bin/python -m pytest -q $(OLDEST_TESTS)


demo: setup
	$(VENV)/bin/python -m strata.demo

test: setup
	$(VENV)/bin/python -m pytest -q

# the tests that start no Spark (tests/conftest.py marks the others `spark`): seconds
test-fast: setup
	$(VENV)/bin/python -m pytest -q -m "not spark and not slow"

# what `make test` leaves out: the full kill -9 loops
test-slow: setup
	$(VENV)/bin/python -m pytest -q -m slow

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/python benchmarks/incremental_shuffle.py --quick --json bench-out/incremental_shuffle.json

clean:
	rm -rf $(VENV) $(OLDEST) demo-home bench-out
