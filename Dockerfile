# syntax=docker/dockerfile:1.7
#
# The statecore project image: one image for every pod the Helm chart (helm/statecore) starts.
#
#   Airflow components   args: airflow api-server | scheduler | dag-processor | triggerer | db migrate
#   KubernetesExecutor   the executor's own `python -m airflow.sdk.execution_time...` command
#   Spark on Kubernetes  args: driver ... | executor ...   (what Spark gives its driver/executor pods)
#
# Contents: Python 3.11, Java 17, the exact packages of requirements.lock (Airflow 3.3.2,
# PySpark 4.2.0, deltalake, ...) plus `pip install --no-deps .`, the DAGs (dags/), Airflow
# plugins (plugins/) and PySpark jobs (jobs/), and the JARs cluster-side Spark SQL needs to read
# and write Delta tables on S3 (Delta Lake for Spark 4.2, delta-storage, hadoop-aws + AWS SDK).
#
# Build and push (needs network access to PyPI, Debian and Maven Central):
#
#   docker build -t registry.example.com/data/statecore:0.1.0 .
#   docker push registry.example.com/data/statecore:0.1.0
#
# Build arguments:
#   PYTHON_IMAGE        base image; Debian bookworm, whose default JDK is 17
#   DELTA_VERSION       Delta Lake release; 4.4.x is the first built for Spark 4.2
#   DELTA_SPARK_ARTIFACT  Maven artifact for the Spark minor of the pinned pyspark (Delta >= 4.1
#                       publishes delta-spark_<spark minor>_2.13; the unsuffixed delta-spark_2.13
#                       is a compatibility alias and not guaranteed to target Spark 4.2)
#   HADOOP_AWS_VERSION  defaults to the Hadoop version of the hadoop-client JARs in pyspark
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
ARG DELTA_VERSION=4.4.1
ARG DELTA_SPARK_ARTIFACT=delta-spark_4.2_2.13
ARG HADOOP_AWS_VERSION=
ARG REQUIRE_KUBERNETES_PROVIDER=true
WORKDIR /src

# Dependencies first (cached while only the code changes): exactly the lock, nothing resolved.
COPY requirements.lock ./
RUN python -m venv /opt/venv \
 && pip install --no-deps -r requirements.lock

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

# Delta Lake + S3A JARs for cluster-side Spark SQL. Resolved the way `spark-submit --packages`
# does (Ivy, with transitive dependencies), then copied into pyspark's jars/, skipping any
# artifact pyspark already ships so Spark's own versions stay the only ones on the classpath.
RUN python - <<'PY'
import os, re, shutil, subprocess, sys, tempfile
from pathlib import Path
import pyspark

spark_home = Path(pyspark.__file__).parent
jars = spark_home / "jars"
spark_minor = ".".join(pyspark.__version__.split(".")[:2])
artifact = os.environ["DELTA_SPARK_ARTIFACT"]
if not artifact.startswith(f"delta-spark_{spark_minor}_"):
    sys.exit(f"{artifact} does not match pyspark {pyspark.__version__} (want delta-spark_{spark_minor}_2.13)")
hadoop = os.environ.get("HADOOP_AWS_VERSION") or re.match(
    r"hadoop-client-api-(.+)\.jar", next(p.name for p in jars.glob("hadoop-client-api-*.jar"))
).group(1)
delta = os.environ["DELTA_VERSION"]
packages = [f"io.delta:{artifact}:{delta}", f"io.delta:delta-storage:{delta}", f"org.apache.hadoop:hadoop-aws:{hadoop}"]
print("resolving", *packages, flush=True)

ivy = Path(tempfile.mkdtemp())
noop = ivy / "noop.py"
noop.write_text("")
subprocess.run(
    [str(spark_home / "bin" / "spark-submit"), "--master", "local[1]", "--conf", f"spark.jars.ivy={ivy}",
     "--packages", ",".join(packages), str(noop)],
    check=True,
)

def artifact_id(name: str) -> str:
    return re.sub(r"-\d[\w.+-]*\.jar$", "", name)

shipped = {artifact_id(p.name) for p in jars.glob("*.jar")}
for jar in sorted((ivy / "jars").glob("*.jar")):
    name = jar.name.split("_", 1)[1] if "_" in jar.name else jar.name  # Ivy names them group_artifact-version
    if artifact_id(name) in shipped:
        print("  already in pyspark:", name)
        continue
    shutil.copy2(jar, jars / name)
    print("  added:", name)
shutil.rmtree(ivy)
PY

# --- final image --------------------------------------------------------------------------------
FROM base
ARG AIRFLOW_UID=50000
ARG DELTA_VERSION=4.4.1
ARG DELTA_SPARK_ARTIFACT=delta-spark_4.2_2.13
LABEL org.opencontainers.image.title="statecore" \
      org.opencontainers.image.description="Airflow 3.3.2 + statecore + PySpark 4.2 with Delta Lake ${DELTA_VERSION} (${DELTA_SPARK_ARTIFACT})"
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

COPY --chmod=0755 <<'SH' /usr/local/bin/statecore-entrypoint
#!/bin/bash
# Entrypoint of the statecore image (under tini).
#   driver ... | executor ...  Spark on Kubernetes pods: start the driver or an executor with the
#                              arguments and environment Spark gives those pods
#   anything else              run it as is (airflow ..., python ..., bash)
set -eo pipefail

case "${1:-}" in
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    java_opts=()
    for v in "${!SPARK_JAVA_OPT_@}"; do java_opts+=("${!v}"); done
    classpath="${SPARK_CONF_DIR:-${SPARK_HOME}/conf}:${SPARK_HOME}/jars/*"
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"; fi
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${classpath}:${PWD}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
SH

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
