# Two commands do all set-up on a fresh machine:
#   make run    installs the gateway into .venv and serves it on the embedded engine (:8000)
#   make test   installs everything the tests need (Debian packages included) and runs them
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# pip's own download of a CUDA torch is never wanted here; the torch extra pins the CPU wheel
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
PYTEST_ARGS ?=

.PHONY: run test install install-test debian-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

$(STAMP_RUN): pyproject.toml | $(PY)
	$(PIP) install -e .
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

run: install
	$(PY) run_gateway.py serve $(ARGS)

# pytest's exit code 5 (no tests collected) fails this target like any other failure
test: install-test
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis artifacts
