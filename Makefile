# Two entry points, each creating its own virtual environment in .venv:
#   make demo   install rnnx and run the export-and-verify demo on the shipped example
#   make test   install the test dependencies (CPU torch, keras, jax) and run the tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test test-slow test-gpu bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.demo-installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e .
	touch $@

$(VENV)/.test-installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[torch,keras,jax,test]'
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	@mkdir -p out
	@echo "== which recurrent groups does the checkpoint hold, and what does cuDNN's blob look like?"
	$(BIN)/rnnx layout examples/encoder.safetensors | head -n 6
	@echo "== PyTorch checkpoint -> ONNX with native LSTM nodes, checked in ONNX Runtime against the float64 reference"
	$(BIN)/rnnx convert examples/encoder.safetensors -o out/encoder.onnx --seq-lens-input
	@echo "== the same weights packed for cuDNN, re-read and checked"
	$(BIN)/rnnx convert examples/encoder.safetensors -o out/encoder.cudnn.safetensors --to cudnn
	@echo "== and back from the ONNX file to canonical weights"
	$(BIN)/rnnx convert out/encoder.onnx -o out/encoder.rnnx.safetensors --json > out/encoder.report.json
	@echo "== verify the ONNX model against the checkpoint at several lengths and batches (backends not installed are listed as skipped)"
	$(BIN)/rnnx verify out/encoder.onnx --against examples/encoder.safetensors --seq-lens 1,17,64 --batch 1,8 --report out/encoder.verify.json
	@echo "demo passed: outputs in out/"

# -n auto: one pytest-xdist worker per core (the run is CPU-bound; 2 cores halve it)
test: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q -n auto --dist loadscope $(PYTEST_ARGS)

test-slow: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q -n auto --dist loadscope --slow $(PYTEST_ARGS)

# On a machine with an NVIDIA GPU, with a Python that has a CUDA build of torch and the
# base dependencies: runs from the source tree, no virtual environment.
test-gpu:
	PYTHONPATH=. $(PYTHON) -m pytest -q -p no:cacheprovider tests/gpu
	PYTHONPATH=. $(PYTHON) -m rnnx.engines.cudnn_check

# Benchmarks (not part of the test run): writes benchmarks/results.{json,md} and the table in docs/benchmarks.md.
bench: $(VENV)/.test-installed
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
