# kgroups: two commands do everything on a fresh machine.
#   make demo   installs, starts a coordinator, three Kafka consumers, kills one, shows the rebalance
#   make test   installs, lints (ruff, mypy --strict, import-linter) and runs every test tier
# Python packages come from PyPI into .venv (pip's cache in ~/.cache/pip is reused);
# Kafka jars (benchmark peer, Java interop member) come from Maven Central into
# ~/.cache/kgroups (see tools/kafka/README.md).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_FLAGS ?= -q

.PHONY: install lint test test-unit test-sim test-integration demo bench bench-heartbeats bench-rebalance bench-assignors kafka clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

lint: install
	$(BIN)/ruff format --check src tests bench tools examples
	$(BIN)/ruff check src tests bench tools examples
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint kafka
	$(BIN)/pytest $(PYTEST_FLAGS) tests

test-unit: install
	$(BIN)/pytest $(PYTEST_FLAGS) tests/unit

test-sim: install
	$(BIN)/pytest $(PYTEST_FLAGS) tests/sim

test-integration: install kafka
	$(BIN)/pytest $(PYTEST_FLAGS) tests/integration

# Kafka 4.4.0 jars and the compiled Java member, cached outside the repository.
kafka:
	bash tools/kafka/fetch.sh

demo: install
	$(BIN)/python examples/demo.py

bench: bench-heartbeats bench-rebalance bench-assignors

bench-heartbeats: install kafka
	$(BIN)/python bench/heartbeats.py

bench-rebalance: install kafka
	$(BIN)/python bench/rebalance.py

bench-assignors: install
	$(BIN)/python bench/assignors.py

clean:
	rm -rf $(VENV) .kgroups .kgroups-demo .mypy_cache .ruff_cache
