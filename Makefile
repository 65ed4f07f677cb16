PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[test]"
	touch $@

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py rundemo

# The suite runs in TEST_WORKERS processes (pytest-xdist); each has its own test database
# and Redis database (tests/conftest.py). TEST_WORKERS=0 runs it in one process. Tests go
# to workers one by one in collection order (browser tests last: see tests/conftest.py).
TEST_WORKERS ?= 2

test: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_WORKERS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

clean:
	rm -rf var test-artifacts
