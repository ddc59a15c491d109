# Poolscope: `make demo` runs the stack locally, `make test` runs the suite.
# Both set up what is missing first: a .venv with the Python dependencies and
# Debian's packages: prometheus (brings promtool), victoria-metrics (vmalert,
# vmagent), prometheus-node-exporter (the benchmark's anchor) and chromium
# (renders the console page and /status in tests).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_ARGS ?=

.PHONY: demo test lint bench generate setup venv system-deps clean

demo: setup
	$(PY) -m deploy.demo.cluster $(DEMO_ARGS)

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -q

lint: venv
	$(PY) -m ruff check .

# Files rendered from the code: run after changing rules/, fields.py or the catalog
# (tests fail when the committed copies drift).
generate: venv
	$(PY) -m deploy.kubernetes.generate
	$(PY) -m scheduler_bridge.audit --write docs/metrics.md
	$(PY) -m dashboards

bench: setup
	$(PY) -m bench.run_all

setup: venv system-deps

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Installs only what is missing; PROMETHEUS_BIN / PROMTOOL_BIN override PATH.
system-deps:
	@missing=""; \
	[ -x "$$(command -v $${PROMETHEUS_BIN:-prometheus})" ] || missing="$$missing prometheus"; \
	[ -x "$$(command -v $${PROMTOOL_BIN:-promtool})" ] || missing="$$missing prometheus"; \
	command -v vmalert >/dev/null || missing="$$missing victoria-metrics"; \
	command -v prometheus-node-exporter >/dev/null || missing="$$missing prometheus-node-exporter"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
