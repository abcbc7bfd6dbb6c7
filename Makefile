# edgevllm: the two commands of the README.
#   make image TARGET=spark   build a verified vLLM image for a target (thor | spark)
#   make test                 run the whole test suite (end-to-end builds on the real engine included)
# Both set up what they need: a virtualenv in .venv and, where missing and run as root on Debian,
# the Docker engine, buildx, qemu/binfmt (.ci/install-engine.sh).

PYTHON ?= python3
VENV   ?= .venv
TARGET ?= spark
ARGS   ?=
PYTEST_ARGS ?=
BIN := $(VENV)/bin

.PHONY: image test test-fast test-needs lint venv engine render clean

$(BIN)/.edgevllm-installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,lint]'
	touch $@

venv: $(BIN)/.edgevllm-installed

engine:
	@bash .ci/ensure-engine.sh

image: venv engine
	$(BIN)/inv build --target $(TARGET) $(ARGS)

render: venv
	$(BIN)/inv render --target $(TARGET) --out out/render-$(TARGET) $(ARGS)

test: venv engine test-needs lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# What the suite needs besides the engine (emulation of the other platform, debootstrap, ...),
# named before it starts.
test-needs:
	@bash .ci/test-needs.sh

# The fast loop: every test that needs no Docker engine (under two minutes).
test-fast: venv
	$(BIN)/python -m pytest -m "not e2e" -q $(PYTEST_ARGS)

# ruff (pyflakes, isort, bugbear, 100 columns) and mypy on every package, tests/ and bench/.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) out .pytest_cache
