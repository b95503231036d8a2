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
# suite there: one test file per kind of stage, the standalone cluster and Spark Connect.
OLDEST_TESTS := tests/test_controller.py tests/test_vectorized.py tests/queries/test_ctes.py \
  tests/series/test_series_stage.py tests/windows/test_window_stage.py tests/test_connect.py \
  tests/cluster/test_cluster.py

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
