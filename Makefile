# Two entry points for a fresh machine: `make demo` and `make test` (ruff, mypy, pytest).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# every optional feature group, so the whole test suite runs (CI uses exactly this)
EXTRAS ?= dev,tabular,dp,secure,flower,text
LINT_PATHS := $(wildcard src tests benchmarks scripts)

.PHONY: demo test lint fix venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first: the pinned CPU wheel is available locally; anything else pulls CUDA builds
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/fedlabels demo --overwrite

test: $(STAMP)
	# the report's browser test needs chromium: found, installed (as root), or skipped saying why
	.ci/browser
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy

fix: $(STAMP)
	$(BIN)/ruff check --fix $(LINT_PATHS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
