# The two quick-start commands live here: `make broker` and `make test`.
# Each creates its own virtual environment (.venv) and installs into it: the broker
# needs only the package; the tests add the test tools, Proton and Spark.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-test

.PHONY: broker test test-workers2 compiled test-compiled clean-compiled debs lint typecheck docs bench interop clean fuzz fuzz-short

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP_RUN)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP) $(STAMP_RUN)

## Start the main job: the broker on 127.0.0.1:5672 (HTTP and ws:// on 8672) with its store in ./data.
broker: $(STAMP_RUN)
	$(BIN)/amqp10 broker

## Install what the tests need and run them all (lint, type checks and the docs build included).
test: $(STAMP) debs docs
	$(BIN)/ruff check amqp10 tests bench interop examples docs
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

## The broker's suites (0-9-1's tests/broker/amqp091 among them) and the interop tests again
## at workers = 2 (issue 31): the shared broker fixtures and interop's OurBroker start
## `amqp10 broker --workers 2` (tests/broker/workers_mode.py); deselected, and counted at the
## end: the tests that need the in-process broker (marker in_process), those that start no
## broker, and those of the features not yet across workers (its NOT_YET list). The client
## libraries' own 0-9-1 suites need ../shared/suites: `python -m interop.suites pika --workers 2`.
test-workers2: $(STAMP) debs
	AMQP10_TEST_WORKERS=2 $(BIN)/python -m pytest -q tests/broker interop

## Optional: compile the hot modules (setup.py's COMPILED) with mypyc, in place in this checkout;
## the .so files are imported before the .py files next to them. `make clean-compiled` undoes it.
compiled: $(STAMP)
	AMQP10_COMPILE=1 $(BIN)/python setup.py build_ext --inplace

## The compiled build against the suites of the modules it compiles (the client's and the
## message's included), and a broker sample.
## Of tests/broker/workers (worker processes: slow), those of the internal link's ends in
## one process, and the 1.0 and 0-9-1 suites of 2-worker brokers (links over Unix sockets).
COMPILED_WORKERS_TESTS = $(addprefix tests/broker/workers/,test_internal_link.py \
	test_remote_e2e.py test_remote_questions.py test_rewrites.py test_questions_once.py \
	test_transactions.py test_transactions_amqp1.py test_processes.py test_amqp091_processes.py)
test-compiled: compiled
	$(BIN)/python -c "import amqp10.transport.link as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.broker.amqp091.publish as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.broker.core.queues as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.broker.workers.link as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.broker.core.vhost as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.broker.core.paging as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.io.direct as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -c "import amqp10.client.sync as m; assert m.__file__.endswith('.so'), m.__file__"
	$(BIN)/python -m pytest -q tests/types tests/transport tests/amqp091 tests/io \
		tests/client tests/test_message.py tests/test_message_scan.py \
		tests/broker/core tests/broker/amqp1 tests/broker/amqp091 tests/broker/test_local_random_exchange.py \
		$(COMPILED_WORKERS_TESTS)

clean-compiled:
	rm -rf build
	find amqp10 -name '*.so' -delete
	rm -f *__mypyc*.so

## The Debian packages the tests need (.ci/debian-packages): apt-gets the missing ones.
debs:
	@bash .ci/install-debs

lint: $(STAMP)
	$(BIN)/ruff check amqp10 tests bench interop examples docs

typecheck: $(STAMP)
	$(BIN)/mypy

## Build the documentation into site/ (mkdocs.yml; warnings are errors).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

## Fuzz every protocol surface with atheris (tests/fuzz): FUZZ_RUNS inputs per target, at
## most FUZZ_TIME seconds each; what it finds goes to .fuzz/<target> (the corpus stays as is).
FUZZ_TARGETS := amqp1_engine sasl_server message amqp091_engine amqp010_engine websocket
FUZZ_RUNS ?= 1000000
FUZZ_TIME ?= 300
fuzz: $(STAMP)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p .fuzz/$$t && echo "fuzzing $$t" && \
	  $(BIN)/python -m tests.fuzz.atheris_main $$t -runs=$(FUZZ_RUNS) -max_len=4096 -timeout=10 \
	    -max_total_time=$(FUZZ_TIME) -artifact_prefix=.fuzz/ -print_final_stats=1 \
	    .fuzz/$$t tests/fuzz/corpus/$$t || exit 1; \
	done

## A short coverage-guided run of each target (2,000 inputs), for CI.
fuzz-short:
	$(MAKE) fuzz FUZZ_RUNS=2000 FUZZ_TIME=60

bench: $(STAMP)
	$(BIN)/python bench/codec_bench.py

## Interop matrix (interop/README.md): PyPI-only columns; ARGS="--install --all" adds the Debian peers.
interop: $(STAMP)
	$(BIN)/python -m interop.matrix $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .fuzz site
