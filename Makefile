# The README's two commands: `make demo` and `make test`. Each creates .venv and installs first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint up clean catalogue

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The CPU build of torch first: sentence-transformers would otherwise pull a CUDA build of several GB.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[workers,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/theow demo

up: install
	$(BIN)/theow up

# The whole suite, on four processes (each with services of its own, tests/conftest.py), in
# random order: `make test SEED=N` repeats an order, `make test RANDOM_ORDER="-p no:randomly"`
# keeps the files' order. The suite waits on servers and worker processes more than it
# computes, so four processes beat two on a 2-core machine.
PYTEST_WORKERS ?= 4
# Drawn once (`SEED ?= $(shell ...)` would draw it anew at each use).
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
RANDOM_ORDER ?= -p randomly --randomly-seed=$(SEED)
test: install
	@echo "make test: random order seed $(SEED)"
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal $(RANDOM_ORDER) $(PYTEST_ARGS)

# The inner loop: unit, contract and documentation-example tests that start no server.
test-fast: install
	$(BIN)/pytest -q -n 2 --dist worksteal -m "not services" tests/unit tests/contract $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .theow .pytest_cache .mypy_cache .ruff_cache

# The rule catalogue of docs/rules.md, generated from rules/ (a test keeps it current).
catalogue: install
	$(BIN)/python -m theow_workers.catalogue
