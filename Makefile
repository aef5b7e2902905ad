# Thin wrapper: the real logic lives in Python (`bkchaos ...`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup system venv run test test-fast lint format bench clean

setup: system venv

system:
	bash scripts/setup-system.sh

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,spark]'
	touch $(STAMP)

# The main job: build (or reuse) the node image, then a 60-second chaos run of the ledger
# workload against ZooKeeper + 3 bookies + 2 client agents in containers, with network
# partitions, bookie kills, pauses and clock skew; prints the verdict and the report's path.
run: setup
	$(BIN)/bkchaos image build
	$(BIN)/bkchaos test --runtime docker --workload ledger --bookies 3 \
		--ensemble 3 --wq 3 --aq 2 --nemesis partition,kill,pause,clock --time-limit 60

# The whole test suite, every tier (tests/conftest.py), the 15 slowest tests printed:
# unit and sim (pure Python, CPU-bound) on a pytest-xdist worker per core, then the tiers
# of real processes one test at a time: integration (ZooKeeper and bookie processes),
# docker, spark, browser. Run side by side on two cores, the real clusters starved each
# other (a ZooKeeper ensemble missed its 30 s start, drawn faults had no time to land).
test: setup lint
	$(BIN)/pytest -q -p no:cacheprovider --durations=15 -n auto tests/unit tests/sim
	$(BIN)/pytest -q -p no:cacheprovider --durations=15 tests/integration tests/docker \
		tests/spark tests/browser

# The quick tiers, before a commit: unit and sim (no servers, root, docker or JVM; the venv
# only, no system setup), a pytest-xdist worker per core.
test-fast: lint
	$(BIN)/pytest -q -p no:cacheprovider --durations=15 -n auto tests/unit tests/sim

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: setup
	$(BIN)/bkchaos bench bookie
	$(BIN)/bkchaos bench checker

clean:
	rm -rf $(VENV) .bkchaos build *.egg-info
