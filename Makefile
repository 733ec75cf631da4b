# Two commands for a fresh machine with python3, pip and make:
#   make demo   creates .venv, installs the planner with the public measured op tables
#               (the measured extra), runs the main job on built-in defaults:
#               Kimi K3 memory per device, 64 simulated agents, the 4-device search -> out/
#   make test   creates .venv with the dev, calibrate and app extras (torch CPU + triton for
#               the kernel tests under TRITON_INTERPRET=1, streamlit + playwright and the
#               system chromium for the dashboard tests), runs ruff, mypy and pytest
#   make app    starts the what-if dashboard
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: demo test lint typecheck unit clean app chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core-installed: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[measured]'
	touch $@

$(VENV)/.app-installed: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[app,measured]'
	touch $@ $(VENV)/.core-installed

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[dev,calibrate,app,measured]'
	touch $@ $(VENV)/.core-installed $(VENV)/.app-installed

demo: $(VENV)/.core-installed
	$(BIN)/plan demo
	$(BIN)/plan search simulator/examples/search-kimi-k3-agentic.yaml --out out

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# the what-if dashboard on http://localhost:8501 (address pinned: headless streamlit would
# otherwise look up this machine's external IP)
app: $(VENV)/.app-installed
	$(BIN)/streamlit run app/main.py --server.address localhost \
	    --server.showEmailPrompt false --browser.gatherUsageStats false

# tests/app/test_browser.py drives the system Chromium (Playwright cannot download its own here)
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

unit: $(VENV)/.dev-installed chromium
	$(BIN)/pytest -n 2

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
