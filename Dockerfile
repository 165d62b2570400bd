# syntax=docker/dockerfile:1.7
#
# The statecore project image: one image for every pod the Helm chart (helm/statecore) starts.
#
#   Airflow components   args: airflow api-server | scheduler | dag-processor | triggerer | db migrate
#   KubernetesExecutor   the executor's own `python -m airflow.sdk.execution_time...` command
#   Spark on Kubernetes  args: driver ... | executor ...   (what Spark gives its driver/executor pods)
#
# Contents: Python 3.11, Java 17, the exact packages of requirements.lock (the runtime lock:
# Airflow 3.3.2, PySpark 4.2.0, deltalake, psycopg2, ...; no test tools) plus
# `pip install --no-deps .` (statecore and its Airflow provider statecore_airflow), the DAGs
# (dags/), Airflow plugins (plugins/) and PySpark jobs (jobs/), and the JARs cluster-side Spark SQL
# needs to read and write Delta tables on S3 and to read Kafka (jars/pom.xml, the pom `make jars`
# resolves for the tests: Delta Lake for Spark 4.2, the Kafka source,
# hadoop-aws + the AWS SDK's S3 client; scripts/resolve_spark_jars.py). The entrypoint is
# scripts/statecore-entrypoint.sh.
#
# Build and push (needs network access to PyPI, Debian and Maven Central):
#
#   docker build -t registry.example.com/data/statecore:0.1.0 .
#   docker push registry.example.com/data/statecore:0.1.0
#
# Build arguments:
#   PYTHON_IMAGE        base image; Debian bookworm, whose default JDK is 17
#   AIRFLOW_UID         non-root user id; the chart's `uid` value must match (default 50000)
#   REQUIRE_KUBERNETES_PROVIDER  fail the build when apache-airflow-providers-cncf-kubernetes is
#                       missing: SparkSubmitOperator with a k8s:// master and KubernetesExecutor
#                       both need it

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- runtime base: Python 3.11 + Java 17 ----------------------------------------------------
FROM ${PYTHON_IMAGE} AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# --- build: the virtualenv and the Spark JARs ------------------------------------------------
FROM base AS build
ARG REQUIRE_KUBERNETES_PROVIDER=true
WORKDIR /src

# Dependencies first (cached while only the code changes): exactly the lock, nothing resolved.
COPY requirements.lock ./
RUN python -m venv /opt/venv \
 && pip install --no-deps -r requirements.lock

# The JARs of jars/pom.xml (the pom the tests resolve), resolved by Maven and
# added to pyspark's jars/ (see the script); they depend on the lock and the pom only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
COPY jars/pom.xml jars/
COPY scripts/resolve_spark_jars.py scripts/
RUN python scripts/resolve_spark_jars.py --into-pyspark \
 && rm -rf /root/.m2

COPY . ./
RUN pip install --no-deps . \
 && pip check \
 && mkdir -p dags plugins jobs \
 && if [ "$REQUIRE_KUBERNETES_PROVIDER" = true ] \
      && ! python -c "import airflow.providers.cncf.kubernetes" 2>/dev/null; then \
      echo "requirements.lock lacks apache-airflow-providers-cncf-kubernetes, which Spark on Kubernetes" \
           "from Airflow (k8s:// master) and KubernetesExecutor need; add it to the airflow extra and" \
           "re-lock, or build with --build-arg REQUIRE_KUBERNETES_PROVIDER=false" >&2; \
      exit 1; \
    fi

# --- final image --------------------------------------------------------------------------------
FROM base
ARG AIRFLOW_UID=50000
LABEL org.opencontainers.image.title="statecore" \
      org.opencontainers.image.description="Airflow 3.3.2 + statecore + PySpark 4.2 with Delta Lake (jars/pom.xml)"
# Airflow's convention: a fixed non-root uid in group 0, so any uid in group 0 works as well.
RUN useradd --uid "${AIRFLOW_UID}" --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
 && mkdir -p /opt/airflow/logs /opt/statecore/home /opt/statecore/warehouse \
 && chown -R "${AIRFLOW_UID}:0" /opt/airflow /opt/statecore /home/airflow \
 && chmod -R g=u /opt/airflow /opt/statecore /home/airflow

COPY --from=build /opt/venv /opt/venv
# Code is root-owned and read-only for the runtime user. dags/ and jobs/ are siblings as in the
# repository (DAGs find their job files at ../jobs).
COPY --from=build /src/dags/ /opt/airflow/dags/
COPY --from=build /src/plugins/ /opt/airflow/plugins/
COPY --from=build /src/jobs/ /opt/airflow/jobs/

COPY --chmod=0755 scripts/statecore-entrypoint.sh /usr/local/bin/statecore-entrypoint

ENV AIRFLOW_HOME=/opt/airflow \
    STATECORE_HOME=/opt/statecore/home \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    PYTHONPATH=/opt/airflow \
    HOME=/home/airflow

USER ${AIRFLOW_UID}
WORKDIR /opt/airflow
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/statecore-entrypoint"]
CMD ["airflow", "version"]
