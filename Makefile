# `make run` and `make test` are all the set-up a fresh machine needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pywb, for the replay tests, in a venv of its own (see the `replay` extra in pyproject.toml).
REPLAY_VENV := .venv-replay

.PHONY: run test soak lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setup.py builds crawler/core/_speedups.c: a changed C source reinstalls (and rebuilds) it.
SOURCES := pyproject.toml setup.py crawler/core/_speedups.c

$(VENV)/.installed: $(SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-bench: $(SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@ $(VENV)/.installed-dev $(VENV)/.installed

$(REPLAY_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(REPLAY_VENV)
	$(REPLAY_VENV)/bin/python -m pip install --quiet $$($(PYTHON) -c 'import tomllib; \
		print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"] \
		["optional-dependencies"]["replay"]))')
	touch $@

## run: the main job on the embedded PostgreSQL, crawling the demo web, until Ctrl-C
run: $(VENV)/.installed
	$(BIN)/crawler demo

## test: the whole suite (unit, integration, acceptance) against real PostgreSQL
test: $(VENV)/.installed-dev $(REPLAY_VENV)/.installed
	$(BIN)/pytest

## soak: the tests too long for the suite (issue 10's grimes grid at 5,000 pages, ~7 min)
soak: $(VENV)/.installed-dev
	$(BIN)/pytest -m soak

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check crawler tests bench migrations
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy crawler

## bench: every benchmark; bench_throughput wants Debian's nginx-light and python3-doc
## (apt-get install nginx-light python3-doc) and falls back to aiohttp and generated pages
bench: $(VENV)/.installed-bench
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(REPLAY_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -f crawler/core/_speedups.*.so
