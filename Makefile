# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup demo test test-fast test-slow lint bench clean

$(STAMP): pyproject.toml
	@scripts/setup_system.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else \
	  "error: strata needs Python 3.11 (found %d.%d); set PYTHON=/path/to/python3.11" % sys.version_info[:2])'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

setup: $(STAMP)

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
	rm -rf $(VENV) demo-home bench-out
