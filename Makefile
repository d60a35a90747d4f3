# Two commands on a fresh machine: `make lab` and `make test`. Everything else is their plumbing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install lab test lint bench system clean

install: $(STAMP)

# Reinstalls only when the dependencies change; an editable install picks up code changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[tutorials,test]'
	touch $@

# The MPI kernel goes into this environment; `mpinb lab` adds --allow-root when run as root.
lab: install
	$(BIN)/mpinb kernel install --sys-prefix
	$(BIN)/mpinb lab

# What the tests need from Debian: chromium for the browser tests (Playwright cannot download
# browsers here) and slurm-wlm for a real single-node Slurm cluster. One apt-get update, once.
system:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v slurmctld >/dev/null 2>&1 || missing="$$missing slurm-wlm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# Lint (ruff, rules in pyproject.toml) and types (mypy over mpinb/) first: seconds, not minutes.
lint: install
	$(BIN)/ruff check mpinb tests bench
	$(BIN)/mypy

test: install system lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/mpinb bench

clean:
	rm -rf $(VENV) test-artifacts .pytest_cache
