# Everything a fresh machine needs is installed by these targets themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint bench schema clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## demo: compile and validate specs/ into out/, then print a summary
demo: install
	$(BIN)/standbyc compile specs --out out

## test: install everything, lint, run the test suite
test: install lint
	$(PY) -m pytest

lint: install
	$(BIN)/ruff check compiler tests
	$(BIN)/ruff format --check compiler tests
	$(BIN)/mypy

## schema: regenerate the committed editor schema for StandbySpec
schema: install
	$(BIN)/standbyc schema > schema/standbyspec.schema.json

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
