# One entry point for people and CI. Every target installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv bytecode test soak coverage test-unit test-integration lint demo bench bench-compare stack-up stack-down stack-status clean

help:
	@echo "make demo          bring the local stack up, replicate a live workload to MariaDB and PostgreSQL"
	@echo "make bench         extraction and apply benchmarks (JSON in bench/results/)"
	@echo "make bench-compare beside Debezium and native MariaDB replication, with ratios"
	@echo "make test          lint, unit tests and integration tests against the real servers"
	@echo "make soak          the same with the long fault runs (20 kills per kill test)"
	@echo "make coverage      make test's tests under coverage (TREP_SOAK=1 for soak's)"
	@echo "make stack-up | stack-down | stack-status"
	@echo "make lint          ruff + mypy"
	@echo "make clean         stop everything and remove .run/ (data and logs)"

# The project's download cache (stack/settings.py): servers' jars and packages, uv's wheels,
# mypy's cache.
CACHE_DIR ?= $(or $(TREP_CACHE_DIR),$(HOME)/.cache/tungsten-kafka)
UV_VERSION := 0.13.9
WHEELS := $(CACHE_DIR)/wheels
PYSPARK := $(shell sed -n 's/^ *"pyspark==\([^"]*\)",.*/\1/p' pyproject.toml)

# The venv is rebuilt only when its inputs change. uv installs from its cache in the project's
# cache directory by linking, not unpacking (pyspark alone is 400 MB of files). PyPI has
# pyspark as a source archive only, which uv fetched and built again at every install (the
# registry answers its revalidation as modified): its wheel is built once into the cache's
# wheels/ and found there. Then every venv links the same jar files, with the same times,
# so a new checkout at the same path keeps its Spark class archive (stack/class_archive.py).
# uv reads neither pip.conf nor PIP_* variables: pip's find-links are passed on. The compiled
# modules (setup.py) are built in place by the editable install, again when their sources
# change. Every installed module is compiled to bytecode at install (--compile-bytecode): uv
# does not by default, and with PYTHONDONTWRITEBYTECODE set (as on these machines) nothing
# else writes it, so every process compiled SQLAlchemy, pydantic, kazoo... from source at
# each start: 0.9-1.1 s of a consumer group's start-up on this machine.
$(STAMP): pyproject.toml setup.py $(wildcard */*.pyx */*/*.pyx */*.pxd)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and "Python 3.11 is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	@ls $(WHEELS)/pyspark-$(PYSPARK)-*.whl >/dev/null 2>&1 || \
		$(PY) -m pip wheel -q --no-deps -w $(WHEELS) pyspark==$(PYSPARK)
	UV_CACHE_DIR=$(CACHE_DIR)/uv $(PY) -m uv pip install -q --python $(PY) \
		$(addprefix --find-links ,$(WHEELS) $(PIP_FIND_LINKS)) -e '.[dev]' --compile-bytecode
	@touch $@

# The project's own modules, compiled again wherever their source changed (compileall skips
# the rest): the editable install leaves them to be compiled at each process start.
PACKAGES := extractor thl_topics consumers replicator trep stack console demo bench
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j0 $(PACKAGES) > /dev/null

venv: bytecode

# mypy's cache outlives the checkout (a clean clone checks in 1 s what takes 16 s cold); it
# checks each cached module against its source's hash, so a changed file is checked again.
lint: bytecode
	$(VENV)/bin/ruff check .
	MYPY_CACHE_DIR=$(CACHE_DIR)/mypy $(VENV)/bin/mypy .

# Most integration tests wait on servers and child processes, not on a core: a few workers
# share the one stack (tests/integration/sharing.py). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 3
# One test at a time to each worker as it frees up (xdist's default hands out chunks of
# dozens: one worker went on alone for four minutes at the end of a run).
XDIST = -n $(TEST_WORKERS) --maxschedchunk=1

test-unit: bytecode
	$(VENV)/bin/pytest tests/unit

# The session fixtures start the servers the tests need (once) and stop the ones they started.
test-integration: bytecode
	$(VENV)/bin/pytest tests/integration $(XDIST)

# Every test's time (setup and gate waits included) in .run/tests/junit.xml, for finding
# where the run's minutes go; the 15 slowest are printed at the end.
test: lint bytecode
	$(VENV)/bin/pytest tests $(XDIST) --junitxml=.run/tests/junit.xml

# The long versions of the fault tests (tests/integration/soak.py): before a release, and
# after a change to the runtime, an applier's commit path or the extractor's restart path.
soak: lint bytecode
	TREP_SOAK=1 $(VENV)/bin/pytest tests $(XDIST)

# make test's run under coverage ([tool.coverage] in pyproject.toml), every Python process
# of it combined; the least covered files and the total are printed, the whole report is in
# .run/coverage/report.txt and coverage.json. Slower than make test (tracing), so not its
# timing. The tests' status is make's.
COVERAGE := COVERAGE_FILE=$(CURDIR)/.run/coverage/data $(VENV)/bin/coverage
coverage: lint bytecode
	rm -rf .run/coverage && mkdir -p .run/coverage
	$(COVERAGE) run -m pytest tests $(XDIST); status=$$?; \
	$(COVERAGE) combine -q && $(COVERAGE) report > .run/coverage/report.txt && \
	head -22 .run/coverage/report.txt && tail -3 .run/coverage/report.txt && \
	$(COVERAGE) json -q -o .run/coverage/coverage.json && exit $$status

demo: bytecode
	$(PY) -m stack up
	$(PY) -m demo.run_demo

bench: bytecode
	$(PY) bench/decode_bench.py
	$(PY) -m stack up zookeeper kafka mariadb-source mariadb-target postgresql
	$(PY) bench/extract_bench.py
	$(PY) bench/apply_bench.py
	$(PY) -m stack up zookeeper kafka mariadb-source elasticsearch
	$(PY) bench/elasticsearch_bench.py
	$(PY) -m stack up apicurio
	$(PY) bench/changes_bench.py
	$(PY) -m stack up zookeeper kafka mariadb-source mariadb-target
	$(PY) bench/ops_bench.py
	$(PY) -m stack up zookeeper kafka mariadb-source ferretdb
	$(PY) bench/mongodb_bench.py
	$(PY) -m stack up zookeeper kafka mariadb-source mariadb-target
	$(PY) bench/parallel_bench.py
	$(PY) -m stack up zookeeper kafka mariadb-source spark
	$(PY) bench/warehouse_bench.py --e2e-rows 600000 --e2e-runs 2

# Side by side on one binlog: Debezium (Kafka Connect from Maven Central), a native replica.
bench-compare: bytecode
	$(PY) -m stack up zookeeper kafka mariadb-source mariadb-target postgresql spark
	$(PY) bench/compare.py

stack-up: bytecode
	$(PY) -m stack up

stack-down: bytecode
	$(PY) -m stack down

stack-status: bytecode
	$(PY) -m stack status

clean: stack-down
	rm -rf .run
