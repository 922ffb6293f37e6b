# One command each, on a fresh machine with Python >= 3.10 and Java 17:
#   make demo   set up .venv with the runtime only and run the ingest job on generated data (Spark local[*])
#   make test   add the test extra (Airflow, moto, SeaweedFS, ...) to .venv and run the test suite
#   make bench-peers  install the peers (.[bench]) and run benchmarks/peers.py
#   make dist   pack the runtime environment for a Spark cluster into build/lancepart-env.tar.gz
#               (./spark-submit.sh ships it to the executors when --master is not local)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the runtime alone (what `make demo` needs): no test extra (Airflow, moto, SeaweedFS, ...)
RUNTIME_STAMP := $(VENV)/.runtime
# Runtime-only environment for the executors: a fresh venv with a non-editable install of the
# package (no test/bench extras), packed with venv-pack (the `dist` extra).
DIST_VENV := build/dist-venv
ARCHIVE := build/lancepart-env.tar.gz

.PHONY: setup setup-runtime demo test lint bench bench-peers dist clean

$(RUNTIME_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup-runtime: $(RUNTIME_STAMP)

setup: $(STAMP)

demo: setup-runtime
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

# The versions installed in .venv, when it exists, constrain the build: the executors then run the
# driver's pyarrow and lance. pyspark's jars (460 MB) stay out: executors run the cluster's own Spark
# and its pyspark.zip. PYTHON_PREFIX=/usr links the archive's bin/python to /usr/bin/python3 on the
# executors instead of the interpreter it was built with (same X.Y needed). docs/deployment.md.
dist: $(ARCHIVE)

$(ARCHIVE): pyproject.toml Makefile $(shell find lancepart -name '*.py')
	rm -rf $(DIST_VENV) $@ $@.tmp
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(if $(wildcard $(PY)),$(PY) -m pip list --format=freeze --exclude-editable > build/dist-constraints.txt)
	$(DIST_VENV)/bin/python -m pip install --quiet $(if $(wildcard $(PY)),-c build/dist-constraints.txt) '.[dist]'
	$(DIST_VENV)/bin/venv-pack --quiet --prefix $(DIST_VENV) --output $@.tmp --format tar.gz \
	    $(if $(PYTHON_PREFIX),--python-prefix $(PYTHON_PREFIX)) \
	    --exclude 'lib/python*/site-packages/pyspark/jars/*' \
	    --exclude 'lib/python*/site-packages/venv_pack*' --exclude 'bin/venv-pack'
	mv $@.tmp $@
	rm -rf $(DIST_VENV)
	@du -h $@

clean:
	rm -rf $(VENV) build demo-namespace .pytest_cache
