# Two commands on a fresh machine: `make check` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned for the install step only: 2.13.0 is the CPU wheel on this machine's disk;
# an unpinned torch would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: venv check test lint clean

$(BIN)/ddpdoctor: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet "$(TORCH_PIN)" -e ".[test]"
	touch $@

venv: $(BIN)/ddpdoctor

check: venv
	$(BIN)/ddpdoctor check --nproc 2

test: venv
	$(BIN)/ruff check ddpdoctor tests benchmarks setup.py
	$(BIN)/python -m pytest -q -ra tests

lint: venv
	$(BIN)/ruff check ddpdoctor tests benchmarks setup.py

clean:
	rm -rf $(VENV) build dist *.egg-info
