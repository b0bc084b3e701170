# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv lint typecheck test unit demo bench chaos fuzz clean postgres

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

test: lint postgres
	$(BIN)/python -m pytest -q

# PostgreSQL for the fenced SQL sink's tests (tests/wire/sinks): Debian's
# postgresql package, installed when no initdb is found and apt-get can run
# (as root); otherwise those tests are skipped and say why.
postgres:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		true; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's postgresql (for tests/wire/sinks)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; } || \
		echo "could not install postgresql: its tests will be skipped"; \
	else \
		echo "no PostgreSQL and no way to install it (apt-get as root): its tests will be skipped"; \
	fi

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
