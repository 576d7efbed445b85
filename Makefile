# Two commands: `make run` (embedded mode on http://127.0.0.1:8000) and `make test`.
# Debian's /usr/bin/python3.11 where it can make a venv (python3.11-venv gives it
# ensurepip): the interpreter linked into its executable, it runs the scheduling
# round in ~10% fewer instructions and 10-13% less time than a build on a shared
# libpython (pyenv's; bench/README.md, "The interpreter").
DEBIAN_PYTHON = $(shell /usr/bin/python3.11 -c 'import ensurepip' 2>/dev/null && echo /usr/bin/python3.11)
PYTHON ?= $(or $(DEBIAN_PYTHON),$(shell command -v python3.11 || command -v python3))
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: run test lint typecheck services bench

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

run: $(INSTALLED)
	$(BIN)/python manage.py tangram_serve

services:
	bash deploy/ensure-test-services.sh

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(INSTALLED)
	$(BIN)/mypy

test: $(INSTALLED) services lint typecheck
	$(BIN)/python -m pytest

bench: $(INSTALLED)
	$(BIN)/python -m bench.policy fixtures/workloads/mixed.yaml --seeds 1,2,3
