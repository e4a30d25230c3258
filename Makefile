# Two entry points: `make serve` sets up what serving needs (a virtualenv with Sluice and
# its runtime dependencies: seconds) and starts a single-node broker; `make test` sets up
# everything else on a fresh Debian machine (the test extra, Java, ZooKeeper, kcat, Node.js,
# chromium, nftables, gcc) and runs the whole suite.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SERVE_STAMP := $(VENV)/.serve-installed
STAMP := $(VENV)/.installed
APT_PACKAGES := kcat
JS_TESTS := tests/js
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data
ARGS ?=
# ARGS: more `sluice serve` / `sluice dev-cluster` options, e.g. make serve ARGS='-o http.port=8082'

.PHONY: install install-serve cluster-tools serve dev-cluster test lint typecheck unit integration cluster bench clean

# What serving needs: Sluice and its runtime dependencies, nothing of the test lab.
install-serve: $(SERVE_STAMP)

$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e .
	@touch $(SERVE_STAMP)

# What a local cluster needs besides: Java and ZooKeeper (Debian packages).
cluster-tools:
	@command -v java >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
		else echo "java is missing: run 'sudo apt-get install openjdk-17-jre-headless' (ZooKeeper and Spark need Java 17)"; fi; }
	@test -e /usr/share/java/zookeeper.jar || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper; \
		else echo "ZooKeeper is missing: run 'sudo apt-get install zookeeper' (clusters and the cluster tests need it)"; fi; }

install: $(STAMP)

$(STAMP): $(SERVE_STAMP) pyproject.toml $(JS_TESTS)/package-lock.json | cluster-tools
	@command -v kcat >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
		else echo "kcat is missing: run 'sudo apt-get install $(APT_PACKAGES)' (needed by the tests only)"; fi; }
	@command -v nft >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables iproute2; \
		else echo "nft is missing: run 'sudo apt-get install nftables' (the network-partition tests need it)"; fi; }
	@command -v gcc >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev; \
		else echo "gcc is missing: run 'sudo apt-get install gcc libc6-dev' (the disk-fault tests build a small shim)"; fi; }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
		else echo "node or npm is missing: run 'sudo apt-get install nodejs npm' (the kafkajs tests need it)"; fi; }
	@command -v curl >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl; \
		else echo "curl is missing: run 'sudo apt-get install curl' (the README's metrics example uses it)"; fi; }
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
		else echo "chromium is missing: run 'sudo apt-get install chromium chromium-driver' (the web console tests need it)"; fi; }
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix $(JS_TESTS) --no-audit --no-fund --loglevel=error; fi
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

serve: install-serve
	$(BIN)/sluice serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR) $(ARGS)

dev-cluster: install-serve cluster-tools
	$(BIN)/sluice dev-cluster --brokers 3 --port $(PORT) $(ARGS)

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: install
	$(BIN)/mypy

test: install lint typecheck
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=30

unit: install
	$(BIN)/pytest -q tests/unit tests/property

integration: install
	$(BIN)/pytest -q tests/integration

cluster: install
	$(BIN)/pytest -q tests/cluster

bench: install
	$(BIN)/python bench/produce_consume.py

clean:
	rm -rf $(VENV) build dist *.egg-info data $(JS_TESTS)/node_modules
