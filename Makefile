# `make run` (the service on embedded defaults), `make test` (everything, real stack),
# `make test-fast` (solver + in-process API, no subprocesses), `make lock` (regenerate the
# hashed locks in requirements/ after editing the dependencies in pyproject.toml).
#
# The first Python 3.11-3.13 on PATH, unless PYTHON=... names one.
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3; do \
  command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))' 2>/dev/null \
  && echo $$p && break; done)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# the run environment: the service alone, with the Spark client when a Spark variable is set
RUN_LOCK := $(if $(SODM_SPARK_REMOTE)$(SODM_SPARK_MASTER),spark,service)
FAST_TIER := not (slow or spark or browser or stack)

.PHONY: run test test-fast lint venv lock clean

# $(VENV)/.installed-<lock>: the venv holds requirements/<lock>.txt (hash-checked) and the
# project itself (editable, no dependencies of its own beyond the lock). The run locks
# install with --no-compile: the .pyc of modules never imported (tests, unused submodules)
# would be ~130 MB of the quick start's venv; Python writes the ones it needs on first
# import. The dev venv keeps them: test processes start often, and with
# PYTHONDONTWRITEBYTECODE set each would compile its imports from source.
$(VENV)/.installed-%: pyproject.toml requirements/%.txt
	@test -n "$(PYTHON)" || { echo "make: no Python 3.11-3.13 on PATH (or set PYTHON=...)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check $(if $(filter dev,$*),,--no-compile) \
	  --require-hashes -r requirements/$*.txt
	$(PIP) install -q --disable-pip-version-check --no-deps -e .
	@touch $@

venv: $(VENV)/.installed-dev

run: $(VENV)/.installed-$(RUN_LOCK)
	$(VENV)/bin/sodm run

test: $(VENV)/.installed-dev
	bash scripts/test-setup.sh $(PY)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest tests

test-fast: $(VENV)/.installed-dev
	$(PY) -m pytest tests -m "$(FAST_TIER)"

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .

# One universal lock per install (Python 3.11-3.13, every platform); service and spark take
# the dev lock's versions, so the three agree. Pins already in a lock are kept; to move them:
# make lock LOCK_FLAGS=--upgrade (or LOCK_FLAGS="--upgrade-package numpy").
UV_COMPILE := $(VENV)/bin/uv pip compile pyproject.toml --universal --generate-hashes \
              --python-version 3.11 -q $(LOCK_FLAGS)
lock:
	@test -x $(VENV)/bin/uv || $(MAKE) venv
	$(UV_COMPILE) --extra dev -o requirements/dev.txt
	$(UV_COMPILE) --extra service -c requirements/dev.txt -o requirements/service.txt
	$(UV_COMPILE) --extra spark -c requirements/dev.txt -o requirements/spark.txt
	$(UV_COMPILE) --extra image -c requirements/dev.txt -o requirements/image.txt

clean:
	rm -rf $(VENV) .data test-output
