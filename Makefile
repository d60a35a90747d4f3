# Two commands on a fresh machine: `make lab` and `make test`. Everything else is their plumbing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install lab test bench browser clean

install: $(STAMP)

# Reinstalls only when the dependencies change; an editable install picks up code changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# Jupyter refuses to run as root unless told; containers and cloud machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: install
	cd notebooks && ../$(BIN)/jupyter lab 00-getting-started.ipynb $(ROOT_FLAG)

# The browser tests drive Debian's chromium (Playwright cannot download browsers here).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

test: install browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) test-artifacts .pytest_cache
