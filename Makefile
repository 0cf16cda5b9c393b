# Two commands do all the set-up: `make audit` and `make test`.
# Where python3 already imports torch, triton, numpy, hypothesis, mpmath and pytest (the GPU
# machine), that interpreter is used as is; otherwise a virtualenv is built in .venv with the
# local CPU build of torch (torch==2.13.0) and triton from the registry.
SHELL := /bin/bash
VENV := .venv
SYS_PY ?= python3
HAVE_SYS := $(shell $(SYS_PY) -c "import torch, triton, numpy, hypothesis, mpmath, pytest, sympy" >/dev/null 2>&1 && echo yes)
ifeq ($(HAVE_SYS),yes)
PY ?= $(SYS_PY)
SETUP :=
else
PY ?= $(VENV)/bin/python
SETUP := $(VENV)/.installed
endif
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
# Small tensors on 2 cores: torch's intra-op thread pool costs more than it gives (measured ~10x on
# the property suite); the two cores are used by pytest-xdist workers instead.
export OMP_NUM_THREADS ?= 1
PYTEST_ARGS ?= -n 2
# No pip cache: the venv is ~2.1 GB, and a cached copy of the triton wheel would add to it on a small disk
# (a CI run once ran out of space installing triton).
PIP = $(VENV)/bin/python -m pip install -q --no-cache-dir

.PHONY: test audit setup clean test-gpu answer-key bench

setup: $(SETUP)

$(VENV)/.installed: pyproject.toml
	@free=$$(df -Pm . | awk 'NR==2 {print $$4}'); if [ "$${free:-0}" -lt 2500 ]; then \
	    echo "make setup: $$free MB free here; the venv takes about 2100 MB (triton 1000, torch 750): the install may run out of space" >&2; fi
	$(SYS_PY) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "torch==2.13.0"
	$(PIP) triton numpy hypothesis mpmath pytest pytest-xdist sympy matplotlib
	$(PIP) --no-deps -e .
	touch $@

# The CPU suite: references, proofs, and the Triton kernel through the interpreter (fp32/fp16).
test: $(SETUP)
	TRITON_INTERPRET=$${TRITON_INTERPRET-$$($(PY) -c "import torch;print(0 if torch.cuda.is_available() else 1)")} \
	$(PY) -m pytest -q $(PYTEST_ARGS)

audit: $(SETUP)
	TRITON_INTERPRET=$${TRITON_INTERPRET-$$($(PY) -c "import torch;print(0 if torch.cuda.is_available() else 1)")} \
	$(PY) -m flashcheck audit $(AUDIT_ARGS)

# The GPU suite (GPU tests included; the slow tier stays out through addopts' -m "not slow").
# One thread per worker (OMP_NUM_THREADS: numpy's BLAS and torch's CPU ops): 16 workers with 16 threads each
# oversubscribed the H100 machine's 16 cores. The longest tests are collected first (tests/conftest.py,
# GPU_LONGEST_FIRST) and handed out one at a time (--maxschedchunk: pytest-xdist >= 3.4), so none starts late.
test-gpu: $(SETUP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -q -n $${GPU_WORKERS:-16} --dist load \
	    $$($(PY) -m pytest --help | grep -q maxschedchunk && echo --maxschedchunk 1)

# The validate answer key (tests/test_validate_gpu.py, slow tier): six targets, each timed on an idle GPU machine.
answer-key: $(SETUP)
	$(PY) -m pytest -v -s -m slow tests/test_validate_gpu.py

bench: $(SETUP)
	$(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .hypothesis .pytest_cache audit-report
