# The two commands of the README: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tensortap-installed

.PHONY: test demo lint typecheck unit bench images clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP) lint typecheck unit

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(PY) -m ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(PY) -m mypy

unit: $(STAMP)
	$(PY) -m pytest -q

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

# The README's pictures (needs Debian's chromium): a report and a TensorPlot.
images: $(STAMP)
	PY=$(PY) bash docs/images/make_images.sh

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
