# Everything runs in a project-local virtual environment that `make setup` creates from
# pyproject.toml alone, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= cpu,triton,test

.PHONY: setup test test-suite matrix example examples regen bench instructions clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py build_ffi.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	rm -f src/ur_cffi/_ur.cpython-*.so  # a `make regen` module would shadow pip's _ur.abi3.so
	$(PY) -m pip install -e ".[$(EXTRAS)]"
	touch $@

# Every supported oneAPI release in its own environment (tests/release_matrix.py), then the
# whole suite on the newest, in .venv.
test: matrix test-suite

test-suite: setup
	$(PY) -m pytest

matrix: setup
	$(PY) tests/release_matrix.py

example: setup
	$(PY) examples/demo.py

examples: setup
	for f in examples/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# Rebuild the raw layer from whatever ur_api.h is found (UR_INCLUDE_DIR, oneAPI, the wheel).
regen: setup
	$(PY) build_ffi.py

# dpctl for its comparison rows (the test extra has it too, for tests/test_interop.py).
$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -e ".[$(EXTRAS),bench]"
	touch $@

bench: $(VENV)/.bench-installed
	$(PY) -m benchmarks

# Instructions per call of the hot paths, counted by callgrind (needs valgrind; minutes).
# INSTRUCTIONS_ARGS=--stub-ur: ur_cffi's own Python alone, the same from run to run.
INSTRUCTIONS_ARGS ?=
instructions: setup
	$(PY) -m benchmarks.instructions $(INSTRUCTIONS_ARGS)

clean:
	rm -rf build $(VENV) .venv-releases src/ur_cffi/_ur.c src/ur_cffi/_ur*.so src/*.egg-info
