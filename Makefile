# Two commands on a fresh machine: `make check` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned for the install step only: 2.13.0 is the CPU wheel on this machine's disk;
# an unpinned torch would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: venv check test lint clean browser

# Three test processes on two cores: most of a slow test is waiting (for a hang deadline,
# a rank's start-up, a timeout), so three overlap it; one file per process (--dist
# loadfile) keeps a module's shared jobs in one place. PARALLEL= runs them one by one.
# A worker that dies (a test past its timeout: pytest-timeout's thread method ends the
# process) is not replaced: under loadfile xdist 3.8 can wait for its replacement forever
# (pytest-xdist#784, #1323; the landing CI of 76006d5 hung at its last matrix test until
# CI's limit), and without one the run ends with "worker gwN crashed while running TEST".
PARALLEL ?= -n 3 --dist loadfile --max-worker-restart=0

$(BIN)/ddpdoctor: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet "$(TORCH_PIN)" -e ".[test]"
	touch $@

venv: $(BIN)/ddpdoctor

check: venv
	$(BIN)/ddpdoctor check --nproc 2

# Debian's headless Chromium for the HTML views' browser tests (tests/lib/html_browser.py): the
# set-up installs it (as root, with apt-get), never a test; without it they say skipped.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "headless Chromium is not installed (apt-get install chromium): the browser tests will be skipped"

# Two tiers, one suite (docs/development.md, "Two tiers"). `make test`, the gate (under 10
# minutes here): ruff, mypy, every test that starts no process and each mode's main
# end-to-end path. `make test-e2e`: the rest of the end-to-end matrix (modules marked
# `matrix`: other launchers, frameworks, strategies, nodes, planted faults). On two cores
# the suite is CPU-bound in its ~150 jobs' `import torch`, so the whole of it cannot be
# both under 10 minutes and every end-to-end job; CI (.ci/run) runs both tiers, `make
# test-all` too.
GATE := not (slow and matrix)
MATRIX := slow and matrix

test: venv browser
	$(BIN)/ruff check ddpdoctor tests benchmarks tools setup.py
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -ra $(PARALLEL) -m "$(GATE)" tests

.PHONY: test-e2e test-all
test-e2e: venv browser
	$(BIN)/python -m pytest -q -ra $(PARALLEL) -m "$(MATRIX)" tests

test-all: test test-e2e

# The tests without the `slow` marker, for every edit; tests/lib/spawn_report.py names those
# among them that still start a process (they belong under `slow`).
.PHONY: test-quick
# Bytecode written (an environment's PYTHONDONTWRITEBYTECODE would make every worker
# rewrite every test module's asserts again, ~10 s each run) and each file on one worker
# (a module's corpus fixture computed once, not once per worker)
test-quick: venv
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -ra -m "not slow" -n 3 \
		--dist loadfile --max-worker-restart=0 -p tests.lib.spawn_report tests

lint: venv
	$(BIN)/ruff check ddpdoctor tests benchmarks tools setup.py
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist *.egg-info

# Issue #30: every CUDA / NCCL / NVML path on one real GPU, in one bounded run (under 8 min
# by default); without a GPU every GPU step is "skipped: no GPU (why)" and it exits 0.
# On a lent GPU machine, with no network and no .venv: GPU_PYTHON=python3 (the image's
# torch) after `pip install --no-deps` of ddpdoctor; see docs/development.md.
GPU_PYTHON ?= $(BIN)/python
GPU_VERIFY_DEADLINE ?= 480
GPU_VERIFY_OUT ?= gpu-verify
GPU_VERIFY_ONLY ?=

.PHONY: gpu-verify
gpu-verify: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),venv)
	$(GPU_PYTHON) tools/gpu_verify.py --deadline $(GPU_VERIFY_DEADLINE) \
		--out $(GPU_VERIFY_OUT) $(if $(GPU_VERIFY_ONLY),--only $(GPU_VERIFY_ONLY))
