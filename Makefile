# Forager — every entry point bootstraps .venv with uv (installed with pip when absent).
SHELL := /bin/bash
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
STAMP := $(VENV)/.synced
RUN := $(VENV)/bin

.PHONY: serve test lint format bench accuracy clean bootstrap

bootstrap: $(STAMP)

$(STAMP): pyproject.toml uv.lock
	@command -v uv >/dev/null 2>&1 || [ -x "$(UV)" ] || $(PYTHON) -m pip install --user --quiet uv || $(PYTHON) -m pip install --quiet uv
	@UV=$$(command -v uv || echo $(UV)); $$UV sync --frozen --quiet
	@touch $(STAMP)

serve: $(STAMP)
	$(RUN)/forager serve

test: $(STAMP)
	$(RUN)/pytest -q

lint: $(STAMP)
	$(RUN)/ruff check forager tests bench
	$(RUN)/ruff format --check forager tests bench
	$(RUN)/mypy

format: $(STAMP)
	$(RUN)/ruff format forager tests bench
	$(RUN)/ruff check --fix forager tests bench

bench: $(STAMP)
	$(RUN)/python -m bench

accuracy: $(STAMP)
	$(RUN)/python -m bench.accuracy

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
