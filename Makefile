# Two entry points (see README): `make artifact` runs the main job, `make test` the test suite.
# Both create .venv with the pinned dependencies when it is missing or pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
OUT    ?= runs/demo

.PHONY: artifact test test-slow bench install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Main job: the reproducibility demo (sequential reference vs CSP over 2 and 4 stages).
artifact: $(STAMP)
	$(PY) -m naspipe train --system sequential --stages 1 --steps 64 --out $(OUT)/sequential
	$(PY) -m naspipe train --system csp --stages 2 --steps 64 --out $(OUT)/csp-2
	$(PY) -m naspipe train --system csp --stages 4 --steps 64 --out $(OUT)/csp-4
	$(PY) -m naspipe compare $(OUT)/sequential $(OUT)/csp-2 $(OUT)/csp-4

# Lint and type checks first (pinned ruff and mypy, configured in pyproject.toml), then the tests.
test: $(STAMP)
	$(PY) -m ruff check naspipe tests benchmarks
	$(PY) -m mypy
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) benchmarks/bench_scheduler.py

clean:
	rm -rf $(VENV) runs *.egg-info
