# The two quick-start commands live here: `make broker` and `make test`.
# Each creates its own virtual environment (.venv) and installs into it: the broker
# needs only the package; the tests add the test tools, Proton and Spark.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-test

.PHONY: broker test lint typecheck docs bench interop clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP_RUN)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP) $(STAMP_RUN)

## Start the main job: the broker on 127.0.0.1:5672 with its store in ./data.
broker: $(STAMP_RUN)
	$(BIN)/amqp10 broker

## Install what the tests need and run them all (lint, type checks and the docs build included).
test: $(STAMP) docs
	$(BIN)/ruff check amqp10 tests bench interop examples docs
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check amqp10 tests bench interop examples docs

typecheck: $(STAMP)
	$(BIN)/mypy

## Build the documentation into site/ (mkdocs.yml; warnings are errors).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

bench: $(STAMP)
	$(BIN)/python bench/codec_bench.py

## Interop matrix (interop/README.md): PyPI-only columns; ARGS="--install --all" adds the Debian peers.
interop: $(STAMP)
	$(BIN)/python -m interop.matrix $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site
