# jaxdet: the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
export JAX_COMPILATION_CACHE_DIR ?= $(HOME)/.cache/jaxdet/jax
WORKDIR ?= runs/demo

.PHONY: install install-test demo test lint bench clean

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e .
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -e '.[test]'
	@touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

## Generate shapes data, train the tiny shapes_demo detector, evaluate and print COCO metrics.
demo: install
	$(VENV)/bin/jaxdet demo --workdir $(WORKDIR)

## Install the test extras and run the whole suite.
test: install-test
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -q -n 2 --dist loadgroup

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf runs .pytest_cache
