# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv lint typecheck test unit demo bench chaos fuzz clean system-packages

# Debian packages whose tools the tests run (PACKAGE:COMMAND, a command on the
# PATH or a path pattern); each test that needs one skips, saying why, without it.
SYSTEM_PACKAGES := prometheus:promtool systemd:systemd-analyze chromium:chromium \
	'postgresql:/usr/lib/postgresql/*/bin/initdb'


$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	for p in plugins/*/pyproject.toml; do $(BIN)/python -m pip install -q -e "$$(dirname $$p)" || exit 1; done
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check workgroup tests benchmarks examples plugins
	$(BIN)/ruff format --check workgroup tests benchmarks examples plugins
	$(BIN)/mypy

system-packages:
	@scripts/system-packages.sh $(SYSTEM_PACKAGES)

test: lint system-packages
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/python -m examples.sharded_etl.demo

# The long fault runs: thousands of simulated groups over a faulty network
# (tests/unit/member/test_member_network_sim.py) and a thousand faults on real
# daemons, a coordinator and a fault-injecting proxy (tests/chaos/).
chaos: $(STAMP)
	WORKGROUP_SIM_RUNS=5000 $(BIN)/python -m pytest -q -n 2 tests/unit/member/test_member_network_sim.py
	CHAOS_EVENTS=1000 $(BIN)/python -m pytest -q -s -n 0 tests/chaos

# Coverage-guided fuzzing of every decoder and of a hostile leader (atheris).
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz.run --seconds $${FUZZ_SECONDS:-300}

bench: $(STAMP)
	$(BIN)/python benchmarks/coordinator.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
