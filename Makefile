# The README's two commands: `make demo` and `make test`. Each creates .venv and installs first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint up clean catalogue

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

test: install
	$(BIN)/pytest -q

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
