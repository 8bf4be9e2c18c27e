# tapgate: `make demo` runs the main job end to end, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
# The official MCP TypeScript SDK client that one test runs with Node.js (tests/mcp_ts), from its lockfile.
MCP_TS := tests/mcp_ts
MCP_TS_STAMP := $(MCP_TS)/node_modules/.installed
MUTATION_STAMP := $(VENV)/.installed-mutation

.PHONY: demo test test-under-load serve lint typecheck layers unit mcp-ts reliability bench mutation clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tapgate demo

test: lint typecheck layers unit

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP) mcp-ts
	$(BIN)/pytest $(PYTEST_ARGS)

# Without npm nothing is installed and the TypeScript SDK test says why (a failure where
# TAPGATE_TEST_NODE_REQUIRED is set, as in CI).
mcp-ts: $(MCP_TS_STAMP)

$(MCP_TS_STAMP): $(MCP_TS)/package.json $(MCP_TS)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		echo "cd $(MCP_TS) && npm ci"; \
		cd $(MCP_TS) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else \
		echo "no npm here: the TypeScript SDK test cannot run (apt-get install -y nodejs npm)"; \
	fi

# The whole suite three times in a row (RUNS=n to change) while two CPU hogs (HOGS=n) keep the cores busy,
# with every PostgreSQL and browser test required as in .ci/run; outcomes and wall times go to
# under-load.log (docs/testing.md).
test-under-load: $(STAMP) mcp-ts
	RUNS=$(or $(RUNS),3) HOGS=$(or $(HOGS),2) PYTEST_ARGS="$(PYTEST_ARGS)" .ci/under-load

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

# BENCH_ARGS: --quick, --only NAME, --no-postgres, --postgres-admin URL (see `.venv/bin/python -m bench --help`).
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# The reliability families at their full counts (make test runs a fast slice of each); the figures go to
# reliability.log for docs/reliability.md.
RELIABILITY_TESTS := tests/test_crash_matrix.py tests/test_simulation.py tests/test_races.py \
	tests/test_authorization_matrix.py tests/test_postgres_tenancy.py tests/test_fuzz_api.py \
	tests/test_fuzz_domain.py tests/test_fuzz_link.py tests/test_log_hygiene.py tests/test_secret_scan.py \
	tests/test_ingest.py tests/test_push_crash.py

reliability: $(STAMP)
	rm -f reliability.log
	TAPGATE_RELIABILITY=full TAPGATE_RELIABILITY_LOG=$(CURDIR)/reliability.log \
		$(BIN)/pytest -q -s $(RELIABILITY_TESTS) $(PYTEST_ARGS)

$(MUTATION_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[mutation]'
	touch $(MUTATION_STAMP)

# Mutation testing of the security core ([tool.mutmut] in pyproject.toml names the modules and the fast tests):
# each module's score, killed / total, then every mutant no test noticed. Results are kept in mutants/ and
# reused; `rm -rf mutants` starts afresh. MUTANTS='tapgate.domain.policy.*' (re)runs one module's mutants;
# MUTMUT_CHILDREN=n runs n mutants at once (default 2).
mutation: $(MUTATION_STAMP)
	$(BIN)/mutmut run --max-children $(or $(MUTMUT_CHILDREN),2) $(MUTANTS)
	$(BIN)/mutmut results --all true | $(BIN)/python .ci/mutation-scores

# SERVE_ARGS: more for `tapgate serve`, e.g. SERVE_ARGS='--port 8090' where 8080 is taken.
serve: $(STAMP)
	test -f tapgate.toml || $(BIN)/tapgate init
	$(BIN)/tapgate serve $(SERVE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants $(MCP_TS)/node_modules
