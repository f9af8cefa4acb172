# Forager — every entry point bootstraps .venv with uv (installed with pip when absent).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.synced
RUN := $(VENV)/bin
# uv from PATH, else the one pip installs as a module of $(PYTHON).
UV = $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")

.PHONY: serve apikey test lint format bench accuracy clean bootstrap chromium prometheus

bootstrap: $(STAMP)

$(STAMP): pyproject.toml uv.lock
	@if ! command -v uv >/dev/null 2>&1 && ! $(PYTHON) -m uv --version >/dev/null 2>&1; then \
	  echo "installing uv with pip"; \
	  $(PYTHON) -m pip install --quiet --user uv 2>/dev/null \
	  || $(PYTHON) -m pip install --quiet --user --break-system-packages uv 2>/dev/null \
	  || $(PYTHON) -m pip install --quiet uv; \
	fi
	$(UV) sync --frozen --quiet
	@touch $(STAMP)

# The browser fetcher and the dashboard tests drive Debian's Chromium (Playwright's own
# download does not work offline); install it with apt when it is missing.
CHROMIUM ?= /usr/bin/chromium
chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  echo "installing chromium with apt-get"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q chromium >/dev/null || { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q chromium >/dev/null; }; \
	fi

# A real Prometheus scrapes /metrics in a test (issue 15): Debian's package, when missing.
prometheus:
	@if ! command -v prometheus >/dev/null 2>&1; then \
	  echo "installing prometheus with apt-get"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null || { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; \
	fi

# `make serve PORT=8001` (or FORAGER_PORT=8001) when 8000 is taken.
serve: $(STAMP)
	$(RUN)/forager serve $(if $(PORT),--port $(PORT))

# The first API key (an admin one) for the dashboard's login: `make apikey NAME=alice ROLE=read`.
apikey: $(STAMP)
	@$(RUN)/forager apikey create --name $(or $(NAME),admin) --role $(or $(ROLE),admin)

# Three xdist workers on a 2-core machine: much of the suite waits on subprocesses, sockets and
# the databases, so a third worker fills the gaps (about 1.5 min less than two). A fourth was
# no better from a fresh clone (pytest 772 s against 705 s with three; warm, 672 s): the
# start-up of each worker's templates and test site competes for the same two cores. Each has
# its own PostgreSQL template, SQLite template and test site. Multi-process tests are grouped
# on one worker (see tests/conftest.py).
# Bytecode caching on for the run (some machines set PYTHONDONTWRITEBYTECODE): the suite starts
# hundreds of forager processes, and each would compile every module it imports again.
TEST_WORKERS ?= 3
test: $(STAMP) chromium prometheus
	env -u PYTHONDONTWRITEBYTECODE $(RUN)/pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

lint: $(STAMP)
	$(RUN)/ruff check forager tests bench
	$(RUN)/ruff format --check forager tests bench
	$(RUN)/mypy
	$(RUN)/lint-imports

format: $(STAMP)
	$(RUN)/ruff format forager tests bench
	$(RUN)/ruff check --fix forager tests bench

bench: $(STAMP) chromium
	$(UV) sync --frozen --group bench --quiet
	$(RUN)/python -m bench.versus_scrapy
	$(RUN)/python -m bench
	$(RUN)/python -m bench.api_latency
	$(RUN)/python -m bench.agents
	$(RUN)/python -m bench.proxy_selection
	$(RUN)/python -m bench.fetchers
	$(RUN)/python -m bench.escalation
	$(RUN)/python -m bench.browser_vs_crawlee
	$(RUN)/python -m bench.dashboard
	$(RUN)/python -m bench.dispatch_latency
	$(RUN)/python -m bench.missions
	$(RUN)/python -m bench.prune_under_load
	$(RUN)/python -m bench.discovery
	$(RUN)/python -m bench.frontier

# Parser accuracy against ../shared/pages/truth.json, then the Zyte benchmark's P/R/F1 on
# zyte-bench-train (dev and held-out halves) beside the other systems (skips without the pages).
accuracy: $(STAMP)
	$(RUN)/python -m forager.parse.accuracy

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
