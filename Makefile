# Two entry points (see README): `make artifact` runs the main job, `make test` the test suite.
# Both create .venv with the pinned dependencies when it is missing or pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: artifact test test-slow test-cluster bench install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,workflow,report]'
	touch $(STAMP)

install: $(STAMP)

# Main job: the default experiment suite (config/config.yaml: embedded data, nlp.tiny and cv.tiny, every
# system at 1, 2 and 4 stages on CPU) -> results/ (tables, figures, report.md), then the HTML report.
# The workflow's jobs call `python -m naspipe` (installed in the venv with its workflow and report extras),
# so the venv's bin/ goes first on PATH.
artifact: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores all --configfile config/config.yaml
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores 1 --configfile config/config.yaml \
		--report results/report.html
	@sed -n 3p results/published.md  # against workflow/published/config.json (docs/numerics.md)

# Lint and type checks first (pinned ruff and mypy, configured in pyproject.toml), then the tests.
test: $(STAMP)
	$(PY) -m ruff check naspipe tests benchmarks
	$(PY) -m mypy
	$(PY) -m pytest -q -n 2

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The workflow on a SLURM cluster (two nodes on this machine) started here (root; installs Debian's slurm, munge, mariadb when
# missing), the CI config submitted through profiles/slurm against a local run: docs/cluster.md, section 6.
test-cluster: $(STAMP)
	$(PY) -m pytest -q -m cluster tests/test_slurm_cluster.py

bench: $(STAMP)
	$(PY) benchmarks/bench_scheduler.py

clean:
	rm -rf $(VENV) runs results .snakemake *.egg-info
