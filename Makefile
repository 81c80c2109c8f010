# The two commands of the README: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tensortap-installed

# MXNet 1.9.1 needs NumPy 1.23: its own environment, where the MXNet tests and the core's tests
# (the core must run on NumPy 1.23 too) run. Where MXNet cannot be installed, they are skipped.
MXVENV ?= .venv-mxnet
MXPY := $(MXVENV)/bin/python
MXSTAMP := $(MXVENV)/.tensortap-installed
MXNET_TESTS := tests/mxnet tests/format/test_format.py tests/format/test_roundtrip.py \
	tests/trials/test_trial_api.py tests/hook/test_hook.py tests/core/test_save_config.py \
	tests/core/test_reductions.py tests/core/test_collections.py tests/trials/test_step_block.py \
	tests/viz/test_embeddings.py tests/viz/test_tensor_plot.py

.PHONY: test demo lint typecheck unit mxnet bench images clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP) lint typecheck unit mxnet

$(MXSTAMP): pyproject.toml
	rm -f $(MXVENV)/UNAVAILABLE
	( test -x $(MXPY) || $(PYTHON) -m venv $(MXVENV) ) \
		&& $(MXPY) -m pip install --quiet --upgrade pip \
		&& $(MXPY) -m pip install --quiet -e '.[mxnet-test]' \
		|| { mkdir -p $(MXVENV); \
		echo "MXNet 1.9.1 could not be installed here (pip said why above)" \
		> $(MXVENV)/UNAVAILABLE; }
	touch $@

mxnet: $(MXSTAMP)
	@if [ -f $(MXVENV)/UNAVAILABLE ]; then \
		echo "SKIPPED the MXNet tests: $$(cat $(MXVENV)/UNAVAILABLE)"; \
	else $(MXPY) -m pytest -q $(MXNET_TESTS); fi

# mypy over src and tests (pyproject.toml says which): `make lint` runs it too.
lint: $(STAMP) typecheck
	$(PY) -m ruff check src tests bench examples
	$(PY) -m ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(PY) -m mypy

# The suite runs in parallel, one worker per core up to 4 (pytest-xdist), a test module's tests
# on one worker (--dist loadfile: a module's shared fixtures are made once). TEST_WORKERS=0
# runs it in this process, serially.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))

unit: $(STAMP)
	$(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile

demo: $(STAMP)
	$(PY) examples/demo.py

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/bench_format.py
	$(PY) bench/bench_rules.py
	$(PY) bench/bench_jobs.py
	$(PY) bench/bench_keras.py
	$(PY) bench/bench_xgboost.py
	$(PY) bench/bench_s3.py
	$(PY) -m bench.detection
	$(PY) -m bench.detection.generated --split all
	$(PY) bench/bench_fuzz.py
	$(PY) bench/bench_serve.py
	$(PY) bench/bench_runs_table.py
	$(PY) bench/bench_long.py

# The README's pictures (needs Debian's chromium): a report and a TensorPlot.
images: $(STAMP)
	PY=$(PY) bash docs/images/make_images.sh

clean:
	rm -rf $(VENV) $(MXVENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
