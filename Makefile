# Two commands for a fresh machine with python3, pip and make:
#   make demo   creates .venv, installs the planner, runs the main job on built-in defaults:
#               Kimi K3 memory per device, 64 simulated agents, the 4-device search -> out/
#   make test   creates .venv with the dev and calibrate extras (torch CPU + triton for the
#               kernel tests under TRITON_INTERPRET=1), runs ruff, mypy and pytest
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: demo test lint typecheck unit clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core-installed: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[dev,calibrate]'
	touch $@ $(VENV)/.core-installed

demo: $(VENV)/.core-installed
	$(BIN)/plan demo
	$(BIN)/plan search scenarios/search-kimi-k3-agentic.yaml --out out

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

unit: $(VENV)/.dev-installed
	$(BIN)/pytest -n 2

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
