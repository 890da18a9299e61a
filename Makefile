# Every target installs what it needs itself; a fresh machine needs only Python 3.11+,
# Go >= 1.24 and network access to PyPI and the Go module proxy (for setup only).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install validators tools schemas demo test fuzz lint bench bench-compare schema image clean

TORCH_STAMP := $(VENV)/.torch-stamp

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[dev]'
	touch $(STAMP)

# torch is optional for users, but the tests train a small model with it and patch live
# tensors, so `make test` installs it (the PyPI wheel is large: about 5 GB with its CUDA
# libraries, which stay unused on CPU).
$(TORCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[dev,torch]'
	touch $(TORCH_STAMP)

install: $(STAMP)

## validators: what compiling and validating need (kubeconform, promtool, pint -> .tools/bin;
## CRD modules; offline schemas); idempotent
validators: install
	PYTHON=$(PY) bash scripts/install-tools.sh --validators-only

## tools: the validators, the Kyverno CLI, kube-apiserver and etcd, and the servers and tools
## the tests run (idempotent)
tools: install
	PYTHON=$(PY) bash scripts/install-tools.sh

schemas: install
	$(BIN)/standbyc schemas build

## demo: compile and validate specs/ into out/, then print a summary (builds only the
## validators it needs: not the Kyverno CLI or the test servers)
demo: validators
	$(BIN)/standbyc compile specs --out out

## test: install everything, lint, run the test suite (one worker per core; tests are handed
## out one at a time, so a long file does not hold the end)
test: tools lint $(TORCH_STAMP)
	STANDBYC_REQUIRE_TORCH=1 $(PY) -m pytest -n auto --dist worksteal

## fuzz: the property tests with the large hypothesis profile, a kill at every step of a
## compile, and the gate with and without reuse over every identity and unit test (nightly)
fuzz: tools $(TORCH_STAMP)
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest tests/test_property.py tests/test_yamlio.py \
	  tests/weights/test_fuzz.py tests/test_compile_kills.py tests/sync/test_hostile_fuzz.py \
	  tests/gate/test_differential.py

lint: install
	$(BIN)/ruff check compiler tests bench
	$(BIN)/ruff format --check compiler tests bench
	$(BIN)/mypy

## bench: compile + validation timings (and the gate with and without --apiserver), 200
## specs with and without their dashboards, weight
## deltas versus the seed scheme and rsync,
## publish + sync end to end through nginx versus a full copy, the seed scheme and TRL's format,
## a model directory: its sync against the file sync of a baseline revision; per engine API, a
## tier of three engine pods from "published" to "every pod serves it", in waves and all at
## once; then hostile stores, bad input and full disks, this revision against the baseline,
## and a damaged or planted state directory, a read-only claim, a dead store and a publish
## whose weights change, the same way; a 64-generation chain from real training:
## lagging standbys with merged deltas, today's planner, a full copy and TRL's format; one merge
## on a 255 MiB model, in worker processes and in one; a signed generation's verification against
## the sync it is part of, and what model-signing adds to the image; the failover plan's measured
## rates again (publish, sign, receive, rebuild, verify) on a 3 GiB model beside cp and cat
bench: tools $(TORCH_STAMP)
	command -v rsync >/dev/null || (apt-get update -qq && apt-get install -y -qq rsync)
	$(PY) bench/compile_bench.py
	$(PY) bench/dashboard_bench.py --validate
	$(PY) bench/reuse_bench.py
	$(PY) bench/apiserver_bench.py
	$(PY) bench/weights_bench.py
	$(PY) bench/sync_bench.py
	$(PY) bench/model_dir_bench.py
	$(PY) bench/reload_bench.py
	$(PY) bench/fault_bench.py
	$(PY) bench/attack_bench.py
	$(PY) bench/chain_bench.py
	$(PY) bench/merge_bench.py
	$(PY) bench/verify_bench.py
	$(PY) bench/plan_calibration.py

## bench-compare: what a change that should not change speed is judged by: the compile and
## the gate, deltas, a merge, and publish + sync, on BASELINE and on this checkout in turns
## (3 rounds; medians and ratios)
BASELINE ?= HEAD~1
bench-compare: tools $(TORCH_STAMP)
	$(PY) bench/before_after.py --baseline $(BASELINE)

## image: the image the weight-sync Jobs run (needs a Docker engine; not used by the tests)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	docker build -t standbyc:$(VERSION) .

## schema: regenerate the committed editor schema for StandbySpec
schema: install
	$(BIN)/standbyc schema > schema/standbyspec.schema.json

clean:
	rm -rf $(VENV) .tools .cache .pytest_cache .mypy_cache .ruff_cache
