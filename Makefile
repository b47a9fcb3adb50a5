# Two entry points for a fresh machine: `make demo` and `make test` (ruff, mypy, pytest; CI
# runs it, every test); `make check` is the fast loop: the same without the real-process
# tests and without the tests marked `slow` (longer end-to-end runs).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# every optional feature group, so the whole test suite runs (CI uses exactly this)
EXTRAS ?= dev,tabular,dp,secure,flower,simulation,text,images
LINT_PATHS := $(wildcard src tests benchmarks scripts)
# pytest-xdist workers; the real-process tests (Flower deployments, network namespaces,
# containers: mostly waiting) run in a second pytest beside the rest in `make test`, a test
# file's tests on one worker (`--dist loadfile`: one Ray cluster per file, never two of the
# network-namespace tests at once; pytest-xdist 3.8's `xdist_group` marks have no effect
# under pytest 9, which ignores the node id suffix they set)
WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(WORKERS)
# the rest: each worker starts on a contiguous half (a file's module fixtures and cached
# runs are built once, not on both workers) and an idle worker steals from the other's tail
REST := --dist worksteal -m "not realprocess"
# `make check`: the rest without the slow ones too
FAST := --dist worksteal -m "not realprocess and not slow"
# the files that mark tests realprocess (the mark is written in each: `pytest.mark.realprocess`),
# so the real-process pytest's workers collect 6 files, not all 150 (~5 CPU-s each)
REAL_FILES = $(shell grep -l realprocess tests/test_*.py)
# the tests write ~300 MB of small files and fsync thousands of them (checkpoints, ledgers,
# site state): on a RAM disk where the machine has one (/dev/shm), else in the system's
# temporary folder; a folder of its own per run, removed afterwards
TEST_TMP_PARENT ?= $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo $${TMPDIR:-/tmp})
TEST_TMP := tmp=$$(mktemp -d "$(TEST_TMP_PARENT)/fedlabels-tests.XXXXXX") && trap 'rm -rf "$$tmp"' EXIT &&

.PHONY: demo test check lint fix venv clean

# the ~70 Python processes a test run starts (2 pytest workers, each collecting 2,000 tests,
# and the commands and sites the tests launch) read compiled bytecode from __pycache__
# instead of compiling the sources and rewriting the tests' asserts again each time, even
# where the environment asks Python not to write it (collection: 12 s -> 6 s per worker)
test check: export PYTHONDONTWRITEBYTECODE :=

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
	@$(TEST_TMP) export TMPDIR="$$tmp"; \
	$(PYTEST) --dist loadfile -p no:cacheprovider -m realprocess --basetemp="$$tmp/real" \
		$(REAL_FILES) \
		> .pytest-realprocess.log 2>&1 & real=$$!; \
	$(PYTEST) $(REST) --basetemp="$$tmp/rest"; rest=$$?; \
	wait $$real; status=$$?; \
	echo "--- real-process tests (-m realprocess):"; cat .pytest-realprocess.log; \
	rm -f .pytest-realprocess.log; test $$rest -eq 0 && test $$status -eq 0

check: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy
	@$(TEST_TMP) export TMPDIR="$$tmp"; $(PYTEST) $(FAST) --basetemp="$$tmp/rest"

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy

fix: $(STAMP)
	$(BIN)/ruff check --fix $(LINT_PATHS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
