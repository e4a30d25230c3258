# Two entry points: `make serve` starts a single-node broker, `make test` runs everything.
# Both set up what they need on a fresh Debian machine (virtualenv, PyPI, apt and npm packages).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := kcat
JS_TESTS := tests/js
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data

.PHONY: install serve dev-cluster test lint typecheck unit integration cluster bench clean

install: $(STAMP)

$(STAMP): pyproject.toml $(JS_TESTS)/package-lock.json
	@command -v kcat >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
		else echo "kcat is missing: run 'sudo apt-get install $(APT_PACKAGES)' (needed by the tests only)"; fi; }
	@command -v java >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
		else echo "java is missing: run 'sudo apt-get install openjdk-17-jre-headless' (Spark needs Java 17)"; fi; }
	@test -e /usr/share/java/zookeeper.jar || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper; \
		else echo "ZooKeeper is missing: run 'sudo apt-get install zookeeper' (clusters and the cluster tests need it)"; fi; }
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
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

serve: install
	$(BIN)/sluice serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

dev-cluster: install
	$(BIN)/sluice dev-cluster --brokers 3 --port $(PORT)

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
