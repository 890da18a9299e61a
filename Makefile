# Every target installs what it needs itself; a fresh machine needs only Python 3.11+,
# Go >= 1.24 and network access to PyPI and the Go module proxy (for setup only).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install tools schemas demo test lint bench schema clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## tools: kubeconform, promtool, pint -> .tools/bin; CRD modules; offline schemas (idempotent)
tools: install
	PYTHON=$(PY) bash scripts/install-tools.sh

schemas: install
	$(BIN)/standbyc schemas build

## demo: compile and validate specs/ into out/, then print a summary
demo: tools
	$(BIN)/standbyc compile specs --out out

## test: install everything, lint, run the test suite
test: tools lint
	$(PY) -m pytest

lint: install
	$(BIN)/ruff check compiler tests bench
	$(BIN)/ruff format --check compiler tests bench
	$(BIN)/mypy

## bench: compile + validate timings (see bench/)
bench: tools
	$(PY) bench/compile_bench.py

## schema: regenerate the committed editor schema for StandbySpec
schema: install
	$(BIN)/standbyc schema > schema/standbyspec.schema.json

clean:
	rm -rf $(VENV) .tools .cache .pytest_cache .mypy_cache .ruff_cache
