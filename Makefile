# jaxdet: the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
WORKDIR ?= runs/demo

.PHONY: install install-test install-export install-tf-export test-tf-export demo test test-quick lint bench \
	peer-venv bench-peer clean notebooks notebooks-run docs wheel install-torch test-torch

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e .
	@touch $@

## ONNX export: the onnx extra (jax2onnx, onnx, ONNX Runtime; the test extra includes it).
$(VENV)/.installed-export: $(VENV)/.installed
	$(PIP) install -e '.[onnx]'
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -e '.[test]'
	@touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

install-export: $(VENV)/.installed-export

## The tests that need PyTorch (.pth files written by torch.save; the default suite skips
## them): the files holding them, with the torch extra added to the test venv. PyPI's Linux
## torch brings its CUDA libraries (several GB); TORCH_INDEX=https://download.pytorch.org/whl/cpu
## installs the CPU-only build (about 200 MB) first instead.
TORCH_INDEX ?=
TORCH_TESTS = $(shell grep -rlE --include='test_*.py' 'importorskip\("torch"\)|^ *import torch' tests)
$(VENV)/.installed-torch: $(VENV)/.installed-test
	$(if $(TORCH_INDEX),$(PIP) install --index-url $(TORCH_INDEX) "torch>=2.6")
	$(PIP) install -e '.[test,torch]'
	@touch $@

install-torch: $(VENV)/.installed-torch

test-torch: install-torch
	$(PY) -m pytest -q -rs $(TORCH_TESTS)

## Generate shapes data, train the tiny shapes_demo detector, evaluate and print COCO metrics.
demo: install
	$(VENV)/bin/jaxdet demo --workdir $(WORKDIR)

## Install the test extras and run the whole suite.
## Each phase says its wall time (.ci/phase); pytest lists its 25 slowest tests. Budget: 15 min.
test: install-test
	.ci/phase lint $(VENV)/bin/ruff check src tests benchmarks examples/*.py docs/generate
	.ci/phase contracts $(VENV)/bin/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 .ci/phase docs $(VENV)/bin/mkdocs build --strict --quiet
	.ci/phase pytest $(PY) -m pytest -q -n 2 --dist loadgroup --durations=25

## The quick tier, the loop while editing (at most 3 minutes on 2 cores): every test that
## starts no process and compiles nothing large (tests/suite_tiers.py says which and checks).
test-quick: install-test
	$(PY) -m pytest -q -n 2 -m "not slow and not exhaustive" --durations=10

## A wheel in dist/ (configs, native sources and sample photos inside); pip install it anywhere.
wheel: install-test
	$(PY) -m build --wheel --outdir dist .

## The manual as a site in site/ (strict: a broken link or anchor fails the build).
docs: install-test
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

## The examples' .ipynb notebooks from their .py sources (jupytext pairs; outputs kept).
notebooks: install-test
	$(VENV)/bin/jupytext --quiet --update --to ipynb examples/*.py

## Run every notebook at full size in a scratch folder and keep its outputs in the .ipynb
## (what the docs site shows; about 10 minutes on a 2-core CPU).
notebooks-run: notebooks
	$(PY) tests/docs/run_notebooks.py examples/*.ipynb

## TF SavedModel / TFLite export needs TensorFlow (~600 MB): its own venv (with the ONNX
## extras too: every runtime in one place), never in make test.
TF_VENV ?= .venv-tf
$(TF_VENV)/.installed: pyproject.toml
	@test -x $(TF_VENV)/bin/python || $(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip --disable-pip-version-check -q install --upgrade pip
	$(TF_VENV)/bin/python -m pip --disable-pip-version-check -q install -e '.[tf-export,onnx]' \
		"pytest>=8,<9.2" "pytest-xdist>=3.5"
	@touch $@

install-tf-export: $(TF_VENV)/.installed

## The export tests with TensorFlow present: SavedModel and TFLite parity included.
test-tf-export: install-tf-export
	$(TF_VENV)/bin/python -m pytest -q tests/export

## The benchmark peer (torch + torchvision, ~5 GB) lives in its own venv, never in make test.
PEER_VENV ?= .venv-peer
$(PEER_VENV)/.installed: pyproject.toml
	@test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip --disable-pip-version-check -q install --upgrade pip
	$(PEER_VENV)/bin/python -m pip --disable-pip-version-check -q install -e . torchvision
	@touch $@

peer-venv: $(PEER_VENV)/.installed

## jaxdet vs torchvision RetinaNet-R50-FPN at 640x640 (train step and inference, one process).
bench-peer: peer-venv
	$(PEER_VENV)/bin/python -m benchmarks.throughput.vs_torchvision

## Our own throughput figures (no torch needed).
bench: install
	$(PY) -m benchmarks.throughput.train --config retinanet_resnet50_fpn_640 --batch-size 2 \
		--steps 3 --set precision=fp32
	$(PY) -m benchmarks.throughput.inference --config retinanet_resnet50_fpn_640 \
		--batch-sizes 1 8 --set precision=fp32

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks examples/*.py docs/generate
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf runs .pytest_cache
