# One command each, on a fresh machine with Python >= 3.10 and Java 17:
#   make demo   set up .venv and run the ingest job on generated data (Spark local[*])
#   make test   set up .venv and run the test suite
#   make bench-peers  install the peers (.[bench]) and run benchmarks/peers.py
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench bench-peers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	./spark-submit.sh jobs/ingest.py --config configs/demo.yaml

test: setup
	$(PY) -m ruff check lancepart tests jobs benchmarks airflow_dags
	$(PY) -m pytest

bench: setup
	$(PY) benchmarks/murmur3_bench.py
	$(PY) benchmarks/ingest.py
	cd benchmarks && ../$(PY) read.py && ../$(PY) read_e2e.py && ../$(PY) compact.py && ../$(PY) join.py

bench-peers: setup
	$(PY) -m pip install --quiet -e '.[bench]'
	cd benchmarks && ../$(PY) peers.py

clean:
	rm -rf $(VENV) build demo-namespace .pytest_cache
